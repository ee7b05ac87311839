"""The dashboard's own middleware: its page headers and the session's idle clock, sync-only.

Under ASGI, Django runs each async-capable middleware's process_request and process_response
through sync_to_async: two hops to its one sync thread per middleware, some fifteen a request.
Once the innermost middleware is sync-only, Django runs every
sync-capable one outside it synchronously too, so with PageHeaders last in MIDDLEWARE the whole
chain runs in one hop. Django's own middleware stays in MIDDLEWARE under its own names, where
`manage.py check --deploy` finds it. The pages' views are sync (the ORM is), so nothing here
gains from running in the event loop.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.contrib.auth.middleware import LoginRequiredMiddleware
from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_cache_control

IDLE_REFRESH_S = 60  # a session's expiry is pushed back at most this often (one write)
SEEN = "_bench_seen_at"


class LoginRequired(LoginRequiredMiddleware):
    async_capable = False


class PageHeaders:
    """What every page gets beside Django's own headers:
    - a content security policy: scripts and styles only from the vendored files under
      STATIC_URL (no inline script, no eval), pictures from here, connections (HTTP and the
      websockets) back to here only, no framing. A response that set its own (a raw file:
      sandboxed) keeps it.
    - `Cache-Control: no-store` on a logged-in user's pages: no copy left in a shared cache or on
      the disk of the machine they used.
    - the session's idle clock: a logged-in user's request moves its expiry SESSION_COOKIE_AGE
      ahead (at most once a minute), so a session ends after that long without one."""

    async_capable = False
    sync_capable = True

    def __init__(self, get_response):  # type: ignore[no-untyped-def]
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            patch_cache_control(response, no_store=True, private=True)
            now = int(time.time())
            if now - int(request.session.get(SEEN, 0)) >= IDLE_REFRESH_S:
                request.session[SEEN] = now
        if "Content-Security-Policy" not in response:
            origin = f"{request.scheme}://{request.get_host()}"
            static = f"{origin}{settings.STATIC_URL}"
            # the Django admin's pages also load its translation catalogue (a script it serves)
            scripts = (
                f"{static} {origin}/admin/jsi18n/" if request.path.startswith("/admin/") else static
            )
            response["Content-Security-Policy"] = (
                f"default-src 'none'; script-src {scripts}; style-src {static}; "
                "img-src 'self' data:; font-src 'self'; connect-src 'self'; "
                "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
            )
        return response
