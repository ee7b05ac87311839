"""Hole 5 of issue 28: a viewer's requests on files an agent wrote must not exhaust the server. A
trial page (and each fragment it loads) stays under 2 MB whatever the attempt holds, a raw file
is read from disk only as fast as the client takes it, and the caches are bounded in bytes. The
memory figure itself (under 100 MB) is benchmarks/viewer_memory_bench.py's."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import httpx
import pytest

from runs.results import transcript
from tests.e2e.browser import Viewer
from tests.jobfolders import result_doc, write_attempt, write_job, write_summary
from tests.security.site import bench_env

PAGE_MAX = 2_000_000
ROLLOUT = "flood__0000000a"
NASTY = "<\"&'" * 16_384  # 64 KiB that HTML escapes to five or six times as many bytes


def _flood(folder: Path) -> None:
    """What an agent (or the tests) can leave in /logs, and a result.json at its worst."""
    agent = folder / "agent"
    for i in range(1500):
        (agent / f"out-{i:04d}.txt").write_text(NASTY)
    deep = agent
    for level in range(15):  # paths of some 3,800 characters
        deep = deep / (f"{level:02d}" + '"<' * 124)
    deep.mkdir(parents=True)
    for i in range(60):
        (deep / (f"{i:02d}" + "&" * 200)).write_text(NASTY)
    sessions = agent / "sessions"
    sessions.mkdir()
    (sessions / "empty.jsonl").write_bytes(b"\n" * 10_000_000)
    # lines of some 3 MB: hundreds of messages and tool calls, each within its own limit
    small = NASTY[:4096]
    blocks = [{"type": "tool_result", "tool_use_id": '"' * 300, "content": small}] * 200
    calls = [{"type": "tool_use", "name": "<x>" * 100, "input": {"a": small}}] * 200
    line = {"type": "user", "message": {"role": '"' * 300, "content": blocks + calls}}
    (sessions / "wide.jsonl").write_text("\n".join([json.dumps(line)] * 10) + "\n")
    (sessions / "long.jsonl").write_bytes(b'{"a": "' + b"x" * (6 << 20) + b'"}\n')
    (folder / "trajectory").mkdir()
    call = {
        "model": "<m>" * 1000,
        "error": NASTY,
        "request": {"messages": [{"role": "user", "content": small}] * 100},
        "response": {"choices": [{"message": {"role": "assistant", "content": NASTY}}]},
    }
    (folder / "trajectory" / "llm_trajectory.jsonl").write_text(
        "\n".join([json.dumps(call)] * 45) + "\n"
    )
    (folder / "artifacts").mkdir()
    with (folder / "artifacts" / "big.bin").open("wb") as fh:
        for _ in range(64):
            fh.write(b"\0" * (1 << 20))


@pytest.fixture(scope="module")
def viewed(tmp_path_factory, postgres_template):
    root = tmp_path_factory.mktemp("bounded")
    database = postgres_template.create() if postgres_template is not None else None
    job = write_job(root / "jobs", agent="oracle", model=None, plan=["flood"])
    result = result_doc(
        "flood",
        ROLLOUT,
        1.0,
        rewards={f"r{i}<": 1.0 for i in range(5000)},
        error=NASTY * 20,
        notes=NASTY * 40,
    )
    folder = write_attempt(job, ROLLOUT, result)
    _flood(folder)
    write_summary(job, passed=1)
    viewer = Viewer(root, bench_env(root, database), [str(root / "jobs")])
    yield viewer, job
    viewer.stop()
    if database is not None:
        postgres_template.drop(database)


def test_a_trial_page_stays_under_2_mb_whatever_the_attempt_holds(viewed):
    viewer, job = viewed
    trial = f"{viewer.base}/jobs/{job.name}/flood/"
    base = f"{trial}{ROLLOUT}"
    client = httpx.Client(timeout=120, follow_redirects=True)
    first = client.get(trial)
    assert first.status_code == 200 and len(first.content) < PAGE_MAX, len(first.content)
    pages = {"trial page": first}
    # every page of the file listing
    count = int(re.search(r"page 1 of (\d+)", first.text).group(1))
    assert count > 1
    for n in range(2, count + 1):
        pages[f"files page {n}"] = client.get(trial, params={"files": n})
    # the session logs as entries (the first page, one far in, a line too long to read)
    for name, page in (("empty", 1), ("empty", 10**9), ("wide", 1), ("long", 1)):
        rel = f"agent/sessions/{name}.jsonl"
        pages[f"{name} log {page}"] = client.get(f"{base}/log/", params={"path": rel, "page": page})
    for page in (1, 2, 3):
        pages[f"transcript {page}"] = client.get(f"{base}/transcript/", params={"page": page})
    # the event stream's next pages, and a search across it
    html = first.text
    for n in range(3):
        more = re.search(r'class="more" data-url="([^"]+)"', html)
        if more is None:
            break
        answer = client.get(viewer.base + more.group(1).replace("&amp;", "&"))
        pages[f"stream page {n + 2}"], html = answer, answer.text
    search = re.search(r'id="stream-q" [^>]*data-url="([^"]+)"', first.text)
    assert search, "the trial page has its stream"
    url = viewer.base + search.group(1).replace("&amp;", "&")
    pages["stream search"] = client.get(url + "&q=%22")  # params= would replace the query
    for what, answer in pages.items():
        assert answer.status_code == 200, what
        assert len(answer.content) < PAGE_MAX, (what, len(answer.content))
    # and what is cut is still there: each listed file is a link away
    listed = sum(text.count("/files/agent/out-") for text in (p.text for p in pages.values()))
    assert listed >= 1500


def _rchar(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar")


def test_a_raw_file_is_read_from_disk_only_as_fast_as_the_client_takes_it(viewed):
    viewer, job = viewed
    # the job's pages are at its key; its name's URL says where
    moved = httpx.get(f"{viewer.base}/jobs/{job.name}/flood/{ROLLOUT}/files/artifacts/big.bin")
    path = moved.headers["location"]
    sock = socket.create_connection(("127.0.0.1", viewer.port), timeout=60)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    start = _rchar(viewer.proc.pid)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    received, lead = 0, 0
    # the server reads ahead of what the client has at most its buffers (a few MB), never the
    # whole 64 MB first (as it did, building the response in memory before sending a byte)
    while block := sock.recv(16 * 1024):
        received += len(block)
        lead = max(lead, _rchar(viewer.proc.pid) - start - received)
    sock.close()
    assert received > 64 << 20
    assert lead < 16 << 20, lead


def test_the_caches_of_line_indexes_and_fragments_are_bounded_in_bytes(tmp_path):
    from viewer import fragments

    # a 10 MB log of empty lines indexes in under a megabyte (it took ~400 MB)
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"\n" * 10_000_000)
    with empty.open("rb") as fh:
        index = transcript.line_index(fh)
    assert index.total == 10_000_000 and index.nbytes < 1 << 20
    # however many files are indexed, the cache holds at most its bytes
    for i in range(40):
        other = tmp_path / f"log-{i}.jsonl"
        other.write_bytes(b"\n" * (200_000 + i))
        with other.open("rb") as fh:
            transcript.line_index(fh)
    assert transcript._indexes.bytes <= transcript.INDEX_CACHE_BYTES
    # the fragment store, filled with large fragments, keeps its bytes
    for i in range(100):
        fragments._put((f"/jobs/x/trials/?q={i}", i), b"x" * (1 << 20))
    assert fragments._store.bytes <= fragments.KEEP_BYTES
    fragments._store.clear()
