from django.apps import AppConfig


class ViewerConfig(AppConfig):
    """The dashboard: pages over the index, websocket hints, the compare page."""

    name = "viewer"
    default_auto_field = "django.db.models.BigAutoField"
