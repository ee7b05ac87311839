"""The workers page: each `bench worker` with its host, slots, the attempts it runs now, and when
it was last seen (scale-out); an operator's Drain button per machine does what `bench drain HOST`
does."""

from __future__ import annotations

from pathlib import Path

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from runs.workers.overview import workers as worker_rows
from viewer.operate import operator_required


def workers(request: HttpRequest) -> HttpResponse:
    return render(request, "viewer/workers.html", {"workers": worker_rows()})


@require_POST
@operator_required
def drain(request: HttpRequest) -> HttpResponse:
    """Move the jobs coordinated on the machine `host` to workers elsewhere (`bench drain HOST`)."""
    from runs.workers.coordination import drain as drain_host

    host = request.POST.get("host", "").strip()
    if not host:
        messages.error(request, "Drain: no machine was named; fix: press Drain on a worker's row")
    elif moved := drain_host(host):
        names = ", ".join(Path(path).name for path in moved)
        messages.success(request, f"Draining {host}: {names} move(s) to workers elsewhere.")
    else:
        messages.info(request, f"No job is coordinated on {host} now.")
    return HttpResponseRedirect(reverse("viewer:workers"))
