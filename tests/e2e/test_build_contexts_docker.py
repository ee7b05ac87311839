"""No image ever holds another task's files: builds of contexts with the same folder names, file
names, sizes and mtimes but other contents, through the real BuildKit and Docker Compose."""

from __future__ import annotations

import os
import secrets

import pytest

from tests.conftest import job_dirs, results_of, run_args, run_bench, write_task

pytestmark = pytest.mark.docker

# what `git archive` gives every file of a task set: one mtime
ONE_MTIME = 1_700_000_000

COMPOSE = """services:
  main:
    depends_on:
      store:
        condition: service_healthy
    volumes:
      - shared:/shared
  store:
    build:
      context: ./sidecar
    volumes:
      - shared:/shared
    healthcheck:
      test: ["CMD", "test", "-f", "/shared/data.txt"]
      interval: 1s
      retries: 30
volumes:
  shared:
"""
SIDECAR = 'FROM debian:bookworm-slim\nCOPY data.txt /data.txt\nCMD ["sh", "-c", "cp /data.txt /shared/ && sleep infinity"]\n'
TEST = (
    "cmp -s /data.txt /tests/expected.txt && cmp -s /shared/data.txt /tests/expected.txt"
    " && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
)


def same_shape_task(root, name: str, content: str):
    """A task whose main image and sidecar image each COPY environment/.../data.txt holding
    `content`; its tests check both against it. Every file gets the same mtime."""
    task = write_task(
        root,
        name,
        test_sh=TEST,
        dockerfile="FROM debian:bookworm-slim\nCOPY data.txt /data.txt\n",
    )
    env = task / "environment"
    (env / "sidecar").mkdir()
    (env / "docker-compose.yaml").write_text(COMPOSE)
    (env / "sidecar" / "Dockerfile").write_text(SIDECAR)
    for path in (env / "data.txt", env / "sidecar" / "data.txt", task / "tests" / "expected.txt"):
        path.write_text(content)
    for dirpath, _dirs, files in os.walk(task):
        for f in files:
            os.utime(os.path.join(dirpath, f), (ONE_MTIME, ONE_MTIME))
    return task


def test_tasks_differing_only_in_a_files_content_each_build_their_own(
    docker_client, bench_env, tmp_path
):
    # given two tasks whose contexts are alike in every folder and file name, size and mtime,
    # data.txt holding other bytes (new ones each run, so no image of them exists yet)
    first, second = secrets.token_hex(8), secrets.token_hex(8)
    same_shape_task(tmp_path / "tasks", "a-first", first)
    same_shape_task(tmp_path / "tasks", "b-second", second)
    # when the oracle runs them one after the other
    proc = run_bench(run_args("oracle", "-j", "1"), env=bench_env, cwd=tmp_path)
    # then each image (main's and the sidecar's) holds its own task's file, and both pass
    [job] = job_dirs(tmp_path / "jobs")
    rewards = {r["task_name"]: r["rewards"] for r in results_of(job)}
    assert rewards == {"a-first": {"reward": 1.0}, "b-second": {"reward": 1.0}}, (
        proc.stdout + proc.stderr
    )
    assert proc.returncode == 0
