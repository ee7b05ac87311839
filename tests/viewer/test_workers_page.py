"""The dashboard shows the workers (host, slots, attempts running, last seen) and, on a trial's
page, the worker each attempt ran on."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runs.index.folder import index_path
from runs.models import Worker
from runs.workers import leases
from tests.jobfolders import key, result_doc, write_attempt, write_job, write_summary

pytestmark = pytest.mark.django_db


def held_lease(job_path: str, trial: str, worker: int, rollout: str, start: bool = True) -> int:
    d = leases.open_dispatcher(job_path, "/work", "benchflow", {})
    lease = leases.create(
        d,
        job_path=job_path,
        trial_name=trial,
        task_name=trial,
        task_path=f"/tasks/{trial}",
        trial_index=0,
        attempt=1,
        env_digest="",
        enqueue=lambda _id: None,
    )
    claim = leases.claim(lease, worker, 30, 60)
    assert claim is not None
    if start:
        assert leases.start(lease, claim, rollout) == leases.STARTED
    return claim


def test_the_workers_page_lists_each_worker_with_its_slots_attempts_and_last_seen(client):
    # given a worker running an attempt of an indexed job, one stopped, and one killed (not seen
    # for a minute)
    from runs.models import Job

    job = Job.objects.create(
        name="2026-01-01__00-00-00",
        path="/jobs/2026-01-01__00-00-00",
        tasks_dir="t",
        agent="oracle",
    )
    busy = leases.register_worker("gpu-box:101", 4, ["benchflow"])
    held_lease("/jobs/2026-01-01__00-00-00", "hello", busy, "hello__00000001")
    held_lease("/jobs/2026-01-01__00-00-00", "next", busy, "", start=False)
    held_lease("/jobs/2026-01-01__00-00-00", "later", busy, "", start=False)
    stopped = leases.register_worker("cpu-box:7", 2, ["benchflow"])
    leases.worker_stopped(stopped)
    killed = leases.register_worker("cpu-box:9", 2, ["benchflow", "big"])
    Worker.objects.filter(pk=killed).update(last_seen_at=leases.now() - timedelta(minutes=1))
    # when
    page = client.get("/workers/").content.decode()
    # then
    row = page[page.index("gpu-box:101") :].split("</tr>", 1)[0]
    assert '<td class="up">up</td>' in row and '<td class="num">4</td>' in row
    assert '<td class="num">1</td><td class="num">2</td>' in row  # one running, two prepared
    assert f'href="/jobs/2026-01-01__00-00-00~{job.pk}/hello/"' in row and ">hello</a>" in row
    assert ">next</a>" not in row  # only what runs is listed
    assert "s ago" in row
    assert '<td class="stopped">stopped</td>' in page[page.index("cpu-box:7") :].split("</tr>")[0]
    gone = page[page.index("cpu-box:9") :].split("</tr>")[0]
    assert '<td class="gone">gone</td>' in gone and "benchflow, big" in gone
    assert "1m 0s ago" in gone
    assert 'href="/workers/">Workers</a>' in page


def test_with_no_worker_the_page_says_attempts_run_in_process(client):
    page = client.get("/workers/").content.decode()
    assert "No worker has started" in page


def test_a_trials_page_names_the_worker_each_attempt_ran_on(client, view_root):
    # given a job whose first attempt of hello was lost with its worker and ran again on another
    job = write_job(view_root, plan=["hello", "local"])
    write_attempt(job, "hello__00000002", result_doc("hello", "hello__00000002", 1.0))
    write_attempt(job, "local__00000003", result_doc("local", "local__00000003", 1.0))
    write_summary(job, passed=2)
    index_path(job)
    worker = leases.register_worker("box-b:22", 2, ["benchflow"])
    held_lease(str(job.resolve()), "hello", worker, "hello__00000002")
    # when / then
    page = client.get(f"/jobs/{key(job)}/hello/").content.decode()
    assert "<th>Worker</th>" in page and '<td class="muted">box-b:22</td>' in page
    other = client.get(f"/jobs/{key(job)}/local/").content.decode()
    assert '<td class="muted">in process</td>' in other


def test_a_worker_whose_disk_is_full_says_why_it_takes_nothing(client):
    sick = leases.register_worker("full-box:3", 2, ["benchflow"])
    leases.worker_trouble(sick, "takes no attempt: no space left on the device (/jobs/x)")
    assert (
        Worker.objects.get(pk=sick).queues == []
    )  # no coordinator counts on it, none hands it one
    page = client.get("/workers/").content.decode()
    row = page[page.index("full-box:3") :].split("</tr>", 1)[0]
    assert "takes no attempt: no space left on the device (/jobs/x)" in row
    leases.worker_well(sick, ["benchflow"])
    row = client.get("/workers/").content.decode()
    assert "no space left" not in row
    assert Worker.objects.get(pk=sick).queues == ["benchflow"]


def _logged_in(role: str):
    from django.contrib.auth import get_user_model
    from django.test import Client

    from runs.operations import roles

    roles.add_user(role, role, f"pw-{role}-drain-123")
    client = Client(enforce_csrf_checks=True)
    client.force_login(get_user_model().objects.get(username=role))
    return client


def _csrf(page: str) -> str:
    return page.split('name="csrfmiddlewaretoken" value="', 1)[1].split('"', 1)[0]


def test_an_operators_drain_button_moves_the_machines_jobs_and_a_viewers_press_is_refused():
    # given a job coordinated on the machine alpha, whose worker is up
    from runs.models import Coordination
    from runs.workers import coordination

    Worker.objects.filter(pk=leases.register_worker("alpha:101", 2, ["benchflow"])).update(
        host="alpha"
    )
    pk = coordination.submit("/jobs/2026-01-01__00-00-00", "benchflow", {})
    assert pk is not None and coordination.take(pk, "alpha:101", 20, host="alpha") is not None
    # when a viewer presses Drain (the page shows them no button), it is refused
    viewer = _logged_in("viewer")
    page = viewer.get("/workers/").content.decode()
    assert "/workers/drain/" not in page
    refused = viewer.post("/workers/drain/", {"host": "alpha", "csrfmiddlewaretoken": _csrf(page)})
    assert refused.status_code == 403
    assert Coordination.objects.get(pk=pk).avoid_host == ""
    # and a post without the CSRF token drains nothing
    operator = _logged_in("operator")
    assert operator.post("/workers/drain/", {"host": "alpha"}).status_code == 403
    assert Coordination.objects.get(pk=pk).avoid_host == ""
    # when an operator presses the Drain button on alpha's row
    page = operator.get("/workers/").content.decode()
    row = page[page.index("alpha:101") :].split("</tr>", 1)[0]
    assert 'action="/workers/drain/"' in row and 'name="host" value="alpha"' in row
    pressed = operator.post(
        "/workers/drain/", {"host": "alpha", "csrfmiddlewaretoken": _csrf(page)}, follow=True
    )
    # then the job is to move off alpha, as `bench drain alpha` does, and the page says so
    assert Coordination.objects.get(pk=pk).avoid_host == "alpha"
    assert "Draining alpha: 2026-01-01__00-00-00" in pressed.content.decode()
