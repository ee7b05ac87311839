"""What the operating views share: who may operate, where the browser may point (the configured
roots), how a long operation leaves the request, and the model gateway a launch is checked by."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string

from runs.gateway import ModelGateway
from runs.models import Job
from runs.operations import roots as paths
from runs.operations.process import Launcher, ProcessLauncher
from runs.operations.roles import OPERATE_PERM
from runs.problems import Problem

View = TypeVar("View", bound=Callable[..., HttpResponse])


def can_operate(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated and user.has_perm(OPERATE_PERM))


def operator_required(view: View) -> View:
    """Refuses (403) whoever may not operate: a viewer, and anyone not logged in."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not can_operate(request):
            raise PermissionDenied("operating jobs needs the operator or admin role")
        return view(request, *args, **kwargs)

    return wrapped  # type: ignore[return-value]


def context(request: HttpRequest) -> dict[str, Any]:
    """Template context: whether to show the operating controls."""
    return {"can_operate": can_operate(request)}


def roots() -> paths.Roots:
    return paths.Roots.from_env(
        {
            paths.TASK_ROOTS_VAR: settings.BENCHFLOW_TASK_ROOTS,
            paths.JOBS_DIR_VAR: settings.BENCHFLOW_JOBS_DIR,
        }
    )


def launcher() -> Launcher:
    if settings.BENCHFLOW_LAUNCHER:
        return import_string(settings.BENCHFLOW_LAUNCHER)()  # type: ignore[no-any-return]
    local = ProcessLauncher(settings.BENCHFLOW_OPERATION_ARGV)
    from runs.operations.fleet import FleetLauncher, fleet_up

    if fleet_up():  # Redis set and a worker up: the job is coordinated on the fleet
        return FleetLauncher(import_string(settings.BENCHFLOW_FLEET_SENDER), local)
    return local


def gateway() -> ModelGateway | None:
    return import_string(settings.BENCHFLOW_GATEWAY)() if settings.BENCHFLOW_GATEWAY else None


def job_dir(job: Job) -> Path | Problem:
    """The job's folder, when it lies under BENCHFLOW_JOBS_DIR (symlinks resolved); else why not."""
    return paths.job_folder(job.path, roots())


def user_name(request: HttpRequest) -> str:
    return str(getattr(request.user, "username", "") or "")
