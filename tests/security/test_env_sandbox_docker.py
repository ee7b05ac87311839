"""Hole 3 in a real sandbox: a task's ${VAR} read the runner's environment, and the task's oracle
printed what it got, where every viewer reads the log. Now a variable nobody allowed is unset to
the task (its default applies), and the runner's secret is in no form anywhere: not in the job
folder, not in the index, not in what `bench run` printed."""

from __future__ import annotations

import secrets

import pytest

from tests.conftest import job_dirs, only_result, run_bench, write_task
from tests.security.leaks import database_dump, leaks

# the oracle prints the variable every way it can think of
SOLVE = """python3 - <<'EOF'
import base64, os
value = os.environ.get("LEAK", "")
for text in (value, value[::-1]):
    print(text)
    print(base64.b64encode(text.encode()).decode())
print("LEAK=" + value)
EOF
"""


@pytest.mark.docker
def test_a_variable_nobody_allowed_never_reaches_the_sandbox(
    tmp_path, bench_env, bench_database, docker_client
):
    secret = "bf-deploy-" + secrets.token_hex(24)  # the runner's own deployment key
    write_task(
        tmp_path / "tasks",
        "printenv",
        test_sh="echo 1 > /logs/verifier/reward.txt\n",
        solve_sh=SOLVE,
        toml='[environment.env]\nLEAK = "${BENCHFLOW_SECRET_KEY:-none}"\n',
        dockerfile="FROM python:3.12-slim\nWORKDIR /app\n",
    )
    env = {**bench_env, "BENCHFLOW_SECRET_KEY": secret}
    done = run_bench(["run", "tasks", "-a", "oracle", "--jobs-dir", "jobs"], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    (job,) = job_dirs(tmp_path / "jobs")
    assert only_result(job)["rewards"] == {"reward": 1.0}
    found = leaks(
        secret,
        folders=[tmp_path / "jobs"],
        texts=[
            ("bench run's output", done.stdout + done.stderr),
            ("the index", database_dump(env, bench_database)),
        ],
    )
    assert found == []
    # the task got its default: the variable was not its to read
    attempt = next(p for p in job.iterdir() if p.name.startswith("printenv__"))
    assert any(b"LEAK=none" in p.read_bytes() for p in attempt.rglob("*") if p.is_file())
