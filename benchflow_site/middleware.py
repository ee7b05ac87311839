"""Django's middleware, declared sync-only.

Under ASGI, Django runs each async-capable middleware's process_request and process_response
through sync_to_async: two hops to its one sync thread per middleware, some fifteen a request.
Declared sync-only, the whole chain runs in one hop. The pages' views are sync (the ORM is), so
nothing here gains from running in the event loop.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware, LoginRequiredMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import HttpRequest, HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware
from django.middleware.csrf import CsrfViewMiddleware
from django.middleware.security import SecurityMiddleware


class Security(SecurityMiddleware):
    async_capable = False


class Sessions(SessionMiddleware):
    async_capable = False


class Common(CommonMiddleware):
    async_capable = False


class Csrf(CsrfViewMiddleware):
    async_capable = False


class Authentication(AuthenticationMiddleware):
    async_capable = False


class LoginRequired(LoginRequiredMiddleware):
    async_capable = False


class XFrameOptions(XFrameOptionsMiddleware):
    async_capable = False


class Messages(MessageMiddleware):
    async_capable = False


class ContentSecurityPolicy:
    """Scripts and styles only from the vendored files under STATIC_URL (no inline script, no
    eval), pictures from here, connections (HTTP and the websockets) back to here only, no
    framing. A response that set its own policy (a raw file: sandboxed) keeps it."""

    async_capable = False
    sync_capable = True

    def __init__(self, get_response):  # type: ignore[no-untyped-def]
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
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
