"""The task's sidecar: says the word of the day, and leaves a mark in the volume it shares with main."""

import http.server
import os
import pathlib

pathlib.Path("/shared/from-notes.txt").write_text("written by the notes service\n")


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = os.environ["WORD"].encode() if self.path == "/word" else b"?"
        self.send_response(200 if self.path == "/word" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


http.server.ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
