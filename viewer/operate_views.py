"""Operating from the browser: the launch form, and cancel, resume, rerun and regrade on a job or a
trial. Each view parses, authorises, calls one function of runs.operations, and redirects to the
page that follows the result live."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from runs.operations import control
from runs.operations import launch as launching
from runs.operations import regrade as regrading
from runs.operations import review as reviewing
from runs.problems import Problem, UserError
from runs.results import job_documents
from viewer import launch_form, queries, trial_views
from viewer.operate import gateway, job_dir, launcher, operator_required, roots, user_name


def _job_page(name: str) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("viewer:job", args=[name]))


def _folder(name: str) -> Path:
    """The named job's folder under BENCHFLOW_JOBS_DIR; a job elsewhere cannot be operated."""
    found = job_dir(queries.get_job(name))
    if isinstance(found, Problem):
        raise Http404(found.text)
    return found


@operator_required
def launch(request: HttpRequest) -> HttpResponse:
    where = roots()
    problems: list[Problem] = []
    texts: dict[str, Any] = {}
    if request.method == "POST":
        texts = launch_form.texts(request.POST)
        checked = launching.check_launch(texts, where, gateway())
        problems = checked.problems
        if checked.ok:
            try:
                folder = launching.start(checked, launcher(), by=user_name(request))
            except (UserError, OSError) as exc:
                problems = [Problem("", f"the run could not be started: {exc}")]
            else:
                messages.success(request, f"Launched {folder.name}.")
                key = queries.job_key_at(folder)
                return HttpResponseRedirect(reverse("viewer:job", args=[key]), status=303)
    context = launch_form.context(where, texts, problems, gateway())
    return render(request, "viewer/launch.html", context, status=400 if problems else 200)


@operator_required
def launch_tasks(request: HttpRequest) -> HttpResponse:
    """The tasks a folder holds and their check results (no image look-ups: the form stays fast)."""
    return render(
        request,
        "viewer/_launch_tasks.html",
        launch_form.tasks_context(roots(), request.GET.get("tasks_dir", "")),
    )


def _picked(request: HttpRequest) -> list[str]:
    """The trials a form names: ticked boxes and typed names (several split by spaces or commas),
    each once, in order."""
    names = (n for field in request.POST.getlist("trials") for n in field.replace(",", " ").split())
    return list(dict.fromkeys(names))


@require_POST
@operator_required
def cancel(request: HttpRequest, job: str) -> HttpResponse:
    try:
        folder = _folder(job)
        how = control.cancel(folder)
    except UserError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, control.cancelled_message(folder.name, how))
    return _job_page(job)


@require_POST
@operator_required
def resume(request: HttpRequest, job: str) -> HttpResponse:
    """Resume (the unfinished and errored trials run again), or rerun the trials named in `trials`
    though they have a reward. Secret --agent-env values the job ran with come as `env_KEY`, its
    --reviewer-agent-env values as `reviewer_env_KEY`."""
    folder = _folder(job)
    secrets = {
        key: request.POST.get(f"env_{key}", "")
        for key in launching.recorded_secret_keys(folder)
        if request.POST.get(f"env_{key}")
    }
    reviewer_env = {
        key: request.POST.get(f"reviewer_env_{key}", "")
        for key in launching.recorded_reviewer_env_keys(folder)
        if request.POST.get(f"reviewer_env_{key}")
    }
    redo = _picked(request)
    if request.POST.get("picked") and not redo:
        messages.error(request, "Nothing to rerun: tick the trials in the table, or name them.")
        return _job_page(job)
    try:
        launching.resume(
            folder,
            launcher(),
            gateway(),
            agent_env=secrets,
            redo=redo,
            by=user_name(request),
            reviewer_env=reviewer_env,
        )
    except UserError as exc:
        for problem in exc.problems or [Problem("", str(exc))]:
            messages.error(request, problem.text)
    else:
        what = f"Rerunning {', '.join(redo)}" if redo else "Resuming"
        messages.success(request, f"{what} in {folder.name}.")
    return _job_page(job)


@require_POST
@operator_required
def regrade(request: HttpRequest, job: str) -> HttpResponse:
    """Regrade the whole job, or the trials named in `trials`, with a reason."""
    folder = _folder(job)
    trials = _picked(request) or None
    if request.POST.get("picked") and not trials:
        messages.error(request, "Nothing to regrade: tick the trials in the table, or name them.")
        return _job_page(job)
    reason = request.POST.get("reason", "").strip()[:500]
    back = request.POST.get("next", "")
    try:
        regrading.start_regrade(folder, trials, reason, launcher(), by=user_name(request))
    except UserError as exc:
        for problem in exc.problems or [Problem("", str(exc))]:
            messages.error(request, problem.text)
    else:
        messages.success(
            request,
            f"Regrading {', '.join(trials) if trials else 'every trial'} of {folder.name}: the change appears here as each is done.",
        )
    if trials and len(trials) == 1 and back == "trial" and "/" not in trials[0]:
        # a name with '/' is no trial's (the URL cannot hold it): back to the job's page
        return HttpResponseRedirect(reverse("viewer:trial", args=[job, trials[0]]))
    return _job_page(job)


def console(request: HttpRequest, job: str) -> HttpResponse:
    """The job's log, whole, as text: what `bench run` printed for a job the browser launched
    (console.log), or a Harbor job's job.log."""
    folder = Path(queries.get_job(job).path)
    path = launching.console_log(folder)
    if path is None and "job.log" in job_documents.job_files(folder):
        path = folder / "job.log"
    if path is None:
        raise Http404(
            "this job has no console log: it was run from a terminal, which has what it printed "
            "(a job launched from the browser keeps it in console.log)"
        )
    return trial_views.stream_file(request, open(path, "rb"), path.name, download=False)


def job_regrades(request: HttpRequest, job: str) -> HttpResponse:
    """The job's regrades from the index's events: each regraded trial's before and after."""
    row = queries.get_job(job)
    return render(request, "viewer/_job_regrades.html", {"job": row, **queries.job_regrades(row)})


@require_POST
@operator_required
def review(request: HttpRequest, job: str) -> HttpResponse:
    """A rubric review of the whole job, or of the trials ticked, by a reviewer agent."""
    folder = _folder(job)
    trials = _picked(request) or None
    try:
        reviewing.start_review(
            folder,
            trials,
            agent=request.POST.get("review_agent", "")[:100],
            model=request.POST.get("review_model", "")[:200],
            rubric_text=request.POST.get("rubric", "")[:200_000],
            launcher=launcher(),
            by=user_name(request),
        )
    except UserError as exc:
        messages.error(request, str(exc))
    else:
        what = ", ".join(trials) if trials else "every trial"
        messages.success(
            request,
            f"Reviewing {what} of {folder.name}: each trial's Rubric tab shows it when done.",
        )
    return _job_page(job)
