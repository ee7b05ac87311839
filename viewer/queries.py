"""Read-side selectors of the dashboard: what each page shows, from the index (never a job folder,
except the files of one attempt a page asks for)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.paginator import Page, Paginator
from django.db.models import F, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.http import Http404

from runs import errors
from runs import events as ev
from runs.index import search
from runs.models import KEY_SEPARATOR, Attempt, Budget, Event, Job, Trial, job_key
from runs.results.outcomes import TrialRow
from runs.review import human

TRIALS_PER_PAGE = 50

# ?sort= keys of the trials table -> the column (a '-' before the key sorts descending)
TRIAL_SORTS = {
    "task": "task_name",
    "trial": "position",
    "outcome": "outcome",
    "reward": "reward",
    "cost": "cost_usd",
    "tokens": "total_tokens",
    "turns": "n_turns",
    "tools": "n_tool_calls",
    "duration": "duration_s",
    "error": "error_category",
    "attempts": "n_attempts",
}
OUTCOME_FILTERS = {
    "passed": Q(outcome="passed"),
    "failed": Q(outcome="failed"),
    "errored": Q(outcome__in=("errored", "verifier_errored", "interrupted")),
    "unscored": Q(state="done", reward__isnull=True),
    "running": Q(state="running"),
    "waiting": Q(state="waiting"),
    "not_run": Q(state="not_run"),
}


def view_roots() -> list[str]:
    """The folders `bench view` was given (resolved); empty means every job in the index."""
    raw = settings.BENCHFLOW_VIEW_ROOT
    return [str(Path(p).resolve()) for p in raw.split(os.pathsep) if p] if raw else []


def jobs_in_view() -> QuerySet[Job]:
    roots = view_roots()
    jobs = Job.objects.all()
    if roots:
        scope = Q()
        for root in roots:
            scope |= Q(path=root) | Q(path__startswith=root.rstrip("/") + "/")
        jobs = jobs.filter(scope)
    return jobs


def job_list() -> QuerySet[Job]:
    return jobs_in_view().order_by("-started_at", "-id").defer("settings", "summary")


def find_job(key: str) -> Job | None:
    """The job a URL names, in view: by its key (runs.models.Job.key: name~id); a name alone (the
    URLs before keys) is the newest job of that name, and so is a name that only looks like a key."""
    jobs = jobs_in_view()
    name, sep, pk = key.rpartition(KEY_SEPARATOR)
    if sep and pk.isdigit():
        job = jobs.filter(pk=int(pk), name=name).first()
        if job is not None:
            return job
    return jobs.filter(name=key).order_by("-id").first()


def get_job(key: str) -> Job:
    job = find_job(key)
    if job is None:
        raise Http404(f"no job {key!r} here")
    return job


def job_key_at(path: Path) -> str:
    """The key of the job whose folder is `path` (its name alone when the index has no row)."""
    pk = Job.objects.filter(path=str(path.resolve())).values_list("id", flat=True).first()
    return path.name if pk is None else job_key(path.name, pk)


def trials(
    job: Job, sort: str = "trial", show: str = "", q: str = "", tag: str = "", verdict: str = ""
) -> QuerySet[Trial]:
    rows = human.filter_trials(Trial.objects.filter(job=job), tag, verdict)
    if show in OUTCOME_FILTERS:
        rows = rows.filter(OUTCOME_FILTERS[show])
    if q:
        found = Q(name__icontains=q) | Q(error_category__icontains=q)
        words = search.trial_ids_sql(q, job.pk)  # the words of its calls, output and errors
        if words is not None:
            found |= Q(id__in=RawSQL(*words))
        rows = rows.filter(found)
    key = sort.lstrip("-")
    column = TRIAL_SORTS.get(key, "position")
    descending = sort.startswith("-")
    # empty values last whichever way: unscored trials do not lead a sort by reward
    order = F(column).desc(nulls_last=True) if descending else F(column).asc(nulls_last=True)
    return rows.order_by(order, "position", "id")


def trials_page(
    job: Job, sort: str, show: str, q: str, page: int, tag: str = "", verdict: str = ""
) -> Page:
    rows = trials(job, sort, show, q, tag, verdict).only(
        "name",
        "task_name",
        "state",
        "outcome",
        "reward",
        "error_category",
        "n_attempts",
        "cost_usd",
        "total_tokens",
        "n_turns",
        "n_tool_calls",
        "duration_s",
        "phase",
        "position",
    )
    if not verdict:
        rows = rows.annotate(latest_verdict=human.latest_verdict())
    return Paginator(rows, TRIALS_PER_PAGE).get_page(page)


@dataclass(frozen=True)
class Found:
    """Where a search found a trial: its attempt and step (the model call's 0-based line in the
    trajectory: the trial page's `#c<step>` anchor, on the stream item of that call; -1 for the attempt's own words), and the
    words around the first it found."""

    job_key: str
    job_name: str
    trial: str
    rollout: str
    step: int
    label: str
    text: str
    at: str = ""  # a note's step (`e<n>`): the anchor of a hit in a person's note

    @property
    def anchor(self) -> str:
        if self.at:
            return f"#{self.at}"
        return f"#c{self.step}" if self.step >= 0 else ""


def found_in(q: str, hits: list[search.Hit]) -> list[Found]:
    """The hits of a search, each with its trial's and job's names, its call and its snippet."""
    if not hits:
        return []
    shown = search.locate(q, hits)
    keys = search.job_keys(h.job_id for h in hits)
    names = dict(Trial.objects.filter(pk__in=[h.trial_id for h in hits]).values_list("id", "name"))
    rollouts = dict(
        Attempt.objects.filter(pk__in=[h.attempt_id for h in hits]).values_list(
            "id", "rollout_name"
        )
    )
    out = []
    for h in hits:
        where = shown.get((h.attempt_id, h.piece), search.Shown(-1, "", ""))
        name, key = keys.get(h.job_id, ("", ""))
        out.append(
            Found(
                key,
                name,
                names.get(h.trial_id, ""),
                rollouts.get(h.attempt_id, ""),
                where.step,
                where.label,
                where.text,
                where.at,
            )
        )
    return out


def trial_hits(q: str, page: Page) -> dict[str, Found]:
    """Where a search found each trial of a page of the trials table, by trial name."""
    hits = search.hits_in(q, [t.pk for t in page]) if q else {}
    return {f.trial: f for f in found_in(q, list(hits.values()))}


SEARCH_PER_PAGE = 50


def search_jobs(q: str, job: str, page: int) -> dict[str, Any]:
    """`/search/`: the trials a query finds across the jobs in view (or one job), a page."""
    jobs = jobs_in_view()
    if job:
        jobs = jobs.filter(name=job)
    ids = None if not (view_roots() or job) else list(jobs.values_list("id", flat=True))
    page = max(1, page)
    hits, total = search.search(q, ids, SEARCH_PER_PAGE, (page - 1) * SEARCH_PER_PAGE)
    pages = max(1, -(-total // SEARCH_PER_PAGE))
    return {"found": found_in(q, hits), "total": total, "page": page, "pages": pages}


def cause_text(category: str) -> str:
    cls = errors.lookup(category) if category else None
    if cls is None:
        return category
    return f"{cls.cause} ({cls.fault} problem)"


def trial_rows(job: Job, costs: bool = False) -> list[TrialRow]:
    """The job's trials as the outcomes grid and the Pareto view take them, in plan order; with
    `costs`, each trial's sandbox-seconds too (its attempts' timing.total, read from the index)."""
    sandbox: dict[int, float] = {}
    if costs:
        for trial_id, timing in Attempt.objects.filter(trial__job=job).values_list(
            "trial_id", "timing"
        ):
            total = timing.get("total") if isinstance(timing, Mapping) else None
            if isinstance(total, int | float):
                sandbox[trial_id] = sandbox.get(trial_id, 0.0) + float(total)
    rows = Trial.objects.filter(job=job).order_by("position", "id")
    fields = ("id", "name", "task_name", "trial_index", "state", "outcome", "reward")
    more = ("n_attempts", "error_category", "cost_usd", "total_tokens", "duration_s")
    causes: dict[str, str] = {}
    out = []
    for (
        pk,
        name,
        task,
        index,
        state,
        outcome,
        reward,
        n,
        category,
        cost,
        tokens,
        dur,
    ) in rows.values_list(*fields, *more):
        if category and category not in causes:
            causes[category] = cause_text(category)
        out.append(
            TrialRow(
                name,
                task,
                index,
                state,
                outcome,
                reward,
                n,
                causes.get(category, ""),
                float(cost) if cost is not None else None,
                tokens,
                sandbox.get(pk),
                dur,
            )
        )
    return out


def running(job: Job) -> list[Trial]:
    return list(Trial.objects.filter(job=job, state="running").order_by("position")[:50])


def job_budgets(job: Job) -> list[Budget]:
    return list(Budget.objects.filter(job=job, trial=None).order_by("measure"))


def trial_budget_totals(job: Job) -> dict[str, Any]:
    """Per-trial budgets over the job: how many trials had one, how many stopped at it."""
    rows = Budget.objects.filter(job=job, trial__isnull=False)
    return {
        "trials": rows.values("trial").distinct().count(),
        "stopped": rows.filter(stopped=True).values("trial").distinct().count(),
    }


def get_trial(job: Job, name: str) -> Trial:
    """A trial named in a URL: one of this job's trials, nothing else."""
    trial = Trial.objects.filter(job=job, name=name).first()
    if trial is None:
        raise Http404(f"no trial {name!r} in job {job.name}")
    return trial


def attempts(trial: Trial) -> list[Attempt]:
    return list(Attempt.objects.filter(trial=trial).order_by("sort_at", "rollout_name"))


def get_attempt(trial: Trial, rollout: str) -> Attempt:
    attempt = Attempt.objects.filter(trial=trial, rollout_name=rollout).first()
    if attempt is None:
        raise Http404(f"no attempt {rollout!r} in trial {trial.name}")
    return attempt


def attempt_folder(job: Job, attempt: Attempt) -> Path:
    """The attempt's folder: the job's path and a name the index holds (never a URL's text)."""
    return Path(job.path) / attempt.rollout_name


def events_after(job: Job, seq: int, limit: int = 500) -> list[dict[str, Any]]:
    rows = Event.objects.filter(job=job, seq__gt=seq).order_by("seq")[:limit]
    return [
        {"seq": e.seq, "kind": e.kind, "trial": e.trial_name, "at": e.created_at.isoformat()}
        for e in rows.only("seq", "kind", "trial_name", "created_at")
    ]


def utilization_series(job: Job) -> dict[str, list[Any]]:
    """For the chart, over seconds since the job started: trials running and finished (from the
    attempts' start and end times), and the slots busy by the runner's utilization reports
    (UtilizationReported events: setup + agent, averaged over each report's window)."""
    rows = Attempt.objects.filter(trial__job=job).values_list("started_at", "finished_at")
    changes: list[tuple[float, int, int, float | None]] = []
    for started, finished in rows:
        if started is None:
            continue
        changes.append((started.timestamp(), 1, 0, None))
        if finished is not None:
            changes.append((finished.timestamp(), -1, 1, None))
    for at, payload in Event.objects.filter(job=job, kind=ev.UtilizationReported.kind).values_list(
        "created_at", "payload"
    )[:2000]:
        if isinstance(payload, Mapping):
            busy = (payload.get("setup") or 0) + (payload.get("agent") or 0)
            changes.append((at.timestamp(), 0, 0, round(float(busy), 2)))
    changes.sort(key=lambda c: c[0])
    origin = job.started_at.timestamp() if job.started_at else None
    if changes:
        origin = min(origin, changes[0][0]) if origin is not None else changes[0][0]
    series: dict[str, list[Any]] = {"x": [], "running": [], "finished": [], "busy": []}
    running_now = done = 0
    for at, delta, finished_one, busy in changes:
        running_now += delta
        done += finished_one
        series["x"].append(round(at - (origin or at), 1))
        series["running"].append(running_now)
        series["finished"].append(done)
        series["busy"].append(busy)
    return series


def job_regrades(job: Job) -> dict[str, list[Any]]:
    """The job's regrades from the index's events: each run (who, why, how many trials) and each
    regraded trial's before and after, newest first."""
    events = Event.objects.filter(
        job=job, kind__in=(ev.RegradeStarted.kind, ev.Regraded.kind)
    ).order_by("-seq")
    runs = [e.payload for e in events if e.kind == ev.RegradeStarted.kind][:20]
    trials = [e for e in events if e.kind == ev.Regraded.kind][:200]
    return {"runs": runs, "trials": trials}
