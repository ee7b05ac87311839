"""Tool shapes the three agent CLIs send (reference/agent-clis.md), for the mock tests."""

from __future__ import annotations

SOLUTION = "#!/bin/bash\necho hello > /app/out.txt\n"
COMMAND = "bash <<'BENCHFLOW_EOF'\n#!/bin/bash\necho hello > /app/out.txt\nBENCHFLOW_EOF"
OBJ = {"type": "object"}
BASH_SCHEMA = {
    **OBJ,
    "properties": {
        "command": {"type": "string"},
        "timeout": {"type": "number"},
        "description": {"type": "string"},
    },
    "required": ["command"],
}
CHAT_BASH = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "parameters": {
                **OBJ,
                "properties": {"command": {"type": "string"}, "workdir": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]
CODEX_TOOLS = [
    {"type": "function", "name": "write_stdin", "parameters": OBJ},
    {
        "type": "function",
        "name": "exec_command",
        "parameters": {
            **OBJ,
            "properties": {"cmd": {"type": "string"}, "yield_time_ms": {"type": "number"}},
            "required": ["cmd"],
        },
    },
    {"type": "web_search"},
]
