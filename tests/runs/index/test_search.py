"""Search: the words of model calls, tool calls, agent output, instructions and errors found in the
database's full-text index (FTS5 on SQLite, GIN over word numbers on PostgreSQL), filled by `bench index`
and by the live index as attempts end; each hit at its step (the call's line in the trajectory)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from runs import events as ev
from runs.index import search
from runs.index.folder import index_path
from runs.index.projector import Projector
from runs.models import Attempt, SearchDoc, Trial
from runs.results import search_text
from tests.conftest import trial_result
from tests.jobfolders import result_doc, write_attempt, write_job

pytestmark = pytest.mark.django_db


def call_line(messages: list[dict[str, Any]], reply: str, tool: str | None = None) -> str:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply}]
    if tool:
        content.append({"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": tool}})
    return json.dumps(
        {
            "protocol": "messages",
            "model": "m",
            "request": {"system": "You are a coding agent.", "messages": messages},
            "response": {"role": "assistant", "content": content},
        }
    )


def write_trajectory(folder: Path, lines: list[str]) -> None:
    (folder / "trajectory").mkdir(exist_ok=True)
    (folder / "trajectory" / "llm_trajectory.jsonl").write_text("\n".join(lines) + "\n")


def a_conversation() -> list[str]:
    first = [{"role": "user", "content": "Make the parser accept semicolons."}]
    second = [
        *first,
        {"role": "assistant", "content": "Looking."},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": "ZeroDivisionError in tokenizer.py",
                }
            ],
        },
    ]
    return [
        call_line(first, "Looking.", tool="pytest -x tests/test_tokens.py"),
        call_line(second, "The tokenizer divides by the width; fixing."),
    ]


def a_job(tmp_path: Path) -> Path:
    job = write_job(tmp_path, plan=["parser", "other"])
    folder = write_attempt(job, "parser__00000001", result_doc("parser", "parser__00000001", 1.0))
    write_trajectory(folder, a_conversation())
    (folder / "agent" / "opencode.txt").write_text("... all done: wrote Quuxification notes\n")
    other = write_attempt(
        job,
        "other__00000002",
        result_doc("other", "other__00000002", None, error="sandbox ran out of memory (OOMKilled)"),
    )
    write_trajectory(other, [call_line([{"role": "user", "content": "Sort the list."}], "Done.")])
    return job


def found(q: str) -> list[tuple[str, int]]:
    """(trial, step) of each trial a query finds: its call's line, -1 for the attempt's words."""
    hits, _total = search.search(q, None, 50)
    names = dict(Trial.objects.values_list("id", "name"))
    shown = search.locate(q, hits)
    return sorted((names[h.trial_id], shown[(h.attempt_id, h.piece)].step) for h in hits)


def test_bench_index_fills_the_search_and_each_hit_is_at_its_step(tmp_path):
    index_path(a_job(tmp_path))
    # a tool's output (sent in the second call), a tool call's arguments, the model's reply
    assert found("zerodivisionerror") == [("parser", 1)]
    assert found("test_tokens") == [("parser", 0)]
    assert found("TOKENIZER divides") == [("parser", 1)]
    # the instruction (the first call's user message) and the agent's output, the error
    assert found("semicolons") == [("parser", 0)]
    assert found("quuxification") == [("parser", -1)]
    assert found("OOMKilled") == [("other", -1)]
    # every word of the query in one piece (the attempt's own, or a block of calls), or nothing
    assert found("quuxification zerodivisionerror") == []
    assert found("!!!") == []
    # words brought by two calls of one block: found at the call that brought the last of them
    # (each call sends the conversation so far)
    assert found("semicolons zerodivisionerror") == [("parser", 1)]
    assert found("zerodivisionerror divides") == [("parser", 1)]


def test_a_second_index_adds_nothing_and_a_removed_attempt_is_not_found(tmp_path):
    job = a_job(tmp_path)
    index_path(job)
    assert Attempt.objects.filter(searched=True).count() == 2
    before = found("semicolons")
    index_path(job)
    assert found("semicolons") == before == [("parser", 0)]
    if connection.vendor == "postgresql":
        assert SearchDoc.objects.count() == 4  # two attempts: their own words, a block of calls
    import shutil

    shutil.rmtree(job / "other__00000002")
    index_path(job)
    assert found("oomkilled") == []
    assert found("semicolons") == [("parser", 0)]


def test_a_hit_shows_its_words_from_the_folder(tmp_path):
    index_path(a_job(tmp_path))
    hits, total = search.search("zerodivisionerror", None, 10)
    assert total == 1
    shown = search.locate("zerodivisionerror", hits)[(hits[0].attempt_id, 1)]
    assert (shown.step, shown.label) == (1, "tool")
    assert "ZeroDivisionError in tokenizer.py" in shown.text
    own = search.search("oomkilled", None, 10)[0]
    assert search.locate("oomkilled", own)[(own[0].attempt_id, 0)].label == "error"


def test_a_call_in_a_later_block_is_found_at_its_line(tmp_path):
    job = write_job(tmp_path, plan=["long"])
    folder = write_attempt(job, "long__00000001", result_doc("long", "long__00000001", 1.0))
    lines = []
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Go."}]
    for i in range(25):
        lines.append(call_line(messages, f"step {i}" + (" needle" if i == 23 else "")))
        messages = [*messages, {"role": "assistant", "content": f"step {i}"}]
    write_trajectory(folder, lines)
    index_path(job)
    assert found("needle") == [("long", 23)]


def test_a_query_within_one_job_finds_its_trials_only(tmp_path):
    first = a_job(tmp_path / "a")
    second = a_job(tmp_path / "b")
    index_path(first)
    index_path(second)
    assert len(found("semicolons")) == 2
    job_id = Attempt.objects.filter(trial__job__path=str(first.resolve())).values_list(
        "trial__job_id", flat=True
    )[0]
    sql, params = search.trial_ids_sql("semicolons", job_id) or ("", [])
    from django.db.models.expressions import RawSQL

    trials = Trial.objects.filter(id__in=RawSQL(sql, params))
    assert [t.job_id for t in trials] == [job_id]
    hits, total = search.search("semicolons", [job_id], 10)
    assert total == 1 and hits[0].job_id == job_id


def test_an_attempt_is_searchable_when_it_finishes_in_a_live_job(tmp_path):
    job = write_job(tmp_path, plan=["parser"])
    projector = Projector(job)
    projector.apply(
        ev.JobStarted(job.name, str(job), {"plan": ["parser"], "agent": "x"}, 1, 0, 1, 1, 0)
    )
    folder = write_attempt(job, "parser__00000001", None)
    write_trajectory(folder, a_conversation())
    assert found("semicolons") == []
    result = trial_result("parser", rollout_name="parser__00000001", rewards={"reward": 1.0})
    projector.apply(ev.AttemptFinished("parser", "parser__00000001", result))
    assert found("semicolons") == [("parser", 0)]


def test_words_split_alike_for_both_engines():
    assert search_text.words("tests/test_x.py: Foo-Bar") == [
        "tests",
        "test",
        "x",
        "py",
        "foo",
        "bar",
    ]
    assert search.terms("a a b") == ["a", "b"]


def test_a_cancelled_attempt_is_searchable_and_a_running_one_waits(tmp_path):
    job = write_job(tmp_path, plan=["parser"])
    projector = Projector(job)
    projector.apply(
        ev.JobStarted(job.name, str(job), {"plan": ["parser"], "agent": "x"}, 1, 0, 1, 1, 0)
    )
    projector.apply(ev.AttemptStarted("parser", "parser", 0, 1, "parser__00000001"))
    folder = write_attempt(job, "parser__00000001", None)
    write_trajectory(folder, a_conversation())
    assert found("semicolons") == []  # running: its words come when it ends
    projector.apply(ev.AttemptCancelled("parser", "parser__00000001", "budget reached: cost"))
    assert found("semicolons") == [("parser", 0)]


def test_an_attempt_without_model_calls_is_found_by_its_tasks_instruction(tmp_path):
    task = tmp_path / "tasks" / "solo"
    task.mkdir(parents=True)
    (task / "instruction.md").write_text("Compute the Frobnitz checksum of data.bin.")
    job = write_job(tmp_path / "jobs", plan=["solo"])
    folder = write_attempt(job, "solo__00000001", result_doc("solo", "solo__00000001", 0.0))
    (folder / "config.json").write_text(json.dumps({"task_name": "solo", "task_path": str(task)}))
    index_path(job)
    assert found("frobnitz") == [("solo", -1)]
    hits, _ = search.search("frobnitz", None, 10)
    shown = search.locate("frobnitz", hits)[(hits[0].attempt_id, 0)]
    assert shown.label == "instruction" and "Frobnitz checksum" in shown.text


def test_a_pieces_word_numbers_are_packed_as_the_database_reads_them():
    """PostgreSQL keeps a piece's word numbers as differences in 3-bit groups, a nibble each; its
    SQL function gives back the same numbers, however large (a large vocabulary)."""
    numbers = [1, 2, 9, 73, 300, 16_384, 2**21, 2**31 - 1]
    body = search.packed([300, *reversed(numbers)])
    # 1 and +1, then +7 (7), then +64 (0 and 8 set, 0 and 8 set, 1)
    assert body[:3] == bytes([1 | 1 << 4, 7 | 8 << 4, 8 | 1 << 4])
    assert len(body) < 4 * len(numbers)
    assert len(search.packed([1, 2, 3])) == 2  # three nibbles, the last byte's high half 0
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            for given in (numbers, [1, 2, 3], [5]):
                cursor.execute("SELECT runs_searchdoc_words(%s)", [search.packed(given)])
                assert cursor.fetchone()[0] == given


@pytest.mark.django_db(transaction=True)
def test_the_migration_to_nibbles_keeps_what_each_query_finds(tmp_path):
    """0012_pgsearch re-codes every piece's word numbers on PostgreSQL (and back, migrating
    backwards): the same queries find the same trials, at the same steps, before and after."""
    from django.db.migrations.executor import MigrationExecutor

    index_path(a_job(tmp_path))
    queries = ("zerodivisionerror", "semicolons", "quuxification", "oomkilled", "sort list")
    before = {q: found(q) for q in queries}
    assert before["semicolons"] == [("parser", 0)] and before["sort list"] == [("other", 0)]
    executor = MigrationExecutor(connection)
    executor.migrate([("runs", "0011_heal")])
    if connection.vendor == "postgresql":  # the old form: 7-bit groups, a byte each
        with connection.cursor() as cursor:
            cursor.execute("SELECT body FROM runs_searchdoc WHERE id > 0 ORDER BY id LIMIT 1")
            body = bytes(cursor.fetchone()[0])
            cursor.execute("SELECT runs_searchdoc_words(%s)", [body])
            numbers = cursor.fetchone()[0]
        assert numbers and body != search.packed(numbers)
    assert {q: found(q) for q in queries} == before
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert {q: found(q) for q in queries} == before


@pytest.mark.django_db(transaction=True)
def test_bench_index_of_most_of_the_pieces_builds_the_gin_index_again(tmp_path):
    """On PostgreSQL, `bench index` writing a quarter of the pieces or more builds the GIN index
    again once it commits (a built index's pages are full): a new index in its place, the only
    one, valid, and the same hits."""

    def gin_indexes() -> list[tuple[int, str, bool]]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT c.oid, c.relname, i.indisvalid FROM pg_index i JOIN pg_class c "
                "ON c.oid = i.indexrelid WHERE c.relname LIKE 'runs_searchdoc_body%%'"
            )
            return list(cursor.fetchall())

    before = gin_indexes() if connection.vendor == "postgresql" else []
    index_path(a_job(tmp_path))
    assert found("semicolons") == [("parser", 0)] and found("oomkilled") == [("other", -1)]
    if connection.vendor == "postgresql":
        [(oid, name, valid)] = gin_indexes()
        assert (name, valid) == ("runs_searchdoc_body", True) and oid != before[0][0]


@pytest.mark.django_db(transaction=True)
def test_the_migration_indexes_the_notes_made_before_notes_were_searchable(tmp_path):
    """0012_pgsearch indexes each note not in the index yet (made before notes were searchable),
    so search finds it at once; one already in stays once."""
    from django.db.migrations.executor import MigrationExecutor

    from runs.models import ReviewNote

    index_path(a_job(tmp_path))
    trial = Trial.objects.get(name="parser")
    indexed = ReviewNote.objects.create(trial=trial, text="a wibblewobble in the parser")
    search.index_notes([indexed])
    executor = MigrationExecutor(connection)
    executor.migrate([("runs", "0011_heal")])
    # notes as the index held them before: rows, not in the search
    old = ReviewNote.objects.create(trial=trial, text="Flakiness seen twice", tags=" slowpoke ")
    ReviewNote.objects.create(trial=trial, text="")  # no words: nothing to index
    assert found("flakiness") == [] and found("slowpoke") == []
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    hits, total = search.search("flakiness slowpoke", None, 10)
    assert total == 1 and hits[0].piece == -old.pk
    hits, total = search.search("wibblewobble", None, 10)
    assert total == 1 and [h.piece for h in hits] == [-indexed.pk]
    sql, params = search._match(["wibblewobble"])
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        assert len(cursor.fetchall()) == 1  # its piece once, not written again
