"""The workers page: each `bench worker` with its host, slots, the attempts it runs now, and when
it was last seen (scale-out)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from runs.workers.overview import workers as worker_rows


def workers(request: HttpRequest) -> HttpResponse:
    return render(request, "viewer/workers.html", {"workers": worker_rows()})
