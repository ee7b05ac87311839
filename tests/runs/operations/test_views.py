"""Operating from the browser: each view and action by an anonymous visitor, a viewer, an
operator and an admin; CSRF on every POST; paths from the browser kept under the roots; the
launch form's problems beside their fields, and nothing started when there is one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from django.test import Client

from runs.models import Job
from tests.jobfolders import key
from tests.runs.operations.conftest import STARTED

LOGIN = "django.contrib.auth.middleware.LoginRequiredMiddleware"


def _client(user=None, **kwargs) -> Client:
    client = Client(**kwargs)
    if user is not None:
        client.force_login(user)
    return client


def _launch_form(roots, **over):
    tasks, _jobs = roots
    form = {
        "tasks_dir": str(tasks / "examples"),
        "agent": "oracle",
        "include": "hello-world",
        "concurrency": "2",
    }
    form.update(over)
    return form


@pytest.fixture
def serve(settings):
    """`bench serve`: a login for every page."""
    settings.LOGIN_REQUIRED = True
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, LOGIN]


# --- who may do what -----------------------------------------------------------------------------

POSTS = ["cancel", "resume", "regrade"]


def test_an_anonymous_visitor_is_sent_to_the_login_page_for_every_operation(serve, roots, done_job):
    client = _client()
    for url in ["/launch/", *(f"/jobs/{key(done_job)}/{verb}/" for verb in POSTS)]:
        response = client.post(url, _launch_form(roots))
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url
    assert client.get("/admin/").status_code == 302
    assert STARTED == []


def test_bench_view_without_a_login_operates_nothing(roots, done_job):
    client = _client()
    assert client.get("/launch/").status_code == 403
    for verb in POSTS:
        assert client.post(f"/jobs/{key(done_job)}/{verb}/").status_code == 403
    assert "Launch" not in client.get("/").content.decode()


def test_a_viewer_sees_no_control_and_gets_403_on_every_post(serve, roots, done_job, users):
    client = _client(users["viewer"])
    page = client.get(f"/jobs/{key(done_job)}/").content.decode()
    trial = client.get(f"/jobs/{key(done_job)}/hello-world/").content.decode()
    for control in (
        'id="resume"',
        'id="cancel"',
        'id="regrade"',
        'id="regrade-job"',
        'id="rerun"',
        'id="nav-launch"',
    ):
        assert control not in page and control not in trial
    assert client.get("/launch/").status_code == 403
    assert client.post("/launch/", _launch_form(roots)).status_code == 403
    for verb in POSTS:
        assert (
            client.post(f"/jobs/{key(done_job)}/{verb}/", {"trials": "hello-world"}).status_code
            == 403
        )
    assert client.get("/admin/").status_code == 302  # not staff: the admin's own login
    assert STARTED == []


@pytest.mark.parametrize("role", ["operator", "admin"])
def test_an_operator_and_an_admin_see_the_controls_and_launch(serve, roots, done_job, users, role):
    client = _client(users[role])
    page = client.get(f"/jobs/{key(done_job)}/").content.decode()
    assert 'id="resume"' in page and 'id="regrade-job"' in page and 'id="nav-launch"' in page
    assert 'id="regrade"' in client.get(f"/jobs/{key(done_job)}/hello-world/").content.decode()
    assert client.get("/launch/").status_code == 200
    response = client.post("/launch/", _launch_form(roots))
    assert response.status_code == 303, response.content.decode()[:2000]
    [request] = STARTED
    assert request.kind == "run" and request.by == role
    assert request.body["agent"] == "oracle" and request.body["include"] == ["hello-world"]
    # the job is shown at once, waiting, and its page follows it
    job = Job.objects.get(path=request.job_dir)
    assert response["Location"] == f"/jobs/{job.key}/"
    assert job.state == "running" and job.n_trials == 1
    assert client.get(response["Location"]).status_code == 200


def test_only_an_admin_has_the_django_admin(serve, roots, done_job, users):
    assert _client(users["operator"]).get("/admin/").status_code == 302
    admin = _client(users["admin"])
    assert admin.get("/admin/").status_code == 200
    listing = admin.get("/admin/runs/job/").content.decode()
    assert done_job.name in listing and "Resume (rerun errored" in listing
    assert admin.get("/admin/runs/trial/?outcome__exact=passed").status_code == 200
    assert admin.get("/admin/runs/attempt/?q=hello").status_code == 200
    assert admin.get("/admin/runs/budget/").status_code == 200
    # read-only: no add, no change
    assert admin.get("/admin/runs/job/add/").status_code == 403
    job = Job.objects.get(name=done_job.name)
    assert admin.post(f"/admin/runs/job/{job.pk}/change/", {"name": "x"}).status_code == 403


def test_an_admin_reruns_selected_trials_from_the_admin(serve, roots, done_job, users):
    admin = _client(users["admin"])
    trial = Job.objects.get(name=done_job.name).trials.get()
    response = admin.post(
        "/admin/runs/trial/", {"action": "rerun_trials", "_selected_action": [trial.pk]}
    )
    assert response.status_code == 302
    [request] = STARTED
    assert request.body["redo"] == ["hello-world"] and request.body["job"] == done_job.name


# --- CSRF ----------------------------------------------------------------------------------------


def test_every_post_needs_the_csrf_token(serve, roots, done_job, users):
    client = _client(users["operator"], enforce_csrf_checks=True)
    for url in ["/launch/", *(f"/jobs/{key(done_job)}/{verb}/" for verb in POSTS)]:
        assert client.post(url, _launch_form(roots)).status_code == 403, url
    assert STARTED == []
    # with the token the form carries, the launch goes through
    client.get("/launch/")
    token = client.cookies["csrftoken"].value
    response = client.post("/launch/", {**_launch_form(roots), "csrfmiddlewaretoken": token})
    assert response.status_code == 303
    assert len(STARTED) == 1


def test_pages_are_not_framed_and_allow_only_the_vendored_static_files(serve, roots, users):
    response = _client(users["operator"]).get("/launch/")
    assert response["X-Frame-Options"] == "DENY"
    policy = response["Content-Security-Policy"]
    assert "script-src http://testserver/static/;" in policy
    assert "style-src http://testserver/static/;" in policy
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy


# --- paths from the browser ----------------------------------------------------------------------


@pytest.mark.parametrize("where", ["../../", "/etc", "examples/../../..", "%2e%2e"])
def test_a_tasks_folder_outside_the_roots_is_refused(serve, roots, users, where, tmp_path):
    response = _client(users["operator"]).post("/launch/", _launch_form(roots, tasks_dir=where))
    assert response.status_code == 400
    text = response.content.decode()
    assert "not under a configured task root" in text or "is not a folder" in text
    assert STARTED == [] and not any((tmp_path / "jobs").iterdir())


def test_a_symlink_in_a_root_leading_out_of_it_is_refused(serve, roots, users, tmp_path):
    tasks, _jobs = roots
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (tasks / "sneaky").symlink_to(outside)
    response = _client(users["operator"]).post(
        "/launch/", _launch_form(roots, tasks_dir=str(tasks / "sneaky"))
    )
    assert response.status_code == 400
    assert "not under a configured task root" in response.content.decode()
    assert STARTED == []


def test_a_job_outside_the_jobs_dir_is_not_operated(serve, roots, users, tmp_path, db):
    from runs.index.folder import index_path
    from tests.jobfolders import write_job

    other = write_job(tmp_path / "other-jobs", name="2026-01-01__00-00-00", plan=["hello-world"])
    index_path(other)
    client = _client(users["operator"])
    for verb in POSTS:
        assert client.post(f"/jobs/{key(other)}/{verb}/").status_code == 404
    # nor one linked into the jobs folder from outside
    _tasks, jobs = roots
    (jobs / "linked").symlink_to(other)
    from runs.operations import roots as paths

    assert not isinstance(paths.job_folder(other, paths.Roots((), jobs)), type(other))
    assert STARTED == []


# --- the launch form's problems ------------------------------------------------------------------


def test_bad_values_are_shown_beside_their_fields_and_nothing_starts(serve, roots, users, tmp_path):
    response = _client(users["operator"]).post(
        "/launch/", _launch_form(roots, concurrency="zero", trials="-1", include="no-such-task")
    )
    assert response.status_code == 400
    text = response.content.decode()
    assert 'id="field-concurrency"' in text and "expected a whole number" in text
    assert "must be 1 or more" in text
    assert STARTED == [] and not any((tmp_path / "jobs").iterdir())


def test_a_missing_key_an_unpriced_cap_and_docker_down_are_said(serve, roots, users, monkeypatch):
    client = _client(users["operator"])
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    text = client.post(
        "/launch/", _launch_form(roots, agent="opencode", model="deepseek/deepseek-v4-flash")
    ).content.decode()
    assert "export DEEPSEEK_API_KEY" in text
    monkeypatch.setenv("BENCHFLOW_PROVIDER_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("BENCHFLOW_PROVIDER_API_KEY", "not-a-real-key-123")
    text = client.post(
        "/launch/",
        _launch_form(
            roots, agent="opencode", model="openai-compatible/mystery-9", max_cost_usd="1"
        ),
    ).content.decode()
    assert "has no price in the price table" in text
    from runs.problems import UserError

    def down():
        raise UserError(
            "the Docker engine is not reachable (DockerException); fix: run `bench doctor --fix`"
        )

    monkeypatch.setattr("runs.operations.launch.docker_client", down)
    response = client.post("/launch/", _launch_form(roots))
    assert (
        response.status_code == 400
        and "Docker engine is not reachable" in response.content.decode()
    )
    assert STARTED == []


def test_secret_agent_env_values_are_never_shown_again(serve, roots, users):
    response = _client(users["operator"]).post(
        "/launch/",
        _launch_form(
            roots, agent_env="API_TOKEN=sk-very-secret-value-1\nMODE=fast", concurrency="x"
        ),
    )
    text = response.content.decode()
    assert "sk-very-secret-value-1" not in text and "API_TOKEN=" in text


def test_the_launch_form_lists_each_tasks_check(serve, roots, users):
    text = _client(users["operator"]).get("/launch/").content.decode()
    for name in (
        "hello-world",
        "count-words",
        "--max-cost-usd",
        "--token-budget",
        "--retry-attempts",
        "--save-outputs",
    ):
        assert name in text


def test_the_launch_form_groups_its_fields_and_names_them_in_words(serve, roots, users):
    text = _client(users["operator"]).get("/launch/").content.decode()
    starts = [text.index(f'id="group-{g}"') for g in ("what", "much", "limits", "advanced")]
    assert starts == sorted(starts)
    what = text[starts[0] : starts[1]]
    assert "Agent" in what and 'list="agent-choices"' in what and 'list="model-choices"' in what
    assert '<option value="oracle">' in what and '<option value="mock/oracle">' in what
    assert 'name="pick"' in what and 'value="hello-world"' in what  # tasks ticked in a table
    limits = text[starts[2] : starts[3]]
    assert "Stop the job at this spend (USD)" in limits and 'class="flag">--max-cost-usd' in limits


def test_a_model_whose_provider_has_a_key_is_offered(serve, roots, users, monkeypatch):
    monkeypatch.setenv("DEEPSEEK_API_KEY", "not-a-real-key-123")
    text = _client(users["operator"]).get("/launch/").content.decode()
    assert '<option value="deepseek/deepseek-v4-flash">' in text
    monkeypatch.delenv("DEEPSEEK_API_KEY")
    text = _client(users["operator"]).get("/launch/").content.decode()
    assert (
        '<option value="deepseek/deepseek-v4-flash">' not in text
        and '<option value="mock/oracle">' in text
    )


def test_the_tasks_ticked_in_the_table_are_the_ones_run(serve, roots, users):
    form = _launch_form(roots, include="")
    form["pick"] = ["count-words"]
    response = _client(users["operator"]).post("/launch/", form)
    assert response.status_code == 303, response.content.decode()[:2000]
    [request] = STARTED
    assert request.body["include"] == ["count-words"]


# --- cancel --------------------------------------------------------------------------------------

HOLDER = """
import signal, sys, time
from pathlib import Path
from runs.jobfolder import JobLock
lock = JobLock(Path(sys.argv[1]))
lock.acquire()
def stop(signum, frame):
    Path(sys.argv[1], "stopped-by").write_text(signal.Signals(signum).name)
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
print("holding", flush=True)
time.sleep(60)
"""


def test_cancel_sends_sigterm_to_the_run_holding_the_jobs_lock(serve, roots, done_job, users):
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(done_job)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        Job.objects.filter(name=done_job.name).update(state="running")
        client = _client(users["operator"])
        assert 'id="cancel"' in client.get(f"/jobs/{key(done_job)}/").content.decode()
        response = client.post(f"/jobs/{key(done_job)}/cancel/")
        assert response.status_code == 302
        assert proc.wait(10) == 143
        assert (done_job / "stopped-by").read_text() == "SIGTERM"
        # nothing runs it now: a second cancel says so
        page = client.post(f"/jobs/{key(done_job)}/cancel/", follow=True).content.decode()
        assert "is not running; nothing to cancel" in page
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)


ELSEWHERE = """
import fcntl, sys, time
from pathlib import Path
fh = open(Path(sys.argv[1], ".evaluation.lock"), "a+")
fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
fh.truncate(0); fh.write("pid 4242 on another-machine"); fh.flush()
print("holding", flush=True)
time.sleep(60)
"""


def test_a_run_on_another_machine_is_asked_to_stop_through_the_job_folder(
    serve, roots, done_job, users
):
    # given a run holding the job's lock that says it runs on another machine (a shared folder)
    proc = subprocess.Popen(
        [sys.executable, "-c", ELSEWHERE, str(done_job)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        Job.objects.filter(name=done_job.name).update(state="running")
        # when an operator cancels it here
        page = (
            _client(users["operator"])
            .post(f"/jobs/{key(done_job)}/cancel/", follow=True)
            .content.decode()
        )
        # then no process here is signalled (pid 4242 is that machine's), and the run is asked
        assert "pid 4242 on another-machine, asked through the job folder" in page
        assert (done_job / ".cancel-request").read_text().startswith("SIGTERM from ")
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_resume_and_rerun_start_the_recorded_job(serve, roots, done_job, users):
    client = _client(users["operator"])
    client.post(f"/jobs/{key(done_job)}/resume/")
    client.post(f"/jobs/{key(done_job)}/resume/", {"trials": "hello-world"})
    plain, rerun = STARTED
    assert plain.body["job"] == rerun.body["job"] == done_job.name
    assert plain.body["redo"] == [] and rerun.body["redo"] == ["hello-world"]
    assert plain.body["tasks_dir"].endswith("examples")


def test_the_ticked_trials_are_rerun_together_and_nothing_ticked_starts_nothing(
    serve, roots, users
):
    from runs.index.folder import index_path
    from tests.jobfolders import result_doc, write_attempt, write_job, write_summary

    # given a finished job of two trials
    tasks, jobs = roots
    plan = ["hello-world", "count-words"]
    job = write_job(jobs, agent="oracle", model=None, tasks_dir=str(tasks / "examples"), plan=plan)
    for i, trial in enumerate(plan):
        rollout = f"{trial}__0000000{i}"
        write_attempt(job, rollout, result_doc(trial, rollout, 1.0))
    write_summary(job, passed=2)
    index_path(job)
    client = _client(users["operator"])
    # then its page has a box for each trial, tied to the form of the selected trials' controls
    page = client.get(f"/jobs/{key(job)}/").content.decode()
    assert 'id="pick-trials"' in page
    for trial in plan:
        assert f'value="{trial}" form="pick-trials"' in page
    # when nothing is ticked, Rerun and Regrade say so and start nothing
    for verb in ("resume", "regrade"):
        said = client.post(f"/jobs/{key(job)}/{verb}/", {"picked": "1"}, follow=True)
        assert "Nothing to re" in said.content.decode(), verb
    assert STARTED == []
    # when both are ticked (and one also typed in the box), both are rerun, each once
    client.post(
        f"/jobs/{key(job)}/resume/",
        {"picked": "1", "trials": ["count-words", "hello-world", "hello-world, count-words"]},
    )
    [rerun] = STARTED
    assert rerun.body["redo"] == ["count-words", "hello-world"]


def test_a_rerun_of_a_trial_the_job_does_not_have_is_refused(serve, roots, done_job, users):
    page = (
        _client(users["operator"])
        .post(f"/jobs/{key(done_job)}/resume/", {"trials": "nope"}, follow=True)
        .content.decode()
    )
    assert "--redo nope: not a trial of this job" in page
    assert STARTED == []


def test_regrade_without_saved_outputs_says_why(serve, roots, done_job, users):
    page = (
        _client(users["operator"])
        .post(
            f"/jobs/{key(done_job)}/regrade/", {"trials": "hello-world", "reason": "x"}, follow=True
        )
        .content.decode()
    )
    assert "no saved outputs" in page
    assert STARTED == []


def test_a_running_jobs_resume_is_refused(serve, roots, done_job, users):
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(done_job)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        page = (
            _client(users["operator"])
            .post(f"/jobs/{key(done_job)}/resume/", follow=True)
            .content.decode()
        )
        assert "that job is running now" in page
        assert STARTED == []
    finally:
        proc.kill()
        proc.wait()
    time.sleep(0)


def test_a_secret_agent_env_value_reaches_the_run_but_no_record(serve, roots, users):
    response = _client(users["operator"]).post(
        "/launch/", _launch_form(roots, agent_env="API_TOKEN=sk-very-secret-value-1\nMODE=fast")
    )
    assert response.status_code == 303
    [request] = STARTED
    # the run is given it (on its stdin, never a command line or a file)
    assert request.body["agent_env"] == {"API_TOKEN": "sk-very-secret-value-1", "MODE": "fast"}
    job = Job.objects.get(path=request.job_dir)
    assert "sk-very-secret-value-1" not in json.dumps(job.settings)
    assert job.settings["agent_env_secret_keys"] == ["API_TOKEN"]
    assert job.settings["agent_env"] == {"MODE": "fast"}
    from runs.models import Event

    assert "sk-very-secret" not in json.dumps(list(Event.objects.values_list("payload", flat=True)))


@pytest.mark.django_db(transaction=True)  # the subscriber writes from a thread of its own
def test_a_regrades_events_reach_the_index_and_show_before_and_after(serve, roots, done_job, users):
    from runs import events as ev
    from runs.index import Index

    # given the events a regrade emits, written by its index subscriber (its own thread)
    index = Index(done_job)
    index(ev.RegradeStarted(done_job.name, "r1", 1, 4, "the check was too lenient", "operator"))
    index(
        ev.Regraded(
            "hello-world",
            "hello-world",
            "hello-world__00000001",
            "complete",
            "pass->fail",
            1.0,
            0.0,
        )
    )
    index.close()
    # then open pages hear of them, and the job's page shows the before and after
    from runs.models import Event

    kinds = list(Event.objects.filter(job__name=done_job.name).values_list("kind", "trial_name"))
    assert kinds[-2:] == [("regrade_started", ""), ("regraded", "hello-world")]
    text = _client(users["viewer"]).get(f"/jobs/{key(done_job)}/regrades/").content.decode()
    assert "pass-&gt;fail" in text and "1.00" in text and "0.00" in text
    assert "by operator: the check was too lenient" in text


def test_the_advanced_group_opens_only_for_a_problem_or_a_typed_pattern(serve, roots, users):
    client = _client(users["operator"])
    advanced = lambda text: text[text.index('id="group-advanced"') :]  # noqa: E731
    assert "<details open>" not in advanced(client.get("/launch/").content.decode())
    text = client.post("/launch/", _launch_form(roots, retry_attempts="x")).content.decode()
    assert "<details open>" in advanced(text)


def test_a_resume_from_the_browser_asks_for_the_reviewers_env_again(serve, roots, done_job, users):
    from runs.index.folder import index_path

    # given a job that ran with an automatic reviewer given an env value (its name recorded only)
    evaluation = json.loads((done_job / "evaluation.json").read_text())
    evaluation["reviewer"] = {
        "model": "mock/oracle",
        "agent": "opencode",
        "agent_env_keys": ["REVIEW_TOKEN"],
    }
    (done_job / "evaluation.json").write_text(json.dumps(evaluation))
    index_path(done_job)
    client = _client(users["operator"])
    # then its page asks for the value beside the Resume button
    page = client.get(f"/jobs/{key(done_job)}/").content.decode()
    assert 'name="reviewer_env_REVIEW_TOKEN"' in page
    # when it is resumed without it, nothing starts and the page says which
    said = client.post(f"/jobs/{key(done_job)}/resume/", follow=True).content.decode()
    assert "--reviewer-agent-env values that are never recorded: REVIEW_TOKEN" in said
    assert STARTED == []
    # when it is given, the run gets it
    client.post(f"/jobs/{key(done_job)}/resume/", {"reviewer_env_REVIEW_TOKEN": "rv-secret-1"})
    [request] = STARTED
    assert request.body["reviewer_agent_env"] == {"REVIEW_TOKEN": "rv-secret-1"}
