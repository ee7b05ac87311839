"""Debian's chromium driven by the playwright Python package (never a downloaded browser), and
`bench view` in a subprocess on a free loopback port, for the dashboard's browser tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
# Without these, Chromium on this closed network tries its background services and stalls.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} missing in CI (scripts/setup.sh installs Debian's chromium)")
        pytest.skip(f"{CHROMIUM} missing: bash scripts/setup.sh installs it")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(
    what: str, argv: list[str], cwd: Path, env: dict[str, str], log: Path, answers: str
) -> subprocess.Popen[bytes]:
    """A server (`what`: `bench view`, `bench serve`) started from `argv`, its output in `log`,
    returned once `answers` (a URL of it) answers; if it exits first, or does not answer within
    60 s, a RuntimeError with its output."""
    with log.open("w") as out:  # the child keeps its own copy
        # a file, not an unread pipe: a full pipe would block the server
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(answers, timeout=1)
            return proc
        except OSError as exc:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited: {log.read_text()}") from exc
            time.sleep(0.2)
    raise RuntimeError(f"{what} did not answer within 60 s")


class Viewer:
    def __init__(self, cwd: Path, env: dict[str, str], paths: list[str]):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = cwd / "server.log"
        self.proc = start_server(
            "bench view",
            [sys.executable, "-m", "benchflow_site.cli", "view", *paths]
            + ["--port", str(self.port), "--no-browser"],
            cwd,
            env,
            self.log,
            self.base + "/",
        )

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
