"""People's review from the browser: a note (with tags, on a trial or one of its steps) by anyone
who sees the trial, a verdict by an operator, and the job's reviews as JSON. Each parses, authorises, calls
runs.review.human, and goes back to the trial's page."""

from __future__ import annotations

import re

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_POST

from runs.index import search
from runs.problems import UserError
from runs.review import human
from viewer import queries
from viewer.operate import operator_required

STEP = re.compile(r"e?(\d{1,9})")


def _back(job: str, trial: str, rollout: str = "") -> HttpResponseRedirect:
    url = reverse("viewer:trial", args=[job, trial])
    return HttpResponseRedirect(url + (f"?attempt={rollout}" if rollout else "") + "#review")


@require_POST
def add_note(request: HttpRequest, job: str, trial: str) -> HttpResponse:
    # anyone who can see the trial may write a note (bench serve logs everyone in first; bench
    # view is one person's, on loopback, with no login)
    row = queries.get_trial(queries.get_job(job), trial)
    step = STEP.fullmatch(request.POST.get("step", "").strip())
    rollout = request.POST.get("attempt", "")[:300]
    try:
        note = human.add_note(
            row,
            text=request.POST.get("text", ""),
            tags=human.parse_tags(request.POST.get("tags", "")),
            author=request.user,
            rollout_name=rollout,
            step=int(step.group(1)) if step else None,
        )
        search.index_notes([note])  # its words findable at once, in the same transaction
    except UserError as exc:
        messages.error(request, str(exc))
    return _back(job, trial, rollout)


@require_POST
@operator_required
def set_verdict(request: HttpRequest, job: str, trial: str) -> HttpResponse:
    row = queries.get_trial(queries.get_job(job), trial)
    try:
        human.set_verdict(row, request.POST.get("verdict", ""), author=request.user)
    except UserError as exc:
        messages.error(request, str(exc))
    return _back(job, trial, request.POST.get("attempt", "")[:300])


def job_reviews(request: HttpRequest, job: str) -> HttpResponse:
    return JsonResponse(human.job_reviews(queries.get_job(job)), json_dumps_params={"indent": 2})
