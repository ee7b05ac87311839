"""The launch form of a real `bench serve`, driven over HTTP by an operator: what an operator may
not do is refused beside its field with the reason, and nothing is created (no job folder).
- hole 2: a bash function (a name that is code) in the agent's environment;
- hole 10: `-a claude -m sonnet` on a server holding a Claude login its admin did not lend;
- hole 11: a script agent that is a link in a task root to a file outside it, and a mock reply
  script outside the task roots (which the proxy would read, and show in an error)."""

from __future__ import annotations

import html

from tests.conftest import job_dirs
from tests.runs.operations.server import Served
from tests.security.served import Operator

LOGIN = "sk-ant-oat01-the-servers-own-login-0123456789abcdef"
PRIVATE = "root:$6$hole11-private-0123456789abcdef:19000:0:99999:7:::"


def test_the_launch_form_refuses_what_an_operator_may_not_do_and_creates_nothing(
    tmp_path, bench_env
):
    private = tmp_path / "private"
    private.mkdir()
    (private / "shadow").write_text(PRIVATE)
    env = {**bench_env, "CLAUDE_CODE_OAUTH_TOKEN": LOGIN, "CLAUDE_CONFIG_DIR": str(private)}
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "BENCHFLOW_ALLOW_CLAUDE_LOGIN"):
        env.pop(name, None)
    served = Served(tmp_path, env)
    (served.tasks / "agent.sh").symlink_to(private / "shadow")
    operator = Operator(served)
    form = {"tasks_dir": str(served.tasks / "examples"), "include": "hello-world"}
    try:
        cases = [
            (
                {"agent": "oracle", "agent_env": ["BASH_FUNC_echo%%=() { cat /etc/shadow; }"]},
                "not an environment name",
            ),
            ({"agent": "oracle", "agent_env": ["LD_PRELOAD=/tmp/x.so"]}, "LD_PRELOAD is code"),
            ({"agent": "claude", "model": "sonnet"}, "Claude login of the server"),
            (
                {"agent": f"script:{served.tasks / 'agent.sh'}"},
                "not a file under a configured task root",
            ),
            (
                {"agent": "claude", "model": f"mock/script:{private / 'shadow'}"},
                "not a file under a configured task root",
            ),
        ]
        for fields, reason in cases:
            page = operator.launch(**form, **fields)
            text = html.unescape(page.text)
            assert page.status_code == 400 and reason in text, (fields, text[-2000:])
            assert LOGIN not in text and "hole11" not in text
        assert job_dirs(served.jobs) == []
    finally:
        operator.close()
        served.stop()
