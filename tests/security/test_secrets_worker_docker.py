"""Hole 1 as the issue found it: an operator launches a job from the form with
`OPENAI_API_KEY=dummy` in the agent's environment, its attempt runs on a real `bench worker` (on
Redis) that holds the deployment's real key, and the agent prints its environment reversed. A
worker filled every secret-named key from its own environment, so the real key came back on the
trial's page. Now the value typed at launch reaches the worker sealed, and nothing of the
worker's own environment enters the sandbox: the real key is in no form anywhere, and the typed
value in none of the records (the job folder's settings, the index, the logs)."""

from __future__ import annotations

import secrets
import time

import pytest

from tests.e2e.scaleout import Cluster, shared_redis
from tests.runs.operations.server import Served
from tests.security.leaks import database_dump, leaks
from tests.security.served import Operator

# the agent prints every variable it was given, reversed and in base64
PRINTENV = r"""#!/bin/bash
while IFS= read -r -d '' pair; do
  value="${pair#*=}"; reversed=""
  for ((i=${#value}-1; i>=0; i--)); do reversed+="${value:i:1}"; done
  echo "${pair%%=*} reversed=$reversed"
  echo "${pair%%=*} base64=$(printf %s "$reversed" | base64 -w0)"
done < /proc/self/environ
"""


@pytest.mark.docker
def test_a_workers_key_never_reaches_the_sandbox_and_a_typed_one_reaches_it_sealed(
    tmp_path, bench_env, bench_database, docker_client
):
    real = "sk-proj-worker-" + secrets.token_hex(24)
    typed = "dummy-typed-" + secrets.token_hex(16)
    cluster = Cluster(bench_env, tmp_path, shared_redis(), bench_database)
    cluster.env["OPENAI_API_KEY"] = real  # the deployment's key, on the server and the worker
    served = Served(tmp_path, cluster.env)
    agent = served.tasks / "printenv.sh"
    agent.write_text(PRINTENV)
    agent.chmod(0o755)
    operator = Operator(served)
    try:
        worker = cluster.start_worker(slots=1)
        page = operator.launch(
            tasks_dir=str(served.tasks / "examples"),
            include="hello-world",
            agent=f"script:{agent}",
            agent_env=[f"OPENAI_API_KEY={typed}"],
            workers="on",
        )
        assert page.status_code == 303, page.text[-2000:]
        deadline = time.monotonic() + 240
        while not list(served.jobs.glob("*/summary.json")) and time.monotonic() < deadline:
            time.sleep(0.5)
        (job,) = [p.parent for p in served.jobs.glob("*/summary.json")]
        assert cluster.started(worker) == ["hello-world"]
        logs = [
            ("the server's log", served.log.read_text()),
            ("the worker's log", cluster.log(worker)),
            ("the index", database_dump(cluster.env, bench_database)),
        ]
        # the worker's own key: nowhere, in no form
        assert leaks(real, folders=[served.jobs], texts=logs) == []
        # the typed value reached the agent (it printed it, reversed) ...
        printed = "".join(p.read_text() for p in job.glob("hello-world__*/agent/*.txt"))
        assert f"OPENAI_API_KEY reversed={typed[::-1]}" in printed
        # ... and is in none of the records: settings, index, logs
        records = [p for p in job.rglob("*.json") if p.is_file()] + [job / "console.log"]
        written = [(str(p), p.read_text()) for p in records]
        assert leaks(typed, texts=[*written, *logs]) == []
    finally:
        operator.close()
        served.stop()
        cluster.stop()
