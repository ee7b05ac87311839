"""Dashboard views: adapters over runs' domain functions."""

from django.http import HttpRequest, HttpResponse


def index(request: HttpRequest) -> HttpResponse:
    return HttpResponse("BenchFlow site", content_type="text/plain")
