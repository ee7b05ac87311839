"""The dashboard's pages read the index: jobs list, job page, fragments, trial page, compare."""

from __future__ import annotations

import json

import pytest

from runs.index.folder import index_path
from runs.models import Job
from tests.jobfolders import key, result_doc, write_attempt, write_job, write_summary

pytestmark = pytest.mark.django_db


def test_jobs_list_shows_state_agent_progress_and_passes(client, job):
    page = client.get("/").content.decode()
    assert job.name in page and "opencode" in page and "2/2" in page
    assert '<td class="num passed">1</td>' in page


def test_an_oracle_job_is_not_passed_0_on_the_list(client, view_root):
    # the old list counted controls out of "Passed" while the job page counted them in
    job = write_job(view_root, "2026-11-29__13-00-00", agent="oracle", plan=["a", "b"])
    for task in "ab":
        write_attempt(
            job, f"{task}__0000000{task}", result_doc(task, f"{task}__0000000{task}", 1.0)
        )
    write_summary(job)
    index_path(job)
    page = client.get("/").content.decode()
    assert '<td class="num passed">2</td>' in page


def test_job_page_shows_progress_run_card_and_trials(client, job):
    page = client.get(f"/jobs/{key(job)}/").content.decode()
    assert "hello" in page and "broken" in page and "corrupt_result" in page
    assert f'data-seq="{Job.objects.get().last_seq}"' in page
    assert "Run card" in page and "Outcomes" in page


def test_trials_table_sorts_filters_and_pages_on_the_server(client, view_root):
    job = write_job(view_root, plan=[f"t{i:03d}" for i in range(60)])
    for i in range(60):
        name = f"t{i:03d}"
        write_attempt(
            job,
            f"{name}__{i:08x}",
            result_doc(name, f"{name}__{i:08x}", (i % 3) / 2, agent_result={"total_tokens": i}),
        )
    index_path(job)
    url = f"/jobs/{key(job)}/trials/"
    first = client.get(url, {"sort": "-tokens"}).content.decode()
    assert first.index("t059") < first.index("t058") and "page 1 of 2" in first
    passed = client.get(url, {"show": "passed"}).content.decode()
    assert "t002" in passed and "t001" not in passed and "20 trial(s)" in passed
    second = client.get(url, {"sort": "trial", "page": 2}).content.decode()
    assert "t055" in second and "t000" not in second
    found = client.get(url, {"q": "t04"}).content.decode()
    assert "10 trial(s)" in found


def test_running_trials_show_running_and_unstarted_ones_waiting(client, view_root):
    # the old viewer showed running trials as interrupted and left unstarted tasks out
    import fcntl

    job = write_job(view_root, plan=["a", "b", "c"])
    write_attempt(job, "a__00000001", result_doc("a", "a__00000001", 1.0))
    write_attempt(job, "b__00000002", None)
    with open(job / ".evaluation.lock", "w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        index_path(job)
    table = client.get(f"/jobs/{key(job)}/trials/").content.decode()
    assert (
        '<td class="running">running</td>' in table and '<td class="waiting">waiting</td>' in table
    )
    assert "interrupted" not in table


def test_outcomes_grid_is_compact_data_with_each_errored_trials_cause(client, job):
    import html as html_lib
    import json
    import re

    grid = client.get(f"/jobs/{key(job)}/grid/").content.decode()
    data = json.loads(
        html_lib.unescape(re.search(r'id="grid-data"[^>]*>(.*?)</script>', grid, re.S).group(1))
    )
    assert "<canvas" in grid and 'class="legend"' in grid and 'class="sq' not in grid
    assert data["tasks"] == ["hello", "broken"]
    (column,) = data["columns"]
    assert column["cells"] == ["k", "x"]  # hello: reward 1; broken: unscored
    assert "corrupt or half-written" in column["extra"]["1"][2]
    assert "infrastructure problem" in column["extra"]["1"][2]
    assert column["href"].endswith(f"/jobs/{key(job)}/")


def test_events_after_a_sequence_number_are_what_a_reconnecting_page_missed(client, job):
    seq = Job.objects.get().last_seq
    index_path(job)
    data = client.get(f"/jobs/{key(job)}/events.json", {"after": seq}).json()
    assert [e["kind"] for e in data["events"]] == ["indexed"] and data["last_seq"] == seq + 1


def test_chart_data_counts_running_and_finished_attempts(client, job):
    data = client.get(f"/jobs/{key(job)}/chart.json").json()
    assert data["finished"][-1] == 1 and data["running"][-1] == 0


def test_trial_page_shows_usage_timing_and_files_escaped(client, job):
    page = client.get(f"/jobs/{key(job)}/hello/").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert "ok &lt;b&gt;bold&lt;/b&gt;" in page
    assert "1,200 (400)" in page and "provider_response" in page and "agent_execution" in page


def test_a_corrupt_result_shows_as_such_on_its_trial_page(client, job):
    response = client.get(f"/jobs/{key(job)}/broken/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "result.json is corrupt or half-written" in page and "rewa" in page


@pytest.mark.parametrize(
    "path",
    [
        "/jobs/{job}/../",
        "/jobs/{job}/%2e%2e/",
        "/jobs/{job}/..%2f/",
        "/jobs/{job}/..%2F..%2Fetc/",
        "/jobs/{job}/hello/..%2f..%2f/transcript/",
        "/jobs/{job}/hello/hello__00000001/files/../config.json",
        "/jobs/{job}/hello/hello__00000001/files/..%2fbroken__00000002%2fresult.json",
        "/jobs/{job}/hello/hello__00000001/files//etc/passwd",
        "/jobs/{job}/hello/broken__00000002/files/result.json",
        "/jobs/nope/",
    ],
)
def test_a_path_from_a_url_never_leaves_the_job(client, job, path):
    # the folder above the job has a config.json: the old viewer showed it for /jobs/<job>/../
    (job.parent / "config.json").write_text("{}")
    response = client.get(path.format(job=key(job)))
    assert response.status_code == 404


def test_a_symlink_in_an_attempt_is_neither_listed_nor_served(client, job, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    (job / "hello__00000001" / "agent" / "link.txt").symlink_to(secret)
    (job / "hello__00000001" / "artifacts").symlink_to(tmp_path, target_is_directory=True)
    page = client.get(f"/jobs/{key(job)}/hello/").content.decode()
    assert "link.txt" not in page and "top secret" not in page
    for rel in ("agent/link.txt", "artifacts/secret.txt"):
        assert client.get(f"/jobs/{key(job)}/hello/hello__00000001/files/{rel}").status_code == 404


def test_a_large_log_is_cut_on_the_page_and_streamed_whole_as_plain_text(client, job):
    log = job / "hello__00000001" / "agent" / "opencode.txt"
    log.write_text("x" * 300_000 + "<end>")
    page = client.get(f"/jobs/{key(job)}/hello/").content.decode()
    assert "the whole file" in page and "&lt;end&gt;" not in page
    whole = client.get(f"/jobs/{key(job)}/hello/hello__00000001/files/agent/opencode.txt")
    assert (
        whole["Content-Type"].startswith("text/plain")
        and "sandbox" in whole["Content-Security-Policy"]
    )
    assert b"".join(whole.streaming_content).endswith(b"<end>")


def test_trajectory_evidence_artifacts_build_log_and_regrades_are_shown(client, job):
    folder = job / "hello__00000001"
    (folder / "trajectory").mkdir()
    call = {
        "model": "mock/oracle",
        "protocol": "chat",
        "duration_s": 0.5,
        "status": 200,
        "usage": {"input_tokens": 10, "output_tokens": 2, "cache_read_tokens": 0},
        "request": {"messages": [{"role": "user", "content": "solve <it>"}]},
        "response": {
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": "c1", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}
                        ],
                    }
                }
            ]
        },
    }
    (folder / "trajectory" / "llm_trajectory.jsonl").write_text(json.dumps(call) + "\n")
    (folder / "evidence").mkdir()
    (folder / "evidence" / "manifest.json").write_text("{}")
    (folder / "artifacts").mkdir()
    (folder / "artifacts" / "plot.txt").write_text("data")
    (job / "builds").mkdir()
    (job / "builds" / "hello.log").write_text("Step 1/2 : FROM debian")
    (folder / "regrade.json").write_text(
        json.dumps(
            {
                "original": {"reward": 1.0},
                "regrades": [
                    {
                        "created_at": "2026-12-01T10:00:00",
                        "reason": "fixed test.sh",
                        "status": "complete",
                        "change": "pass->fail",
                        "new_reward": 0.0,
                        "task_changed": True,
                    }
                ],
            }
        )
    )
    page = client.get(f"/jobs/{key(job)}/hello/").content.decode()
    for text in (
        "Model calls",
        "evidence/manifest.json",
        "artifacts/plot.txt",
        "image build log",
        "fixed test.sh",
        "pass-&gt;fail",
    ):
        assert text in page, text
    transcript = client.get(f"/jobs/{key(job)}/hello/hello__00000001/transcript/").content.decode()
    assert "solve &lt;it&gt;" in transcript and "bash" in transcript and "10 in" in transcript
    build = client.get(f"/jobs/{key(job)}/hello/hello__00000001/files/build.log")
    assert b"".join(build.streaming_content) == b"Step 1/2 : FROM debian"


def test_a_session_log_is_read_as_entries_not_raw_jsonl(client, job):
    sessions = job / "hello__00000001" / "agent" / "sessions"
    sessions.mkdir()
    lines = [
        {"type": "user", "message": {"role": "user", "content": "hi there"}},
        {
            "type": "assistant",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "on it"},
                    {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}, "id": "t1"},
                ],
            },
        },
    ]
    (sessions / "s.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    log = client.get(
        f"/jobs/{key(job)}/hello/hello__00000001/log/", {"path": "agent/sessions/s.jsonl"}
    ).content.decode()
    assert "hi there" in log and "on it" in log and "Bash" in log and "&quot;type&quot;" not in log
    assert "2 entries" in log


def test_compare_page_pairs_trials_and_says_whether_the_difference_is_real(client, view_root):
    for name, reward in (("2026-11-29__01-00-00", 0.0), ("2026-11-29__02-00-00", 1.0)):
        job = write_job(view_root, name, plan=[f"t{i}" for i in range(8)])
        for i in range(8):
            write_attempt(job, f"t{i}__{name[-5:-3]}00000{i}", result_doc(f"t{i}", "x", reward))
        write_summary(job)
        index_path(job)
    page = client.get(
        "/compare/", {"a": "2026-11-29__01-00-00", "b": "2026-11-29__02-00-00"}
    ).content.decode()
    assert "+1.000 over 8 paired trials" in page and "the difference is real" in page
    assert "McNemar p=0.00781" in page


def test_bench_view_shows_only_the_folders_it_was_given(client, view_root, tmp_path, settings):
    other = write_job(tmp_path / "elsewhere", "2026-01-01__00-00-00", plan=["z"])
    index_path(other)
    assert "2026-01-01__00-00-00" not in client.get("/").content.decode()
    assert client.get("/jobs/2026-01-01__00-00-00/").status_code == 404


def test_bench_serve_sends_an_anonymous_visitor_to_the_login_page(client, job, settings):
    settings.LOGIN_REQUIRED = True
    settings.MIDDLEWARE = [
        *settings.MIDDLEWARE,
        "django.contrib.auth.middleware.LoginRequiredMiddleware",
    ]
    response = client.get(f"/jobs/{key(job)}/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert client.get("/login/").status_code == 200
    from django.contrib.auth.models import User

    User.objects.create_user("alice", password="pw-alice-1")
    client.login(username="alice", password="pw-alice-1")
    assert client.get(f"/jobs/{key(job)}/").status_code == 200


def test_chart_data_has_the_runners_utilization_reports(client, job):
    from django.db import transaction

    from runs.index.writer import record_event

    with transaction.atomic():
        record_event(Job.objects.get().pk, "utilization_reported", "", {"setup": 0.5, "agent": 2.0})
    data = client.get(f"/jobs/{key(job)}/chart.json").json()
    assert 2.5 in data["busy"] and len(data["busy"]) == len(data["x"])


@pytest.mark.parametrize(
    "trial", ["hello", "a b#c", "50%", "t<script>", "naïve", "x@y:z~!$&'()*+,;=", "a?b"]
)
def test_a_trial_url_is_the_one_reverse_makes(trial, job):
    from django.urls import reverse

    from viewer.queries import job_key_at
    from viewer.templatetags.bench import trial_url

    job_key = job_key_at(job)
    assert trial_url(trial, job_key) == reverse("viewer:trial", args=[job_key, trial])
    assert trial_url(trial, "job with space~7") == reverse(
        "viewer:trial", args=["job with space~7", trial]
    )


def test_the_jobs_list_follows_a_jobs_progress_when_no_job_is_added(client, job):
    # the table was stored by the number of jobs: a job's progress never showed on the list
    from django.db import transaction

    from runs.index.writer import record_event

    assert "another-agent" not in client.get("/jobs/table/").content.decode()
    with transaction.atomic():
        Job.objects.update(agent="another-agent")
        record_event(Job.objects.get().pk, "attempt_finished", "hello", {})
    assert "another-agent" in client.get("/jobs/table/").content.decode()
