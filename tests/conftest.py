"""Shared fixtures: a Docker engine for tests marked `docker`, and the `bench` command as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.databases import Postgres, postgres_url

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "tasks"
# tests/tasksets/ are task folders: their tests run inside sandboxes, not in this suite
collect_ignore_glob = ["tasksets/*"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--database-only",
        action="store_true",
        help="run only the tests whose behaviour depends on the database: those that use the "
        "ORM in process (django_db) and those marked `database` (a process they start "
        "coordinates through it, or they check what it wrote there); the suite's second pass, "
        "on PostgreSQL, runs these alone",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A database test may use every database: on SQLite the leases are a file of their own
    (settings.py), read by pages as much as by workers, and the two are one database to a user."""
    by_fixture = {"db", "transactional_db", "live_server"}  # what pytest-django reads as a mark
    for item in items:
        marker = item.get_closest_marker("django_db")
        if marker is None and by_fixture.isdisjoint(getattr(item, "fixturenames", ())):
            continue
        args, kwargs = (marker.args, marker.kwargs) if marker is not None else ((), {})
        if "databases" not in kwargs:
            kwargs = {**kwargs, "databases": "__all__"}
            item.add_marker(pytest.mark.django_db(*args, **kwargs), append=False)
    if config.getoption("--database-only"):
        keep = [
            i
            for i in items
            if i.get_closest_marker("django_db") or i.get_closest_marker("database")
        ]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep


@pytest.fixture(scope="session")
def docker_client():
    """The real engine; started if it is not running. In CI a missing engine fails instead of skipping."""
    import docker

    try:
        from runs.sandboxes.engine import ensure_engine

        ensure_engine(lambda *_: None)
        client = docker.from_env(max_pool_size=32)
        client.api.ping()
    except Exception as exc:  # noqa: BLE001
        if os.environ.get("CI"):
            pytest.fail(f"Docker engine could not start in CI: {exc}")
        pytest.skip(f"Docker engine not reachable and could not be started: {exc}")
    return client


@pytest.fixture(scope="session")
def postgres_template():
    """On a PostgreSQL run of the suite: the template the tests' own databases are copied from."""
    url = postgres_url()
    if url is None:
        yield None
        return
    pg = Postgres(url)
    pg.make_template()
    yield pg
    pg.drop_all()


@pytest.fixture
def bench_database(postgres_template):
    """The database of the `bench` processes a test starts: its own PostgreSQL database on a
    PostgreSQL run, else None (SQLite in the test's state folder)."""
    if postgres_template is None:
        yield None
        return
    url = postgres_template.create()
    yield url
    postgres_template.drop(url)


@pytest.fixture
def bench_env(tmp_path, bench_database):
    """Environment for a `bench` subprocess: its own state folder under tmp_path, and its own
    database (SQLite there, or PostgreSQL when the suite runs on it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["BENCHFLOW_HOME"] = str(tmp_path / "state")
    if bench_database is not None:
        env["DATABASE_URL"] = bench_database
    else:
        env.pop("DATABASE_URL", None)
    for key in ("BENCHFLOW_REDIS_URL", "BENCHFLOW_QUEUE"):  # embedded unless a test says so
        env.pop(key, None)
    return env


def run_bench(
    args: list[str], *, env: dict, cwd: Path, timeout: float = 600
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchflow_site.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_args(
    agent: str,
    *flags: str,
    tasks: str | Path = "tasks",
    include: Sequence[str] = (),
    jobs_dir: str = "jobs",
) -> list[str]:
    """`bench run` of `agent` on the folder `tasks` (only the tasks named in `include`, if any),
    with `flags`, into ./`jobs_dir`."""
    args = ["run", str(tasks)]
    for name in include:
        args += ["-i", name]
    return [*args, "-a", agent, *flags, "--jobs-dir", jobs_dir]


def make_agent(tmp_path: Path, name: str, text: str) -> Path:
    """An executable script `name` in tmp_path holding `text`, for `-a script:PATH`."""
    agent = tmp_path / name
    agent.write_text(text)
    agent.chmod(0o755)
    return agent


def job_dirs(jobs: Path) -> list[Path]:
    return sorted(p for p in jobs.iterdir() if p.is_dir()) if jobs.is_dir() else []


def results_of(job: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(job.glob("*/result.json"))]


def only_result(job: Path) -> dict:
    """The job's one attempt's result.json; when there are several (a retry), says why each ended."""
    results = results_of(job)
    assert len(results) == 1, [
        (r.get("rollout_name"), r.get("error"), r.get("verifier_error"), r.get("rewards"))
        for r in results
    ]
    return results[0]


def write_task(
    root: Path,
    name: str,
    *,
    test_sh: str,
    solve_sh: str = "true\n",
    toml: str = "",
    dockerfile: str = "FROM debian:bookworm-slim\nWORKDIR /app\n",
) -> Path:
    """A small split-layout task for tests."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "task.toml").write_text('version = "1.0"\n' + toml)
    (task / "instruction.md").write_text(f"Task {name}.\n")
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + test_sh)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve_sh)
    return task


def said(*events) -> list[str]:
    """The console lines the reporter prints for these events (lines and warnings, in order)."""
    import io

    from runs.jobs.console import Reporter

    out = io.StringIO()
    reporter = Reporter(stream=out, err=out)
    for event in events:
        reporter(event)
    return out.getvalue().splitlines()


class Said:
    """A bus subscriber for tests: the reporter's lines (`.lines`) and every event (`.events`)."""

    def __init__(self) -> None:
        import io

        from runs.jobs.console import Reporter

        self._out = io.StringIO()
        self._reporter = Reporter(stream=self._out, err=self._out)
        self.events: list = []

    def __call__(self, event) -> None:
        self.events.append(event)
        self._reporter(event)

    @property
    def lines(self) -> list[str]:
        return self._out.getvalue().splitlines()


def trial_result(name: str = "t", **fields):
    """A TrialResult of task `name` with what every result has filled in; `fields` over them."""
    from runs.results.trial_result import TrialResult

    base = dict(
        task_name=name,
        rollout_name=f"{name}__0a1b2c3d",
        trial_name=name,
        trial_index=0,
        attempt=1,
        agent="test",
        agent_name="test",
        model=None,
        started_at="2026-12-02T10:00:00.000",
    )
    return TrialResult.from_json({**base, **fields})


def record_into(run, result: dict) -> None:
    """What an attempt does with an AgentRun, for tests that keep the result as a dict: the run is
    added to the trial's typed result, and `result` becomes its result.json document."""
    trial = trial_result(**result)
    run.record(trial)
    result.clear()
    result.update(trial.to_json())
