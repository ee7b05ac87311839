"""result.json keeps its shape: five kinds of trial, run for real, against what the runner wrote
before its result became a typed TrialResult (tests/e2e/golden/result_shapes.json).

Every key (nested ones too) must be the same, and every value but the ones that differ from run to
run (times, ids, paths). `BENCH_WRITE_GOLDEN=1` writes the file anew from the code under test.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    EXAMPLES,
    job_dirs,
    make_agent,
    only_result,
    run_args,
    run_bench,
    write_task,
)

pytestmark = pytest.mark.docker

GOLDEN = Path(__file__).parent / "golden" / "result_shapes.json"
# values that differ from run to run: when, how long, which container, which folder
VOLATILE = {
    "started_at",
    "finished_at",
    "rollout_name",
    "sandbox_id",
    "timing",
    "busy_seconds",
    "elapsed_sec",
}

FAILING = "#!/bin/sh\necho 'not the answer' > /app/answer.txt\nexit 3\n"
SLEEPER = "#!/bin/sh\necho working\nsleep 60\n"
# two model calls through the proxy with the official wire format; a turn budget of 1 refuses the second
CALLER = """#!/bin/sh
python3 - <<'EOF'
import json, os, urllib.request
url = os.environ["OPENAI_BASE_URL"] + "/chat/completions"
body = {"model": os.environ["BENCHFLOW_MODEL"], "messages": [{"role": "user", "content": "hi"}]}
for i in range(2):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={
        "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
        "Content-Type": "application/json"})
    try:
        print(urllib.request.urlopen(req).read().decode()[:300], flush=True)
    except Exception as exc:
        print("refused:", exc, flush=True)
EOF
sleep 30
"""


def shape(value: Any, key: str = "") -> Any:
    """The value with what differs between runs replaced by a marker (keys kept)."""
    if key in VOLATILE:
        return {k: "<volatile>" for k in value} if isinstance(value, dict) else "<volatile>"
    if isinstance(value, dict):
        return {k: shape(v, k) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return value


def _only_result(jobs: Path) -> dict[str, Any]:
    [job] = job_dirs(jobs)
    return only_result(job)


def test_result_json_has_the_keys_and_values_it_had_before(docker_client, bench_env, tmp_path):
    # given the hello-world example, and a task whose agent has two seconds
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "hello-world", tasks / "hello-world")
    write_task(
        tasks,
        "slow",
        test_sh="test -f /app/done && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
        toml="[agent]\ntimeout_sec = 2\n",
        dockerfile="FROM python:3.11-slim\nWORKDIR /app\n",
    )
    for name, text in (("failing.sh", FAILING), ("sleeper.sh", SLEEPER), ("caller.sh", CALLER)):
        make_agent(tmp_path, name, text)
    runs = {
        "oracle": run_args("oracle", include=["hello-world"], jobs_dir="j-oracle"),
        "nop": run_args("nop", include=["hello-world"], jobs_dir="j-nop"),
        "failing_script": run_args(
            "script:./failing.sh", include=["hello-world"], jobs_dir="j-failing"
        ),
        "timeout": run_args(
            "script:./sleeper.sh", "--retry-attempts", "0", include=["slow"], jobs_dir="j-timeout"
        ),
        "budgeted_mock_model": run_args(
            "script:./caller.sh",
            "-m",
            "mock/oracle",
            "--turn-budget",
            "1",
            include=["slow"],
            jobs_dir="j-budget",
        ),
    }
    # when each runs
    found = {}
    for name, args in runs.items():
        proc = run_bench(args, env=bench_env, cwd=tmp_path)
        assert proc.returncode in (0, 1), proc.stderr
        found[name] = shape(_only_result(tmp_path / args[-1]))
    # then each result.json is what the runner wrote before, key for key and value for value
    if os.environ.get("BENCH_WRITE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(found, indent=2, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())
    for name in runs:
        assert found[name] == golden[name], name
