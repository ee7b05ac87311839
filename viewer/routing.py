"""Websocket routes: the jobs list's hints and one job's hints."""

from django.urls import path

from viewer import consumers

websocket_urlpatterns = [
    path("ws/jobs/", consumers.JobsConsumer.as_asgi()),
    path("ws/jobs/<str:job>/", consumers.JobConsumer.as_asgi()),
]
