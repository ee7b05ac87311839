"""Full-text search over trials: the words of each model call and of each attempt's own text
(runs/results/search_text.py reads them from the attempt folder), in the database's own full-text
index, and the queries the pages ask of it.

One SearchDoc row per piece (a model call: its step; the attempt's own words: step -1). On SQLite
its words are in the FTS5 table `runs_searchdoc_fts` (rowid = the row's id; contentless and
without positions: the index holds which pieces have a word, not the text); on PostgreSQL in the
row's `body` tsvector (stripped of positions), under a GIN index. Both are given the same words
(search_text.words), so a query finds the same trials on either. A query's words must all be in
one piece.

Filled when an attempt finishes or is cancelled (the projector's handlers) and by `bench index`
(runs/index/replay.py), once per attempt: an attempt whose pieces are in the index is not read
again. On SQLite a deleted attempt's words stay in the FTS table until the table is rebuilt; a
query joins them to their row, so they are never found.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import connections, router

from runs.models import Attempt, Job, SearchDoc, job_key
from runs.results import search_text
from runs.results.search_text import Piece

TERMS_MAX = 8  # words of a query used
FTS = "runs_searchdoc_fts"


def _connection() -> Any:
    return connections[router.db_for_write(SearchDoc)]


def terms(q: str) -> list[str]:
    """A query's words, as the index holds them (at most TERMS_MAX, each once)."""
    return list(dict.fromkeys(search_text.words(q)))[:TERMS_MAX]


def _body(piece: Piece) -> str:
    return " ".join(search_text.words(piece.text))


# --- writing ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pieces:
    """One attempt's pieces, ready to be indexed."""

    job_id: int
    trial_id: int
    attempt_id: int
    pieces: Sequence[Piece]


def read_pieces(folder: str | Path, errors: tuple[str, ...] = ()) -> list[Piece]:
    """An attempt folder's pieces: its own words, then each model call."""
    own = search_text.own_words(folder, errors)
    return ([own] if own.parts else []) + list(search_text.calls(folder))


def add(batch: Iterable[Pieces]) -> int:
    """Index the pieces of each attempt; returns how many pieces were indexed."""
    rows = [
        (b.job_id, b.trial_id, b.attempt_id, p.step, "call" if p.step >= 0 else "attempt", body)
        for b in batch
        for p in b.pieces
        if (body := _body(p))
    ]
    if not rows:
        return 0
    connection = _connection()
    table = SearchDoc._meta.db_table
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {table} (job_id, trial_id, attempt_id, step, kind, body) "
                "VALUES (%s, %s, %s, %s, %s, strip(to_tsvector('simple', %s)))",
                rows,
            )
        return len(rows)
    docs = SearchDoc.objects.bulk_create(
        [SearchDoc(job_id=j, trial_id=t, attempt_id=a, step=s, kind=k) for j, t, a, s, k, _ in rows]
    )
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {FTS} (rowid, body) VALUES (%s, %s)",
                [(doc.pk, row[5]) for doc, row in zip(docs, rows, strict=True)],
            )
    return len(rows)


def indexed(attempt_ids: Iterable[int]) -> set[int]:
    """Which of these attempts have their pieces in the index."""
    ids = list(attempt_ids)
    found: set[int] = set()
    for i in range(0, len(ids), 500):
        found.update(
            SearchDoc.objects.filter(attempt_id__in=ids[i : i + 500])
            .values_list("attempt_id", flat=True)
            .distinct()
        )
    return found


def index_attempt(attempt_id: int) -> int:
    """An attempt that ended (finished or cancelled): its pieces, once."""
    if indexed([attempt_id]):
        return 0
    row = (
        Attempt.objects.filter(pk=attempt_id)
        .values_list(
            "trial_id",
            "trial__job_id",
            "trial__job__path",
            "rollout_name",
            "error",
            "verifier_error",
        )
        .first()
    )
    if row is None:
        return 0
    trial, job, path, rollout, error, verifier_error = row
    pieces = read_pieces(Path(path) / rollout, (error, verifier_error))
    return add([Pieces(job, trial, attempt_id, pieces)])


# --- reading ---------------------------------------------------------------------------------------


def _match(words: list[str]) -> tuple[str, list[Any]]:
    """The statement giving (id, trial_id, attempt_id, step, job_id) of each matching piece."""
    table = SearchDoc._meta.db_table
    columns = "d.id, d.trial_id, d.attempt_id, d.step, d.job_id"
    if _connection().vendor == "postgresql":
        return (
            f"SELECT {columns} FROM {table} d WHERE d.body @@ to_tsquery('simple', %s)",
            [" & ".join(words)],
        )
    return (
        f"SELECT {columns} FROM {FTS} f JOIN {table} d ON d.id = f.rowid WHERE {FTS} MATCH %s",
        [" ".join(f'"{w}"' for w in words)],
    )


def trial_ids_sql(q: str, job_id: int) -> tuple[str, list[Any]] | None:
    """A statement giving the ids of the job's trials a query finds (for `id__in=RawSQL`), or
    None when the query has no word."""
    words = terms(q)
    if not words:
        return None
    sql, params = _match(words)
    return f"SELECT m.trial_id FROM ({sql}) m WHERE m.job_id = %s", [*params, job_id]


@dataclass(frozen=True)
class Hit:
    """A trial a query found, at one of its pieces (the latest attempt's earliest that matched)."""

    job_id: int
    trial_id: int
    attempt_id: int
    step: int


def hits_in(q: str, trial_ids: Sequence[int]) -> dict[int, Hit]:
    """For each of these trials a query finds: where."""
    words = terms(q)
    if not words or not trial_ids:
        return {}
    sql, params = _match(words)
    marks = ", ".join(["%s"] * len(trial_ids))
    statement = f"SELECT * FROM ({sql}) m WHERE m.trial_id IN ({marks})"
    with _connection().cursor() as cursor:
        cursor.execute(statement, [*params, *trial_ids])
        found = cursor.fetchall()
    best: dict[int, Hit] = {}
    for _id, trial, attempt, step, job in found:
        hit = Hit(job, trial, attempt, step)
        held = best.get(trial)
        if held is None or (-attempt, step) < (-held.attempt_id, held.step):
            best[trial] = hit
    return best


def search(
    q: str, job_ids: Sequence[int] | None, limit: int, offset: int = 0
) -> tuple[list[Hit], int]:
    """The trials a query finds among these jobs' (None: every job), newest trial first: one page
    of them, each at its first matching piece, and how many there are in all."""
    words = terms(q)
    if not words:
        return [], 0
    sql, params = _match(words)
    where = ""
    if job_ids is not None:
        if not job_ids:
            return [], 0
        where = f" WHERE m.job_id IN ({', '.join(['%s'] * len(job_ids))})"
        params = [*params, *job_ids]
    grouped = f"SELECT m.trial_id, MAX(m.attempt_id), m.job_id FROM ({sql}) m{where} GROUP BY m.trial_id, m.job_id"
    with _connection().cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM ({grouped}) g", params)
        total = int(cursor.fetchone()[0])
        cursor.execute(
            f"{grouped} ORDER BY m.trial_id DESC LIMIT %s OFFSET %s", [*params, limit, offset]
        )
        page = cursor.fetchall()
    where_hits = hits_in(q, [trial for trial, _a, _j in page])
    return [where_hits[trial] for trial, _a, _j in page if trial in where_hits], total


@dataclass(frozen=True)
class Snippet:
    label: str  # the part it is from: instruction, user, assistant, tool, reply, tool call, ...
    text: str


def snippets(q: str, hits: Sequence[Hit]) -> dict[tuple[int, int], Snippet]:
    """Each hit's words around the query's first word, read again from its attempt folder, by
    (attempt id, step)."""
    words = terms(q)
    rows = {
        pk: (path, rollout, error, verifier_error)
        for pk, path, rollout, error, verifier_error in Attempt.objects.filter(
            pk__in={h.attempt_id for h in hits}
        ).values_list("id", "trial__job__path", "rollout_name", "error", "verifier_error")
    }
    out: dict[tuple[int, int], Snippet] = {}
    for hit in hits:
        if hit.attempt_id not in rows:
            continue
        path, rollout, error, verifier_error = rows[hit.attempt_id]
        folder = Path(path) / rollout
        if hit.step >= 0:
            piece = search_text.call(folder, hit.step)
        else:
            piece = search_text.own_words(folder, (error, verifier_error))
        if piece is not None:
            out[(hit.attempt_id, hit.step)] = Snippet(*search_text.snippet(piece, words))
    return out


def job_keys(job_ids: Iterable[int]) -> dict[int, tuple[str, str]]:
    """(name, key) of each job, for the hits' links."""
    rows = Job.objects.filter(pk__in=set(job_ids)).values_list("id", "name")
    return {pk: (name, job_key(name, pk)) for pk, name in rows}
