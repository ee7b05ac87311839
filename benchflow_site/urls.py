"""URL routes of the dashboard and its JSON API."""

from django.urls import path

from viewer import views

urlpatterns = [
    path("", views.index, name="index"),
]
