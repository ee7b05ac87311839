"""The dashboard's routes (namespace `viewer`). Names from a URL are looked up in the index: a
job by name, a trial among that job's trials, an attempt among that trial's attempts."""

from django.contrib.auth import views as auth_views
from django.urls import path, reverse_lazy

from viewer import compare_views, operate_views, trial_views, views, workers_views
from viewer.logins import LoginForm

app_name = "viewer"

urlpatterns = [
    path("", views.jobs, name="jobs"),
    path("jobs/", views.jobs, name="jobs-list"),
    path("jobs/table/", views.jobs_table, name="jobs-table"),
    path("compare/", compare_views.compare, name="compare"),
    path("workers/", workers_views.workers, name="workers"),
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
    path("jobs/<str:job>/cancel/", operate_views.cancel, name="job-cancel"),
    path("jobs/<str:job>/resume/", operate_views.resume, name="job-resume"),
    path("jobs/<str:job>/regrade/", operate_views.regrade, name="job-regrade"),
    path("jobs/<str:job>/console/", operate_views.console, name="job-console"),
    path("jobs/<str:job>/files/<str:name>", views.job_file, name="job-file"),
    path("jobs/<str:job>/regrades/", operate_views.job_regrades, name="job-regrades"),
    path("jobs/<str:job>/", views.job_page, name="job"),
    path("jobs/<str:job>/live/", views.job_live, name="job-live"),
    path("jobs/<str:job>/trials/", views.job_trials, name="job-trials"),
    path("jobs/<str:job>/grid/", views.job_grid, name="job-grid"),
    path("jobs/<str:job>/chart.json", views.job_chart, name="job-chart"),
    path("jobs/<str:job>/events.json", views.job_events, name="job-events"),
    path("jobs/<str:job>/<str:trial>/", trial_views.trial_page, name="trial"),
    path(
        "jobs/<str:job>/<str:trial>/<str:rollout>/transcript/",
        trial_views.transcript,
        name="transcript",
    ),
    path(
        "jobs/<str:job>/<str:trial>/<str:rollout>/log/",
        trial_views.jsonl_log,
        name="jsonl-log",
    ),
    path(
        "jobs/<str:job>/<str:trial>/<str:rollout>/files/<path:rel>",
        trial_views.raw_file,
        name="file",
    ),
]
