"""The offline `mock` provider: oracle, scripted and echo replies, decided inside the proxy.

mock/oracle makes the agent run the task's solution with the agent's own shell tool,
found by name in the request's `tools` and called with arguments built from its schema.
"""

from __future__ import annotations

from typing import Any

from proxy import jsonio
from proxy.mock_wire import Rendered, Reply, render
from proxy.registry import AttemptState
from proxy.usage import Usage

SHELL_TOOL_NAMES = (
    "Bash",
    "bash",
    "exec_command",
    "shell",
    "run_shell_command",
    "execute_bash",
    "run_command",
    "terminal",
    "local_shell",
)
COMMAND_KEYS = ("command", "cmd", "script", "commands", "code", "input")
FINAL_TEXT = "Done."
SIDE_TEXT = "Solving the task"
ORACLE_MARK = "bforacle"


def tool_specs(protocol: str, tools: Any) -> list[tuple[str, dict[str, Any]]]:
    """(name, JSON schema of the arguments) of each function tool the request offers; a tool in a
    namespace (a Responses request's {"type": "namespace", "tools": [...]}) as "namespace.name"."""
    specs: list[tuple[str, dict[str, Any]]] = []
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace" and isinstance(tool.get("name"), str):
            specs += [
                (f"{tool['name']}.{name}", schema)
                for name, schema in tool_specs(protocol, tool.get("tools"))
            ]
            continue
        if protocol == "messages":
            name, schema = tool.get("name"), tool.get("input_schema")
        elif isinstance(tool.get("function"), dict):
            name, schema = tool["function"].get("name"), tool["function"].get("parameters")
        else:
            name, schema = tool.get("name"), tool.get("parameters")
        if isinstance(name, str):
            specs.append((name, schema if isinstance(schema, dict) else {}))
    return specs


def find_shell_tool(protocol: str, tools: Any) -> tuple[str, dict[str, Any]] | None:
    specs = tool_specs(protocol, tools)
    by_name = dict(specs)
    for name in SHELL_TOOL_NAMES:
        if name in by_name:
            return name, by_name[name]
    for name, schema in specs:
        if any(word in name.lower() for word in ("bash", "shell", "exec")):
            return name, schema
    return None


def shell_args(schema: dict[str, Any], command: str) -> dict[str, Any]:
    """Arguments for a shell tool, built from its JSON schema."""
    props = schema.get("properties") or {}
    required = [r for r in schema.get("required") or [] if isinstance(r, str)]
    key = next((k for k in COMMAND_KEYS if k in props), None)
    if key is None:
        key = next((r for r in required if (props.get(r) or {}).get("type") == "string"), "command")
    is_argv = (props.get(key) or {}).get("type") == "array"
    args: dict[str, Any] = {key: ["bash", "-lc", command] if is_argv else command}
    for name in required:
        if name in args:
            continue
        prop = props.get(name) or {}
        if "default" in prop:
            args[name] = prop["default"]
        else:
            args[name] = {
                "string": "",
                "integer": 0,
                "number": 0,
                "boolean": False,
                "array": [],
                "object": {},
            }.get(str(prop.get("type")), "")
    # Long solutions: ask for the longest wait the tool allows, where it has such a knob.
    if "timeout" in props and (props["timeout"] or {}).get("type") in ("integer", "number"):
        args["timeout"] = 600000  # Claude Code's Bash: milliseconds, 10 min at most
    if "yield_time_ms" in props:
        args["yield_time_ms"] = 600000  # Codex's exec_command: wait for the command to end
    if "description" in props and "description" not in args:
        args["description"] = "Run the task's solution script"
    return args


def heredoc(script: str) -> str:
    """`bash <<'BENCHFLOW_EOF'` around the script, with a marker the script does not use."""
    marker = "BENCHFLOW_EOF"
    while marker in script:
        marker += "_"
    return f"bash <<'{marker}'\n{script.rstrip(chr(10))}\n{marker}"


def has_tool_result(protocol: str, body: dict[str, Any], mark: str) -> bool:
    """Whether the conversation holds a result of one of our calls (its id carries `mark`)."""
    if protocol == "responses":
        items = body.get("input")
        for item in items if isinstance(items, list) else ():
            if (
                isinstance(item, dict)
                and item.get("type", "").endswith("call_output")
                and mark in str(item.get("call_id", ""))
            ):
                return True
        return False
    for msg in body.get("messages") or ():
        if not isinstance(msg, dict):
            continue
        if protocol == "chat":
            if msg.get("role") == "tool" and mark in str(msg.get("tool_call_id", "")):
                return True
        elif isinstance(msg.get("content"), list):
            for block in msg["content"]:
                if (
                    isinstance(block, dict)
                    and block.get("type") == "tool_result"
                    and mark in str(block.get("tool_use_id", ""))
                ):
                    return True
    return False


def _call_id(protocol: str, mark: str, n: int) -> str:
    return f"{'toolu' if protocol == 'messages' else 'call'}_{mark}_{n}"


def _shell_reply(protocol: str, body: dict[str, Any], command: str, call_id: str) -> Reply:
    tool = find_shell_tool(protocol, body.get("tools"))
    if tool is None:
        return Reply(text="The mock model needs a shell tool, and this request offers none.")
    name, schema = tool
    return Reply(tool_name=name, tool_args=shell_args(schema, command), call_id=call_id)


def _tool_reply(
    protocol: str, body: dict[str, Any], name: str, args: dict[str, Any], call_id: str
) -> Reply:
    """A call of the tool the script names, with its arguments as given (a "$LAST_OUTPUT.key" string
    becomes that field of the last tool result, as JSON: the id a spawn tool returned)."""
    return Reply(tool_name=name, tool_args=_fill(args, protocol, body), call_id=call_id)


def _not_offered(protocol: str, body: dict[str, Any], name: str) -> Reply | None:
    offered = [n for n, _ in tool_specs(protocol, body.get("tools"))]
    if name in offered:
        return None
    return Reply(
        text=f"The mock script calls the tool {name!r}, which this request does not "
        f"offer (it offers: {', '.join(offered) or 'none'})."
    )


LAST_OUTPUT = "$LAST_OUTPUT."


def _fill(value: Any, protocol: str, body: dict[str, Any]) -> Any:
    if isinstance(value, str) and value.startswith(LAST_OUTPUT):
        try:
            found = jsonio.loads(last_tool_output(protocol, body) or "null")
        except ValueError:
            found = None
        for key in value[len(LAST_OUTPUT) :].split("."):
            found = found.get(key) if isinstance(found, dict) else None
        return found
    if isinstance(value, dict):
        return {k: _fill(v, protocol, body) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, protocol, body) for v in value]
    return value


def last_tool_output(protocol: str, body: dict[str, Any]) -> str | None:
    """The text of the conversation's last tool result, in any of the three wire formats."""
    if protocol == "responses":
        items = body.get("input")
        outputs = (
            [
                i.get("output")
                for i in items
                if isinstance(i, dict) and str(i.get("type", "")).endswith("call_output")
            ]
            if isinstance(items, list)
            else []
        )
        return _text(outputs[-1]) if outputs else None
    found: Any = None
    for msg in body.get("messages") or ():
        if not isinstance(msg, dict):
            continue
        if protocol == "chat" and msg.get("role") == "tool":
            found = msg.get("content")
        elif protocol == "messages" and isinstance(msg.get("content"), list):
            for block in msg["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    found = block.get("content")
    return None if found is None else _text(found)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def _last_user_text(protocol: str, body: dict[str, Any]) -> str:
    items = body.get("input") if protocol == "responses" else body.get("messages")
    if isinstance(items, str):
        return items
    for msg in reversed(items if isinstance(items, list) else []):
        if isinstance(msg, dict) and msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, str):
                return content
            for part in content if isinstance(content, list) else ():
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    return str(part["text"])
    return ""


def decide(protocol: str, body: dict[str, Any], state: AttemptState, kind: str) -> Reply:
    """The mock model's next reply for this request."""
    if kind == "echo":
        return Reply(text="echo: " + _last_user_text(protocol, body)[:200])
    if not body.get("tools"):
        return Reply(text=SIDE_TEXT)  # title and other side calls
    if kind == "script":
        replies = state.spec.script_replies or []
        n = state.script_index
        if n >= len(replies):
            state.script_index += 1
            return Reply(text=FINAL_TEXT)
        entry = replies[n]
        if "tool" in entry and (missing := _not_offered(protocol, body, str(entry["tool"]))):
            # left for the next request that offers it: a subagent, with tools of its own, may
            # ask in between (its call gets this text, and ends its turn)
            return missing
        state.script_index += 1
        if "error" in entry:
            err = entry["error"] or {}
            return Reply(error_status=int(err.get("status", 500)), error_body=err.get("body"))
        if "shell" in entry:
            return _shell_reply(
                protocol, body, str(entry["shell"]), _call_id(protocol, "bfscript", n)
            )
        if "tool" in entry:
            return _tool_reply(
                protocol,
                body,
                str(entry["tool"]),
                entry.get("args") or {},
                _call_id(protocol, "bfscript", n),
            )
        return Reply(text=str(entry.get("text", "")))
    # oracle
    if has_tool_result(protocol, body, ORACLE_MARK):
        return Reply(text=FINAL_TEXT)
    solution = state.spec.solution_text
    if not solution:
        return Reply(text="mock/oracle has no solution script for this attempt.")
    return _shell_reply(protocol, body, heredoc(solution), _call_id(protocol, ORACLE_MARK, 0))


def respond(
    protocol: str, body: dict[str, Any], raw_len: int, state: AttemptState, kind: str, stream: bool
) -> tuple[Rendered, Usage | None]:
    """The rendered reply and its deterministic usage: input len(body)//4, output len(reply)//4."""
    reply = decide(protocol, body, state, kind)
    model = str(body.get("model") or "mock")
    usage = Usage(raw_len // 4, len(reply.payload()) // 4)
    usage.total_tokens = usage.input_tokens + usage.output_tokens
    include = bool((body.get("stream_options") or {}).get("include_usage"))
    rendered = render(protocol, reply, model, stream, usage, include_usage=include)
    return rendered, (usage if reply.error_status is None else None)
