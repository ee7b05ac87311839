"""A login belongs to its owner: where an agent may hold this machine's Claude login.

`-a claude` with a bare Claude model and no API key runs on the machine's Claude subscription: the
agent gets its OAuth token (CLAUDE_CODE_OAUTH_TOKEN) in its environment, or its credentials file
(~/.claude/.credentials.json) mounted read-only, and calls Anthropic directly, around the proxy.
Whoever runs `bench run` on their own machine lends their own login, and is told so before the
job starts. A job launched from `bench serve`, or an attempt on a `bench worker`, would lend the
server's or the worker's: only where its admin set BENCHFLOW_ALLOW_CLAUDE_LOGIN=1 there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

LOGIN_SETTING = "BENCHFLOW_ALLOW_CLAUDE_LOGIN"


def shared_login_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the admin of this server or worker lets jobs use its Claude login."""
    env = os.environ if environ is None else environ
    return env.get(LOGIN_SETTING, "").strip().lower() in ("1", "true", "yes")


def login_refused(model: str, where: str) -> str:
    """Why -m MODEL (a bare Claude model, no API key) cannot run on `where`."""
    return (
        f"-m {model} with no ANTHROPIC_API_KEY would use the Claude login of {where}: the agent "
        "in every sandbox would hold its token and call Anthropic around the proxy; fix: export "
        "ANTHROPIC_API_KEY there (its calls then go through the proxy), pass a provider-prefixed "
        f"-m (anthropic/..., mock/oracle), or, if its admin lends the login, set {LOGIN_SETTING}=1 "
        "there"
    )


def lent(credentials: Path | str) -> str:
    """What the agent will hold of a login (the file or the variable, never its value)."""
    if isinstance(credentials, Path):
        return f"{credentials} (mounted read-only into each sandbox)"
    return f"${credentials.removeprefix('env:')} (in each sandbox's environment)"
