"""Hole 7 of issue 28: logins of `bench serve`. Failed logins are throttled per user name and per
client address (and a locked account says so, refusing even the right password), passwords pass
Django's validators, `bench user` disables users and resets passwords, sessions end when idle and
when the password changes, and the state folder and the index are private."""

from __future__ import annotations

import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.security.site import PASSWORD, Site, bench_env, set_cookies, users_of

IDLE_S = 900
USER_FREE, ADDRESS_FREE = 5, 20  # failures before a lock: of a user name, of an address


USERS = {name: "viewer" for name in ("carol", "dave", "gina", "hank", "ivy")}


@pytest.fixture(scope="module")
def site(tmp_path_factory, postgres_template):
    """One server for the module; each test has users of its own."""
    root = tmp_path_factory.mktemp("logins")
    database = postgres_template.create() if postgres_template is not None else None
    env = bench_env(
        root,
        database,
        BENCHFLOW_SESSION_IDLE_S=str(IDLE_S),
        # the tests stand for clients at other addresses with this header (still loopback)
        BENCHFLOW_FORWARDED_FOR_HEADER="X-Forwarded-For",
    )
    served = Site(root / "site", env, users=USERS)
    yield served
    served.stop()
    if database is not None:
        postgres_template.drop(database)


def test_failed_logins_lock_the_account_and_the_right_password_waits(site):
    # given five wrong passwords for carol
    client = site.client()
    for _ in range(USER_FREE):
        assert site.login(client, "carol", "not-her-password-1").status_code == 200
    # when the right one comes next
    answer = site.login(client, "carol")
    # then it is refused too, and the page says the account is locked
    assert answer.status_code == 200 and "sessionid" not in client.cookies
    assert "Too many failed logins for this account" in answer.text
    # and another user is not locked by it
    assert site.login(site.client(), "dave").status_code == 302
    # an admin's reset lifts the lock
    assert site.bench("user", "reset-password", "carol").returncode == 0
    assert site.login(site.client(), "carol").status_code == 302


def test_failed_logins_from_one_address_lock_that_address(site):
    # given an address guessing at many names
    at = {"X-Forwarded-For": "10.9.9.9"}
    client = site.client()
    for n in range(ADDRESS_FREE):
        site.login(client, f"guess-{n}", "wrong-password-123", **at)
    # then even a right password from it is refused, and says why; another address is not
    answer = site.login(site.client(), "dave", **at)
    assert answer.status_code == 200 and "from this address" in answer.text
    assert site.login(site.client(), "dave", **{"X-Forwarded-For": "10.9.9.10"}).status_code == 302


def test_a_lock_ends_and_doubles_with_each_failure_after_it(db):
    from runs import logins

    # the waiting out, on the domain's own clock
    assert (logins.USER_FREE, logins.ADDRESS_FREE) == (USER_FREE, ADDRESS_FREE)
    now = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    for _ in range(logins.USER_FREE):
        logins.failed("erin", None, now)
    lock = logins.locked("erin", None, now)
    assert lock is not None and lock.seconds == logins.LOCK_S
    later = now + timedelta(seconds=logins.LOCK_S + 1)
    assert logins.locked("erin", None, later) is None
    logins.failed("erin", None, later)
    assert logins.locked("erin", None, later).seconds == 2 * logins.LOCK_S


def test_bench_user_add_refuses_weak_passwords_and_creates_nothing(site):
    for weak in ("a", "password1234", "123456789012"):
        done = site.bench("user", "add", "frank", "--role", "viewer", password=weak)
        assert done.returncode != 0 and "the password is refused" in done.stderr, weak
        assert "Traceback" not in done.stderr
    assert "frank" not in users_of(site)


def test_bench_user_disables_a_user_and_resets_a_password(site):
    # given gina logged in
    client = site.logged_in("gina")
    assert client.get("/jobs/").status_code == 200
    # when she is disabled: her session ends and she cannot log in
    assert site.bench("user", "disable", "gina").returncode == 0
    assert users_of(site)["gina"] == ["viewer", "disabled"]
    assert client.get("/jobs/").status_code == 302
    assert site.login(site.client(), "gina").status_code == 200
    # enabled again, with a new password: the old one no longer works
    assert site.bench("user", "enable", "gina").returncode == 0
    again = site.logged_in("gina")
    new = "another-long-pass-for-gina"
    assert site.bench("user", "reset-password", "gina", password=new).returncode == 0
    assert again.get("/jobs/").status_code == 302  # the reset ended her session
    assert site.login(site.client(), "gina").status_code == 200
    assert site.login(site.client(), "gina", new).status_code == 302


def test_a_session_lasts_the_idle_time_set(site):
    client = site.client()
    answer = site.login(client, "hank")
    assert f"Max-Age={IDLE_S}" in set_cookies(answer)["sessionid"]


def test_a_password_change_checks_the_rules_and_ends_the_other_sessions(site):
    # given ivy logged in twice
    here, there = site.logged_in("ivy"), site.logged_in("ivy")

    def change(to: str):
        here.get("/password/")
        return here.post(
            "/password/",
            data={
                "old_password": PASSWORD,
                "new_password1": to,
                "new_password2": to,
                "csrfmiddlewaretoken": here.cookies["csrftoken"],
            },
            headers={"Referer": site.base + "/password/"},
        )

    # a short one is refused
    refused = change("short-1")
    assert refused.status_code == 200 and "too short" in refused.text
    # a good one: this session goes on, the other ends
    assert change("a-better-pass-for-ivy").status_code == 302
    assert here.get("/jobs/").status_code == 200
    assert there.get("/jobs/").status_code == 302


def test_the_state_folder_and_the_index_are_private(site):
    state = Path(site.env["BENCHFLOW_HOME"])
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for name in ("benchflow.sqlite3", "benchflow.leases.sqlite3", "secret-key"):
        path = state / name
        if path.exists() or "DATABASE_URL" not in site.env:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, name
