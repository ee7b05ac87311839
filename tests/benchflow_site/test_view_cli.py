"""`bench view` and `bench serve` from the command line: errors that name the fix, loopback, login."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.conftest import run_bench
from tests.jobfolders import result_doc, write_attempt, write_job, write_summary

# bench view indexes the folders it is given and serves pages from the index
pytestmark = pytest.mark.database


def test_a_busy_port_is_named_with_its_fix(tmp_path, bench_env):
    (tmp_path / "jobs").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run_bench(
            ["view", "jobs", "--port", str(port), "--no-browser"], env=bench_env, cwd=tmp_path
        )
    assert out.returncode == 2
    assert f"port {port} on 127.0.0.1 is in use" in out.stderr and "--port" in out.stderr
    assert "bug" not in out.stderr


def test_a_missing_folder_is_named(tmp_path, bench_env):
    out = run_bench(["view", "nope", "--no-browser"], env=bench_env, cwd=tmp_path)
    assert out.returncode == 2 and "nope is not a folder" in out.stderr


def test_help_documents_allowed_hosts_and_the_options():
    from benchflow_site.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    serve_help = sub.choices["serve"].format_help()
    view_help = sub.choices["view"].format_help()
    assert "BENCHFLOW_ALLOWED_HOSTS" in serve_help and "login" in serve_help
    assert "--no-browser" in view_help and "--port" in view_help and "127.0.0.1" in view_help


@pytest.fixture
def served(tmp_path, bench_env):
    """`bench view` on a copied job folder the index has never seen, on a free port."""
    job = write_job(tmp_path / "jobs", plan=["hello"])
    write_attempt(job, "hello__00000001", result_doc("hello", "hello__00000001", 1.0))
    write_summary(job)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchflow_site.cli",
            "view",
            "jobs",
            "--port",
            str(port),
            "--no-browser",
        ],
        cwd=tmp_path,
        env=bench_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(base + "/", timeout=1)
            break
        except OSError:
            time.sleep(0.2)
    yield base, port, proc
    proc.terminate()
    proc.wait(10)


def test_bench_view_indexes_a_folder_it_has_not_seen_and_serves_it_on_loopback(served):
    base, port, proc = served
    page = (
        urllib.request.urlopen(base + "/jobs/2026-11-29__12-00-00/hello/", timeout=5)
        .read()
        .decode()
    )
    assert "hello" in page and "passed" in page
    listening = subprocess.run(
        ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True
    ).stdout
    assert [line.split()[3] for line in listening.splitlines()] == [f"127.0.0.1:{port}"]


def test_confirm_prints_the_decision_and_exits_3_on_reject(tmp_path, bench_env):
    # given a job opened with --confirm
    import re

    import httpx

    from tests.e2e.browser import free_port

    job = write_job(tmp_path / "jobs", plan=["hello"])
    write_attempt(job, "hello__00000001", result_doc("hello", "hello__00000001", 1.0))
    write_summary(job)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchflow_site.cli", "view", str(job), "--confirm"]
        + ["--port", str(port), "--no-browser"],
        cwd=tmp_path,
        env=bench_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        seen = []
        while not (line := proc.stdout.readline()).startswith("Viewing"):  # after the index's
            seen.append(line)
            assert line, "".join(seen)
        url = line.split(" at ", 1)[1].split(" ", 1)[0]
        with httpx.Client() as client:
            for _ in range(150):
                try:
                    page = client.get(url)
                    break
                except httpx.TransportError:
                    time.sleep(0.2)
            # then the job's page asks, and a rejection ends the command with exit 3
            assert 'id="confirm-bar"' in page.text
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
            done = client.post(
                f"http://127.0.0.1:{port}/confirm/",
                data={"decision": "rejected", "csrfmiddlewaretoken": token},
                headers={"Referer": url},
            )
        assert "Decision: " in done.text
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3 and "DECISION: rejected" in out


def test_confirm_needs_one_job(tmp_path, bench_env):
    (tmp_path / "jobs").mkdir()
    out = run_bench(["view", "jobs", "--confirm", "--no-browser"], env=bench_env, cwd=tmp_path)
    assert out.returncode == 2 and "--confirm needs one job folder" in out.stderr
