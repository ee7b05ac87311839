"""`bench view JOB --confirm`: the job's page carries an Approve/Reject bar; the first decision is
kept, the server stops, and the command prints `DECISION: approved` (exit 0) or `rejected` (3).

The state lives in the serving process (bench view is one person's, on loopback): the command
sets what is asked and how to stop, the bar's view records the answer."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

DECISIONS = ("approved", "rejected")


@dataclass
class Asked:
    job_key: str
    stop: Callable[[], None]
    decision: str | None = None


_asked: Asked | None = None
_lock = threading.Lock()


def ask(job_key: str, stop: Callable[[], None]) -> Asked:
    global _asked
    _asked = Asked(job_key, stop)
    return _asked


def pending(job_key: str) -> bool:
    return _asked is not None and _asked.job_key == job_key and _asked.decision is None


@require_POST
def decide(request: HttpRequest) -> HttpResponse:
    decision = request.POST.get("decision", "")
    with _lock:
        if _asked is None or decision not in DECISIONS:
            raise Http404("nothing is waiting for a decision")
        first = _asked.decision is None
        if first:
            _asked.decision = decision
    if first:
        _asked.stop()
    return render(request, "viewer/decided.html", {"decision": _asked.decision})
