"""A tiny MCP server with one tool, get_word: JSON-RPC over stdio, or streamable HTTP (--http PORT).

Standard library only, so the sandbox needs nothing but python3 and no network to fetch a package.
"""

import http.server
import json
import os
import sys

WORD = os.environ.get("WORD", "lighthouse")
TOOL = {
    "name": "get_word",
    "description": "Returns the word of the day.",
    "inputSchema": {"type": "object", "properties": {}},
}


def answer(message):
    """The reply to one JSON-RPC message; None for a notification."""
    if not isinstance(message, dict) or "id" not in message:
        return None
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        result = {
            "protocolVersion": params.get("protocolVersion", "2025-03-26"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "word-of-the-day", "version": "1.0"},
        }
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call" and params.get("name") == "get_word":
        result = {"content": [{"type": "text", "text": f"The word of the day is {WORD}."}]}
    elif method == "ping":
        result = {}
    else:
        error = {"code": -32601, "message": f"method not found: {method}"}
        return {"jsonrpc": "2.0", "id": message["id"], "error": error}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def serve_stdio():
    for line in sys.stdin:
        if line.strip():
            reply = answer(json.loads(line))
            if reply is not None:
                print(json.dumps(reply), flush=True)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")
        replies = [r for r in map(answer, body if isinstance(body, list) else [body]) if r]
        if not replies:  # notifications and responses only
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = json.dumps(replies if isinstance(body, list) else replies[0]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # no server-initiated stream
        self.send_response(405)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_DELETE = do_GET


if __name__ == "__main__":
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()
    else:
        serve_stdio()
