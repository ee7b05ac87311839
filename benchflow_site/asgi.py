"""ASGI entry point: HTTP through Django (static files included), websockets through Channels.

Websockets pass the origin check (the page's own scheme, host and port: benchflow_site/edge.py) and
Django's session auth; an unknown path is refused with a 404. The consumers are read-only and
refuse an anonymous visitor when the dashboard asks for a login (`bench serve`).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchflow_site.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from benchflow_site.edge import KnownPaths, SameOrigin, StaticFiles  # noqa: E402
from viewer.fragments import StoredFragments  # noqa: E402
from viewer.routing import websocket_urlpatterns  # noqa: E402

router = URLRouter(websocket_urlpatterns)
application = ProtocolTypeRouter(
    {
        # the vendored files under static/, served by Django's finders (no collectstatic step)
        "http": StoredFragments(StaticFiles(django_asgi_app)),
        "websocket": SameOrigin(KnownPaths(router, AuthMiddlewareStack(router))),
    }
)
