"""Two jobs side by side, paired by trial, with the paired bootstrap interval and McNemar's test
(the same computation as `bench results --compare`, over the index's trial rows)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from runs.models import Job, Trial, job_key
from runs.results.compare import Side, pair_key
from runs.results.compare import compare as compare_jobs
from viewer import queries


def _sides(job: Job) -> dict[str, Side]:
    rows = Trial.objects.filter(job=job, state="done").order_by("position", "id")
    return {
        pair_key(task, index): Side(
            reward, float(cost) if cost is not None else None, tokens, outcome, name
        )
        for task, index, reward, cost, tokens, outcome, name in rows.values_list(
            "task_name", "trial_index", "reward", "cost_usd", "total_tokens", "outcome", "name"
        )
        if outcome != "cancelled"
    }


def compare(request: HttpRequest) -> HttpResponse:
    jobs = [
        (job_key(name, pk), name) for pk, name in queries.job_list().values_list("id", "name")[:500]
    ]
    context: dict[str, object] = {
        "jobs": jobs,
        "a": request.GET.get("a", ""),
        "b": request.GET.get("b", ""),
    }
    if context["a"] and context["b"]:
        job_a, job_b = queries.get_job(str(context["a"])), queries.get_job(str(context["b"]))
        context.update(job_a=job_a, job_b=job_b, c=compare_jobs(_sides(job_a), _sides(job_b)))
    return render(request, "viewer/compare.html", context)
