"""`bench user add NAME --role ROLE`: the password from BENCHFLOW_PASSWORD (or the terminal), the role
as a Django group, and the login working in `bench serve`'s database."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, run_bench

# users and their groups live in the database
pytestmark = pytest.mark.database


def _role_and_login(env, name, password):
    """In the command's own database (BENCHFLOW_HOME): the user's role, and whether the password logs in."""
    code = (
        "from benchflow_site.django_setup import setup_django; setup_django();"
        "from django.contrib.auth import authenticate;"
        "from runs.operations.roles import role_of, OPERATE_PERM;"
        f"u = authenticate(username={name!r}, password={password!r});"
        "print(role_of(u) if u else 'no-login', u.has_perm(OPERATE_PERM) if u else '', u.is_staff if u else '')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_user_add_takes_the_password_from_benchflow_password(tmp_path, bench_env):
    env = {**bench_env, "BENCHFLOW_PASSWORD": "correct horse 42"}
    done = run_bench(["user", "add", "olga", "--role", "operator"], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Added olga (operator)."
    assert _role_and_login(env, "olga", "correct horse 42") == ["operator", "True", "False"]
    assert _role_and_login(env, "olga", "wrong") == ["no-login"]


def test_adding_a_name_again_sets_its_role_and_password(tmp_path, bench_env):
    env = {**bench_env, "BENCHFLOW_PASSWORD": "first pass 1"}
    run_bench(["user", "add", "vic", "--role", "viewer"], env=env, cwd=tmp_path)
    env["BENCHFLOW_PASSWORD"] = "second pass 2"
    done = run_bench(["user", "add", "vic", "--role", "admin"], env=env, cwd=tmp_path)
    assert done.stdout.strip() == "Updated vic (admin)."
    assert _role_and_login(env, "vic", "second pass 2") == ["admin", "True", "True"]
    listed = run_bench(["user", "list"], env=env, cwd=tmp_path).stdout
    assert listed.strip() == "vic\tadmin"


def test_a_viewer_may_not_operate(tmp_path, bench_env):
    env = {**bench_env, "BENCHFLOW_PASSWORD": "viewer pass 3"}
    run_bench(["user", "add", "val", "--role", "viewer"], env=env, cwd=tmp_path)
    assert _role_and_login(env, "val", "viewer pass 3") == ["viewer", "False", "False"]


def test_without_a_terminal_or_benchflow_password_it_says_how(tmp_path, bench_env):
    bench_env.pop("BENCHFLOW_PASSWORD", None)
    done = subprocess.run(
        [sys.executable, "-m", "benchflow_site.cli", "user", "add", "x", "--role", "viewer"],
        env=bench_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert "set BENCHFLOW_PASSWORD" in done.stderr and "Traceback" not in done.stderr


def test_an_unknown_role_is_refused_by_the_parser(tmp_path, bench_env):
    done = run_bench(["user", "add", "x", "--role", "boss"], env=bench_env, cwd=tmp_path)
    assert done.returncode == 2 and "invalid choice: 'boss'" in done.stderr


def test_the_password_is_read_from_the_terminal_twice(tmp_path, bench_env):
    import os
    import pty

    bench_env.pop("BENCHFLOW_PASSWORD", None)
    pid, fd = pty.fork()
    if pid == 0:  # the child: bench user add on a terminal of its own
        os.chdir(tmp_path)
        os.execve(
            sys.executable,
            [sys.executable, "-m", "benchflow_site.cli", "user", "add", "tess", "--role", "viewer"],
            {**bench_env, "PYTHONPATH": str(REPO)},
        )
    seen = b""

    def until(text: bytes) -> None:
        nonlocal seen
        while text not in seen:
            seen += os.read(fd, 1024)

    until(b"Password for tess: ")
    os.write(fd, b"typed at a terminal 9\n")
    until(b"Again: ")
    os.write(fd, b"typed at a terminal 9\n")
    until(b"Added tess (viewer).")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert b"typed at a terminal" not in seen  # not echoed
    assert _role_and_login(bench_env, "tess", "typed at a terminal 9") == [
        "viewer",
        "False",
        "False",
    ]


def test_the_old_bench_password_is_still_read_with_a_warning_naming_the_new_one(
    tmp_path, bench_env
):
    bench_env.pop("BENCHFLOW_PASSWORD", None)
    env = {**bench_env, "BENCH_PASSWORD": "an old name for it 4"}
    done = run_bench(["user", "add", "oli", "--role", "viewer"], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "BENCH_PASSWORD is deprecated" in done.stderr and "set BENCHFLOW_PASSWORD" in done.stderr
    assert _role_and_login(env, "oli", "an old name for it 4") == ["viewer", "False", "False"]
