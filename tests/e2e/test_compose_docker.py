"""Multi-container tasks (environment/docker-compose.yaml) run by Docker Compose, for real.

The fixture tests/tasksets/compose-internal/ has main and a sidecar on an internal-only network
with a volume they share: the agent reaches the sidecar by name, never the internet, and still
its model (the proxy listens inside main's network namespace). Every container, network and
volume of the attempt carries its labels, so the end of the job, a cancel and the reaper remove
them.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, job_dirs, make_agent, only_result, results_of, run_args, run_bench

pytestmark = pytest.mark.docker

FIXTURE = REPO / "tests" / "tasksets" / "compose-internal"

# An agent that does the task itself, and calls its model through the proxy as well.
AGENT = """#!/bin/bash
python3 - <<'PY'
import json, os, urllib.request as u
open("/app/answer.txt", "w").write(u.urlopen("http://notes:8000/word", timeout=10).read().decode())
try:
    u.urlopen("http://deb.debian.org/debian/", timeout=5)
    open("/app/internet.txt", "w").write("reachable")
except OSError as e:
    open("/app/internet.txt", "w").write(f"unreachable ({e})")
body = {"model": os.environ["BENCHFLOW_MODEL"], "messages": [{"role": "user", "content": "hi"}]}
req = u.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
                headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                         "Content-Type": "application/json"})
print(json.load(u.urlopen(req, timeout=60))["choices"][0]["message"]["content"])
PY
"""


def the_task(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE, tmp_path / "tasks" / FIXTURE.name)


def leftovers(client, job: Path) -> dict[str, list]:
    """Containers, networks and volumes the job left behind (by its folder: job names can clash
    with other runs')."""
    label = {"label": f"benchflow.job_dir={job.resolve()}"}
    return {
        "containers": client.api.containers(all=True, filters=label),
        "networks": client.api.networks(filters=label),
        "volumes": (client.api.volumes(filters=label) or {}).get("Volumes") or [],
    }


NOTHING = {"containers": [], "networks": [], "volumes": []}


def test_the_oracle_reaches_the_sidecar_not_the_internet_and_nothing_is_left(
    docker_client, bench_env, tmp_path
):
    # given a task whose main and sidecar share only an internal network and a volume
    the_task(tmp_path)
    # when the oracle runs it
    proc = run_bench(run_args("oracle"), env=bench_env, cwd=tmp_path)
    # then it read the sidecar's word and volume, and could not reach the internet
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["rewards"] == {"reward": 1.0}, result
    assert leftovers(docker_client, job) == NOTHING
    # and a second run builds neither main nor the sidecar again
    proc = run_bench(run_args("oracle", "--fresh"), env=bench_env, cwd=tmp_path)
    second = max(job_dirs(tmp_path / "jobs"))
    assert [r["rewards"] for r in results_of(second)] == [{"reward": 1.0}]
    assert not (second / "builds").exists()


def test_an_agent_in_a_compose_task_reaches_its_model_through_the_proxy(
    docker_client, bench_env, tmp_path
):
    # given an agent that asks the sidecar, tries the internet, and calls its model
    the_task(tmp_path)
    agent = make_agent(tmp_path, "agent.sh", AGENT)
    # when it runs with a model, main being on an internal network only
    proc = run_bench(run_args(f"script:{agent}", "-m", "mock/echo"), env=bench_env, cwd=tmp_path)
    # then the task passed and the model call went through the proxy, counted
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["rewards"] == {"reward": 1.0}, result
    assert result["agent_result"]["n_calls"] == 1
    log = (job / result["rollout_name"] / "agent" / "script.txt").read_text()
    assert "echo: hi" in log
    assert leftovers(docker_client, job) == NOTHING


def slow_compose_task(tmp_path: Path) -> None:
    """The fixture with an agent that sleeps: the project stays up until something stops it."""
    the_task(tmp_path)
    make_agent(tmp_path, "slow.sh", "#!/bin/bash\nsleep 300\n")


def wait_for_sidecar(client, jobs: Path, timeout: float = 120) -> Path:
    """The job's folder once its sidecar runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for job in job_dirs(jobs):
            running = client.api.containers(
                filters={
                    "label": [
                        f"benchflow.job_dir={job.resolve()}",
                        "com.docker.compose.service=notes",
                    ]
                }
            )
            if running:
                return job
        time.sleep(0.3)
    raise AssertionError("the sidecar never started")


def start_bench(args: list[str], env: dict, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "benchflow_site.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_an_interrupted_run_removes_the_sidecar_its_network_and_volume(
    docker_client, bench_env, tmp_path
):
    # given a compose task whose agent is still working
    slow_compose_task(tmp_path)
    bench = start_bench(run_args(f"script:{tmp_path / 'slow.sh'}"), bench_env, tmp_path)
    job = wait_for_sidecar(docker_client, tmp_path / "jobs")
    assert leftovers(docker_client, job)["networks"]  # labelled while they exist
    # when the run is interrupted
    bench.send_signal(signal.SIGINT)
    bench.communicate(timeout=120)
    # then every container, network and volume of the attempt is gone
    assert leftovers(docker_client, job) == NOTHING


def test_the_reaper_removes_a_dead_runs_sidecars_networks_and_volumes(
    docker_client, bench_env, tmp_path
):
    # given a compose task's project left behind by a run killed outright
    slow_compose_task(tmp_path)
    bench = start_bench(run_args(f"script:{tmp_path / 'slow.sh'}"), bench_env, tmp_path)
    job = wait_for_sidecar(docker_client, tmp_path / "jobs")
    bench.kill()
    bench.communicate(timeout=60)
    left = leftovers(docker_client, job)
    assert len(left["containers"]) == 2 and left["networks"] and left["volumes"], left
    labels = left["containers"][0]["Labels"]
    assert labels["benchflow.host"] == socket.gethostname() and labels["benchflow.attempt"]
    # when any later run starts (its reaper sweeps what dead owners left)
    from runs.sandboxes.owners import reap_orphans

    reap_orphans(docker_client)
    # then nothing of the dead run is left
    assert leftovers(docker_client, job) == NOTHING


def test_bench_tasks_check_refuses_what_cannot_be_honoured(bench_env, tmp_path):
    # given the fixture with a host port and the host's network added to its sidecar
    the_task(tmp_path)
    compose = tmp_path / "tasks" / FIXTURE.name / "environment" / "docker-compose.yaml"
    compose.write_text(
        compose.read_text().replace(
            "    networks: [inner]\n    environment:",
            '    network_mode: host\n    ports: ["8000:8000"]\n    environment:',
        )
    )
    # when it is checked
    proc = run_bench(["tasks", "check", "tasks"], env=bench_env, cwd=tmp_path)
    # then both are refused, each with its reason and fix, naming the file and the key
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert f"{compose}: services.notes.ports: ports is not honoured here" in out
    assert "fix: use expose" in out
    assert f"{compose}: services.notes.network_mode: network_mode host would join" in out


# Tries the sidecar and the internet, and calls its model: says what it reached.
PROBE = """#!/bin/bash
python3 - <<'PY'
import json, os, urllib.request as u
for name, url in (("sidecar", "http://notes:8000/word"), ("internet", "http://deb.debian.org/debian/")):
    try:
        u.urlopen(url, timeout=5)
        print(name, "reached")
    except OSError:
        print(name, "unreachable")
body = {"model": os.environ["BENCHFLOW_MODEL"], "messages": [{"role": "user", "content": "hi"}]}
req = u.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
                headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                         "Content-Type": "application/json"})
print("model", json.load(u.urlopen(req, timeout=60))["choices"][0]["message"]["content"])
PY
"""


def test_a_no_network_compose_task_puts_main_on_no_network_and_keeps_its_model(
    docker_client, bench_env, tmp_path
):
    # given the compose task made no-network in task.toml (as Harbor: main on network_mode none)
    the_task(tmp_path)
    toml = tmp_path / "tasks" / FIXTURE.name / "task.toml"
    toml.write_text(toml.read_text() + 'network_mode = "no-network"\n')
    agent = make_agent(tmp_path, "probe.sh", PROBE)
    # when an agent probes what it can reach
    proc = run_bench(run_args(f"script:{agent}", "-m", "mock/echo"), env=bench_env, cwd=tmp_path)
    # then neither the sidecar nor the internet, but its model yes
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    log = (job / result["rollout_name"] / "agent" / "script.txt").read_text()
    assert "sidecar unreachable" in log and "internet unreachable" in log, log
    assert "model echo: hi" in log, proc.stdout + proc.stderr
    assert leftovers(docker_client, job) == NOTHING
