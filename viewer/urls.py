"""The dashboard's routes (namespace `viewer`). A job is named by its key (runs.models.Job.key:
name~id, unique where names are not), looked up by viewer/queries.py:get_job; a trial among that
job's trials, an attempt among that trial's attempts. A URL naming a job by its name alone (the
URLs before keys) is redirected to the newest job of that name, the rest of the URL kept."""

from django.contrib.auth import views as auth_views
from django.urls import path, re_path, register_converter, reverse_lazy

from viewer import (
    compare_views,
    confirm,
    downloads,
    operate_views,
    outcomes_views,
    review_views,
    trial_views,
    views,
    workers_views,
)
from viewer.logins import LoginForm


class JobKey:
    """A job's key: anything up to a '/', ending in ~ and its id."""

    regex = r"[^/]+~[0-9]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(JobKey, "job")

app_name = "viewer"

urlpatterns = [
    path("", views.jobs, name="jobs"),
    path("jobs/", views.jobs, name="jobs-list"),
    path("jobs/table/", views.jobs_table, name="jobs-table"),
    path("compare/", compare_views.compare, name="compare"),
    path("search/", views.search, name="search"),
    path("outcomes/", outcomes_views.outcomes_page, name="outcomes"),
    path("workers/", workers_views.workers, name="workers"),
    path("workers/drain/", workers_views.drain, name="workers-drain"),
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="viewer/login.html", authentication_form=LoginForm
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "password/",
        auth_views.PasswordChangeView.as_view(
            template_name="viewer/password.html",
            success_url=reverse_lazy("viewer:password-done"),
        ),
        name="password",
    ),
    path(
        "password/done/",
        auth_views.PasswordChangeDoneView.as_view(template_name="viewer/password_done.html"),
        name="password-done",
    ),
    path("launch/", operate_views.launch, name="launch"),
    path("launch/tasks/", operate_views.launch_tasks, name="launch-tasks"),
    path("jobs/<job:job>/cancel/", operate_views.cancel, name="job-cancel"),
    path("jobs/<job:job>/resume/", operate_views.resume, name="job-resume"),
    path("jobs/<job:job>/regrade/", operate_views.regrade, name="job-regrade"),
    path("jobs/<job:job>/review/", operate_views.review, name="job-review"),
    path("jobs/<job:job>/console/", operate_views.console, name="job-console"),
    path("jobs/<job:job>/files/<str:name>", views.job_file, name="job-file"),
    path("jobs/<job:job>/regrades/", operate_views.job_regrades, name="job-regrades"),
    path("jobs/<job:job>/", views.job_page, name="job"),
    path("jobs/<job:job>/live/", views.job_live, name="job-live"),
    path("jobs/<job:job>/trials/", views.job_trials, name="job-trials"),
    path("jobs/<job:job>/trials.csv", downloads.trials_csv, name="job-trials-csv"),
    path("jobs/<job:job>/trials.json", downloads.trials_json, name="job-trials-json"),
    path("jobs/<job:job>/grid/", views.job_grid, name="job-grid"),
    path("jobs/<job:job>/chart.json", views.job_chart, name="job-chart"),
    path("jobs/<job:job>/events.json", views.job_events, name="job-events"),
    path("confirm/", confirm.decide, name="confirm"),
    path("jobs/<job:job>/reviews.json", review_views.job_reviews, name="job-reviews"),
    path("jobs/<job:job>/<str:trial>/", trial_views.trial_page, name="trial"),
    path("jobs/<job:job>/<str:trial>/note/", review_views.add_note, name="trial-note"),
    path("jobs/<job:job>/<str:trial>/verdict/", review_views.set_verdict, name="trial-verdict"),
    path("jobs/<job:job>/<str:trial>/trial.json", downloads.trial_json, name="trial-json"),
    path(
        "jobs/<job:job>/<str:trial>/<str:rollout>/transcript/",
        trial_views.transcript,
        name="transcript",
    ),
    path(
        "jobs/<job:job>/<str:trial>/<str:rollout>/stream/",
        trial_views.stream,
        name="stream",
    ),
    path(
        "jobs/<job:job>/<str:trial>/<str:rollout>/log/",
        trial_views.jsonl_log,
        name="jsonl-log",
    ),
    path(
        "jobs/<job:job>/<str:trial>/<str:rollout>/files/<path:rel>",
        trial_views.raw_file,
        name="file",
    ),
    # a job by its name alone (a name that only looks like a key is found by name above)
    re_path(r"^jobs/(?P<name>[^/]+)/(?P<rest>.*)$", views.by_name),
]
