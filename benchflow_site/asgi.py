"""ASGI entry point: HTTP through Django (static files included), websockets through Channels.

Websockets pass the origin check (ALLOWED_HOSTS) and Django's session auth; the consumers are
read-only and refuse an anonymous visitor when the dashboard asks for a login (`bench serve`).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchflow_site.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from viewer.fragments import StoredFragments  # noqa: E402
from viewer.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        # the vendored files under static/, served by Django's finders (no collectstatic step)
        "http": StoredFragments(ASGIStaticFilesHandler(django_asgi_app)),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
