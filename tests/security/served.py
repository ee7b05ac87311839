"""An operator's session on a real `bench serve`, over HTTP: log in, post the launch form."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.runs.operations.server import PASSWORD, Served

_CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


class Operator:
    def __init__(self, served: Served, role: str = "operator") -> None:
        self.client = httpx.Client(base_url=served.base, timeout=30, follow_redirects=False)
        page = self.client.get("/login/")
        done = self.client.post(
            "/login/",
            data={"username": role, "password": PASSWORD, "csrfmiddlewaretoken": _csrf(page.text)},
            headers={"Referer": served.base + "/login/"},
        )
        assert done.status_code == 302, done.text[:500]
        self.base = served.base

    def launch(self, **form: Any) -> httpx.Response:
        """Post the launch form with these fields (lists and env pairs one a line)."""
        page = self.client.get("/launch/")
        data = {k: "\n".join(v) if isinstance(v, list) else str(v) for k, v in form.items()}
        data["csrfmiddlewaretoken"] = _csrf(page.text)
        return self.client.post("/launch/", data=data, headers={"Referer": self.base + "/launch/"})

    def close(self) -> None:
        self.client.close()


def _csrf(html: str) -> str:
    found = _CSRF.search(html)
    assert found is not None, html[:500]
    return found[1]
