"""Hole 9 of issue 28: a websocket's Origin must be the page's own scheme, host and port (a page on
another local port must not open a socket with a viewer's cookies), and an unknown websocket path
is a 404, not a 500. Against a real `bench serve`, with the `websockets` client."""

from __future__ import annotations

import asyncio

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.security.site import Site, bench_env, cookie_header


@pytest.fixture
def site(tmp_path, bench_database):
    served = Site(tmp_path / "site", bench_env(tmp_path, bench_database), users={"vic": "viewer"})
    yield served
    served.stop()


def _open(site: Site, path: str, origin: str, cookies: str) -> int:
    """The HTTP status of the websocket handshake (101 when it opened)."""

    async def go() -> int:
        try:
            async with connect(
                f"ws://127.0.0.1:{site.port}{path}",
                origin=origin,  # type: ignore[arg-type]
                additional_headers={"Cookie": cookies},
                open_timeout=20,
            ):
                return 101
        except InvalidStatus as exc:
            return exc.response.status_code

    return asyncio.run(go())


def test_a_socket_opens_only_from_the_sites_own_origin(site):
    cookies = cookie_header(site.logged_in("vic"))
    own = f"http://127.0.0.1:{site.port}"
    assert _open(site, "/ws/jobs/", own, cookies) == 101
    # the same host on another port, another scheme, another host: refused
    for origin in (
        f"http://127.0.0.1:{site.port + 1}",
        "http://127.0.0.1",
        f"https://127.0.0.1:{site.port}",
        f"http://localhost.evil.example:{site.port}",
    ):
        assert _open(site, "/ws/jobs/", origin, cookies) == 403, origin


def test_an_unknown_websocket_path_is_a_404(site):
    cookies = cookie_header(site.logged_in("vic"))
    own = f"http://127.0.0.1:{site.port}"
    assert _open(site, "/ws/nope/", own, cookies) == 404
    assert _open(site, "/ws/jobs/a/b/", own, cookies) == 404
