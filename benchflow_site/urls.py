"""URL routes: the dashboard (viewer app, namespaced `viewer:`) and the Django admin."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [path("admin/", admin.site.urls), path("", include("viewer.urls"))]
