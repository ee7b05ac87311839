"""URL routes: the dashboard (viewer app, namespaced `viewer:`)."""

from django.urls import include, path

urlpatterns = [path("", include("viewer.urls"))]
