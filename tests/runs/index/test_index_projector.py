"""The index's one writer: every row comes from an event through the projector, each kind's Event
row reads back as its event, and an operation's decision about a job is applied as it was made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runs import events as ev
from runs.index import Index
from runs.index.folder import index_path
from runs.index.projector import HANDLERS, Projector
from runs.models import Event, Job, JobState, Trial
from runs.operations import shown
from tests.conftest import trial_result


def test_every_event_class_has_its_handler_in_the_index():
    assert set(HANDLERS) == set(ev.KINDS.values())


@pytest.mark.django_db(transaction=True)
def test_every_event_row_a_job_leaves_reads_back_as_its_event(tmp_path):
    # given a job whose agent makes tool calls and whose end comes from its run
    job_dir = tmp_path / "2026-01-01__00-00-00"
    index = Index()
    index(
        ev.JobStarted(job_dir.name, str(job_dir), {"agent": "oracle", "plan": ["a"]}, 1, 0, 1, 1, 0)
    )
    index(ev.AttemptStarted("a", "a", 0, 1, "a__00000001"))
    index(ev.PhaseChanged("a", "a__00000001", "agent"))
    index(ev.ToolCalled("a", "a__00000001", "ls"))
    index.flush()
    assert Trial.objects.get().n_tool_calls == 1  # the count is on the trial's row, not the event
    res = trial_result("a", rollout_name="a__00000001", rewards={"reward": 1.0})
    index(ev.AttemptFinished("a", "a__00000001", res))
    summary = {"passed": 1}
    index(
        ev.JobFinished(
            job_dir.name,
            str(job_dir),
            str(tmp_path),
            summary,
            "finished",
            1.0,
            1,
            0,
            False,
            1,
            0,
            False,
        )
    )
    index.close()
    # when every Event row is read back
    rows = list(Event.objects.order_by("seq").values_list("kind", "payload"))
    # then each is its event again (one shape a kind: the payload is the event's, nothing added)
    assert [kind for kind, _ in rows] == [
        "job_started",
        "attempt_started",
        "phase_changed",
        "tool_called",
        "attempt_finished",
        "job_finished",
    ]
    for kind, payload in rows:
        assert ev.from_payload(kind, payload).kind == kind


def _launched(jobs: Path, name: str = "2026-01-02__00-00-00") -> Path:
    job_dir = jobs / name
    job_dir.mkdir(parents=True)
    shown.launched(job_dir, {"agent": "oracle", "plan": ["a", "b"]}, "operator")
    return job_dir


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("files", "state"),
    [
        ({}, JobState.FAILED),  # nothing ever ran
        ({"evaluation.json": {"agent": "oracle"}}, JobState.INTERRUPTED),
        (
            {"evaluation.json": {"agent": "oracle"}, "summary.json": {"passed": 2}},
            JobState.FINISHED,
        ),
    ],
)
def test_an_operation_decides_how_its_job_ended_and_the_index_applies_it(tmp_path, files, state):
    # given a job launched from the dashboard whose run never said how it ended
    job_dir = _launched(tmp_path)
    for name, document in files.items():
        (job_dir / name).write_text(json.dumps(document))
    # when the operation's process ends
    shown.ended(job_dir, "failed")
    # then the job's row is what the folder says, its trials no longer wait, and the decision is
    # one event row that reads back as the operation's event
    job = Job.objects.get()
    assert job.state == state and job.finished_at is not None
    assert set(Trial.objects.values_list("state", flat=True)) == {"not_run"}
    kinds = list(Event.objects.order_by("seq").values_list("kind", flat=True))
    assert kinds == [ev.JobLaunched.kind, ev.JobClosed.kind]
    closed = ev.from_payload(ev.JobClosed.kind, Event.objects.get(kind=ev.JobClosed.kind).payload)
    assert isinstance(closed, ev.JobClosed)
    assert (closed.state, closed.why) == (state, "failed")
    assert closed.summary == files.get("summary.json")


@pytest.mark.django_db(transaction=True)
def test_a_job_whose_run_said_how_it_ended_is_left_as_it_said(tmp_path):
    job_dir = _launched(tmp_path)
    Projector().apply(
        ev.JobFinished(
            job_dir.name, str(job_dir), str(tmp_path), {}, "finished", 1.0, 2, 0, False, 0, 0, False
        )
    )  # a projector of its own has no row for it: nothing written
    Job.objects.update(state=JobState.FINISHED)

    shown.ended(job_dir, "ended")

    assert not Event.objects.filter(kind=ev.JobClosed.kind).exists()


@pytest.mark.django_db(transaction=True)
def test_a_launch_that_failed_takes_the_new_jobs_row_and_keeps_a_resumed_ones(tmp_path):
    new = _launched(tmp_path, "2026-01-03__00-00-00")
    resumed = _launched(tmp_path, "2026-01-04__00-00-00")
    (resumed / "evaluation.json").write_text(json.dumps({"agent": "oracle"}))

    shown.not_launched(new, existed=False)
    shown.not_launched(resumed, existed=True)

    [job] = Job.objects.all()
    assert job.name == resumed.name and job.state == JobState.INTERRUPTED
    assert Event.objects.filter(job=job).last().kind == ev.JobClosed.kind


@pytest.mark.django_db(transaction=True)
def test_bench_index_replays_a_folder_as_events_through_the_projector(tmp_path, monkeypatch):
    # given a job folder of two attempts
    from tests.jobfolders import result_doc, write_attempt, write_job

    job_dir = write_job(tmp_path, "2026-01-05__00-00-00", agent="oracle", plan=["a", "b"])
    write_attempt(job_dir, "a__00000001", result_doc("a", "a__00000001", 1.0))
    write_attempt(job_dir, "b__00000002", result_doc("b", "b__00000002", 0.0))
    applied: list[ev.Event] = []
    apply = Projector.apply

    def spy(self: Projector, event: ev.Event) -> None:
        applied.append(event)
        apply(self, event)

    monkeypatch.setattr(Projector, "apply", spy)
    # when it is indexed
    index_path(job_dir)
    # then every write came as an event, and the end is an Event row the pages hear of
    assert [type(e) for e in applied] == [ev.JobFolderRead, ev.AttemptFoldersRead, ev.Indexed]
    assert sorted(r["rollout"] for r in applied[1].rows) == ["a__00000001", "b__00000002"]
    assert Job.objects.get().passed == 1
    assert list(Event.objects.values_list("kind", "payload")) == [
        ("indexed", ev.Indexed(job_dir.name, str(job_dir.resolve()), 2).to_payload())
    ]
