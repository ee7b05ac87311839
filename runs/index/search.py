"""Full-text search over trials: the words of each attempt's model calls and of its own text
(runs/results/search_text.py reads them from the attempt folder), in the database's own full-text
index, and the queries the pages ask of it.

An attempt's words are indexed as pieces: piece 0 its own words (its task's instruction, the tail
of its agent's output, its errors), piece n its model calls from (n - 1) * BLOCK on. A piece's id
is n times ATTEMPTS plus the attempt's id. On SQLite the ids are the rows of the FTS5 table
`runs_searchdoc_fts` (contentless and without positions: the index holds which pieces have a
word, never the text); on PostgreSQL they are SearchDoc rows, `body` the numbers of the piece's
distinct words (each word's row in `runs_searchword`, made the first time it is indexed), sorted,
as the differences between them in 3-bit groups (0.7 bytes a word, see `packed`), under a GIN index on the
numbers the SQL function `runs_searchdoc_words(body)` decodes, queried with `@>` (see `packed`)
through `runs_searchdoc_having`, which always asks the index.
Both are given the same words (search_text.words), so a query finds the same trials on
either. A query's words must all be in one piece; which call of the piece holds them is found when
a hit is shown (`locate`), from the folder.

A person's note (runs.models.ReviewNote: its text and tags) is a piece of its own, in the same
index under the id minus the note's id (notes are appended, never edited, so a piece is written
once): a hit there is at piece -<note id>, and is shown with the note's words and its step.

Filled when an attempt finishes or is cancelled (the projector's handlers) and by `bench index`
(runs/index/replay.py), once per attempt (Attempt.searched). A deleted attempt's pieces go with it
on PostgreSQL; on SQLite they stay in the FTS table, and a query, which joins each piece to its
attempt's row, never finds them (ids are never reused).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import DatabaseError, connections, router, transaction

from runs.models import Attempt, Job, ReviewNote, SearchDoc, job_key
from runs.results import search_text
from runs.results.search_text import BLOCK, Piece

TERMS_MAX = 8  # words of a query used
PIECES = 1 << 7  # piece numbers an attempt has room for: its own words, CALLS_MAX / BLOCK blocks
# A piece's id: its number times ATTEMPTS plus its attempt's id, so the same piece of consecutive
# attempts (the first block of calls of a job's attempts) has consecutive ids, which the FTS5
# index stores in a byte each.
ATTEMPTS = 1 << 40
FTS = "runs_searchdoc_fts"
WORDS = "runs_searchword"  # PostgreSQL: (id, word), each word indexed once
REBUILD_SHARE = 4  # PostgreSQL: `settle` builds the GIN index again when a run added 1/4 of it


def packed(numbers: Iterable[int]) -> bytes:
    """Distinct positive numbers as SearchDoc.body holds them: sorted, each the difference from the
    one before in groups of 3 bits (lowest first, a group a nibble, 8 set on all but the last),
    two nibbles a byte, low nibble first, a 0 nibble filling the last byte's high half. A piece's
    differences are mostly under 8 and 64, so this is 0.7 bytes a word against a byte as 7-bit
    groups, and a denser table makes its GIN index smaller too (0012_pgsearch). The migration's
    `runs_searchdoc_words` decodes it."""
    nibbles = []
    before = 0
    for n in sorted(set(numbers)):
        step, before = n - before, n
        while step >= 8:
            nibbles.append(step & 7 | 8)
            step >>= 3
        nibbles.append(step)
    if len(nibbles) % 2:
        nibbles.append(0)  # a difference is never 0: the decoder skips it
    return bytes(low | high << 4 for low, high in zip(nibbles[::2], nibbles[1::2], strict=True))


def _word_numbers(cursor: Any, words: list[str], make: bool) -> dict[str, int]:
    """The numbers of these words on PostgreSQL (missing words are made if `make`; inserted in
    sorted order, so two batches at once never wait on each other in a circle)."""
    if make:
        cursor.execute(
            f"INSERT INTO {WORDS} (word) SELECT unnest(%s::text[]) ON CONFLICT (word) DO NOTHING",
            [sorted(words)],
        )
    cursor.execute(f"SELECT word, id FROM {WORDS} WHERE word = ANY(%s::text[])", [words])
    return dict(cursor.fetchall())


def _connection() -> Any:
    return connections[router.db_for_write(SearchDoc)]


def terms(q: str) -> list[str]:
    """A query's words, as the index holds them (at most TERMS_MAX, each once)."""
    return list(dict.fromkeys(search_text.words(q)))[:TERMS_MAX]


def piece_number(step: int) -> int:
    return 0 if step < 0 else 1 + step // BLOCK


# --- writing ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pieces:
    """One attempt's pieces, ready to be indexed."""

    attempt_id: int
    pieces: Sequence[Piece]


def read_pieces(folder: str | Path, errors: tuple[str, ...] = ()) -> list[Piece]:
    """An attempt folder's pieces: its own words, then its model calls a block at a time (the
    task's instruction is read from the task's folder only for an attempt without model calls:
    the first call has it)."""
    calls = list(search_text.blocks(folder))
    own = search_text.own_words(folder, errors, instruction=not calls)
    return ([own] if own.parts else []) + calls


def _insert(rows: list[tuple[int, int, str]]) -> None:
    """Index pieces given as (id, attempt id, their distinct words sorted and joined by spaces):
    an FTS5 row on SQLite, the words' numbers packed on PostgreSQL (see `packed`)."""
    if not rows:
        return
    connection = _connection()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            number = _word_numbers(
                cursor, list({w for *_, body in rows for w in body.split(" ")}), make=True
            )
            cursor.executemany(
                f"INSERT INTO {SearchDoc._meta.db_table} (id, attempt_id, body) "
                "VALUES (%s, %s, %s) ON CONFLICT (id) DO NOTHING",
                [
                    (pk, attempt, packed(number[w] for w in body.split(" ")))
                    for pk, attempt, body in rows
                ],
            )
        else:
            cursor.executemany(
                f"INSERT INTO {FTS} (rowid, body) VALUES (%s, %s)",
                [(pk, body) for pk, _attempt, body in rows],
            )


def add(batch: Iterable[Pieces]) -> int:
    """Index the pieces of each attempt and mark it searched; returns how many were indexed."""
    batch = list(batch)
    rows = [
        (piece_number(p.step) * ATTEMPTS + b.attempt_id, b.attempt_id, body)
        for b in batch
        for p in b.pieces
        if (body := " ".join(sorted(set(search_text.words(p.text)))))
    ]
    _insert(rows)
    ids = [b.attempt_id for b in batch]
    for i in range(0, len(ids), 500):
        Attempt.objects.filter(pk__in=ids[i : i + 500]).update(searched=True)
    return len(rows)


def note_words(note: ReviewNote) -> str:
    return f"{note.text}\n{note.tags}"


def _note_attempt(note: ReviewNote) -> int | None:
    """The attempt a note is on: the one it names, else its trial's latest."""
    rows = Attempt.objects.filter(trial_id=note.trial_id).order_by("-id")
    named = rows.filter(rollout_name=note.rollout_name).first() if note.rollout_name else None
    row = named or rows.first()
    return row.pk if row is not None else None


def index_notes(notes: Iterable[ReviewNote]) -> int:
    """Each note's words as a piece of its own (id: minus the note's id); called once a note, when
    its row is made (a note is never edited). A note of a trial without an attempt is not indexed
    (nothing to show it on). Returns how many were indexed."""
    rows = [
        (-n.pk, attempt, body)
        for n in notes
        if (body := " ".join(sorted(set(search_text.words(note_words(n))))))
        and (attempt := _note_attempt(n)) is not None
    ]
    _insert(rows)
    return len(rows)


def settle(added: int) -> None:
    """After a whole job folder is indexed (`added` pieces): on SQLite the FTS5 index's segments
    merged into one (about a fifth smaller, and a query reads one list a word). On PostgreSQL,
    when these pieces are a quarter of all or more, the GIN index built again once the
    transaction commits (REINDEX CONCURRENTLY: searches and writes go on meanwhile): filled a row
    at a time its pages end about half full (a full page splits in halves), built at once they are
    full, 12.3 MB against 14.0 at 10,000 trials of 20 calls. A build reads every row; a quarter
    bounds it to four times what the run itself wrote."""
    connection = _connection()
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"INSERT INTO {FTS} ({FTS}) VALUES ('optimize')")
            return
        if connection.vendor != "postgresql":
            return
        cursor.execute(f"SELECT count(*) FROM {SearchDoc._meta.db_table}")
        if added * REBUILD_SHARE < cursor.fetchone()[0]:
            return
    transaction.on_commit(_rebuild, using=connection.alias)


def _rebuild() -> None:
    """The GIN index of 0010_find built again, beside the one it replaces (outside a
    transaction: run at once when there is none). Should it fail (another run's build at the
    same time), the one in use stays, and the half-built one, which every write would keep up
    to date, goes."""
    with _connection().cursor() as cursor:
        try:
            cursor.execute("REINDEX INDEX CONCURRENTLY runs_searchdoc_body")
        except DatabaseError:
            cursor.execute("DROP INDEX IF EXISTS runs_searchdoc_body_ccnew")


def index_attempt(attempt_id: int) -> int:
    """An attempt that ended (finished or cancelled): its pieces, once."""
    row = (
        Attempt.objects.filter(pk=attempt_id, searched=False)
        .values_list("trial__job__path", "rollout_name", "error", "verifier_error")
        .first()
    )
    if row is None:
        return 0
    path, rollout, error, verifier_error = row
    pieces = read_pieces(Path(path) / rollout, (error, verifier_error))
    return add([Pieces(attempt_id, pieces)])


# --- reading ---------------------------------------------------------------------------------------


def _match(words: list[str]) -> tuple[str, list[Any]]:
    """The statement giving (attempt_id, piece, trial_id, job_id) of each matching piece."""
    connection = _connection()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            number = _word_numbers(cursor, words, make=False)
        if len(number) < len(words):  # a word never indexed: no piece has it
            ids = f"SELECT id AS pk FROM {SearchDoc._meta.db_table} WHERE false"
            params: list[Any] = []
        else:  # the migration's (0010_find) function: the GIN index's answer
            ids = "SELECT h.pk FROM runs_searchdoc_having(%s::int4[]) AS h(pk)"
            params = [sorted(number.values())]
    else:
        ids = f"SELECT rowid AS pk FROM {FTS} WHERE {FTS} MATCH %s"
        params = [" ".join(f'"{w}"' for w in words)]
    attempt, trial = Attempt._meta.db_table, Attempt.trial.field.related_model._meta.db_table
    note = ReviewNote._meta.db_table
    on_note = (
        f"COALESCE((SELECT MAX(a.id) FROM {attempt} a WHERE a.trial_id = n.trial_id "
        f"AND a.rollout_name = n.rollout_name), (SELECT MAX(a.id) FROM {attempt} a "
        "WHERE a.trial_id = n.trial_id))"
    )
    return (
        f"SELECT a.id AS attempt_id, m.pk / {ATTEMPTS} AS piece, a.trial_id AS trial_id, "
        f"t.job_id AS job_id FROM ({ids}) m "
        f"JOIN {attempt} a ON a.id = m.pk %% {ATTEMPTS} JOIN {trial} t ON t.id = a.trial_id "
        "WHERE m.pk > 0 "
        f"UNION ALL SELECT {on_note} AS attempt_id, m.pk AS piece, n.trial_id AS trial_id, "
        f"t.job_id AS job_id FROM ({ids}) m "
        f"JOIN {note} n ON n.id = -m.pk JOIN {trial} t ON t.id = n.trial_id WHERE m.pk < 0",
        [*params, *params],
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
    """A trial a query found, at one of its pieces (the latest attempt's first that matched)."""

    job_id: int
    trial_id: int
    attempt_id: int
    piece: int


def hits_in(q: str, trial_ids: Sequence[int]) -> dict[int, Hit]:
    """For each of these trials a query finds: where."""
    words = terms(q)
    if not words or not trial_ids:
        return {}
    sql, params = _match(words)
    marks = ", ".join(["%s"] * len(trial_ids))
    statement = (
        f"SELECT m.attempt_id, m.piece, m.trial_id, m.job_id FROM ({sql}) m "
        f"WHERE m.trial_id IN ({marks})"
    )
    with _connection().cursor() as cursor:
        cursor.execute(statement, [*params, *trial_ids])
        found = cursor.fetchall()
    best: dict[int, Hit] = {}
    for attempt, piece, trial, job in found:
        held = best.get(trial)
        if held is None or (-attempt, piece) < (-held.attempt_id, held.piece):
            best[trial] = Hit(job, trial, attempt, piece)
    return best


def search(
    q: str, job_ids: Sequence[int] | None, limit: int, offset: int = 0
) -> tuple[list[Hit], int]:
    """The trials a query finds among these jobs' (None: every job), newest trial first: one page
    of them, each at its first matching piece, and how many there are in all."""
    words = terms(q)
    if not words:
        return [], 0
    if job_ids is not None and not job_ids:
        return [], 0
    sql, params = _match(words)
    where = ""
    if job_ids is not None:
        where = f" WHERE m.job_id IN ({', '.join(['%s'] * len(job_ids))})"
        params = [*params, *job_ids]
    trials = f"SELECT DISTINCT m.trial_id FROM ({sql}) m{where}"
    with _connection().cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM ({trials}) g", params)
        total = int(cursor.fetchone()[0])
        cursor.execute(
            f"{trials} ORDER BY m.trial_id DESC LIMIT %s OFFSET %s", [*params, limit, offset]
        )
        page = [trial for (trial,) in cursor.fetchall()]
    where_hits = hits_in(q, page)
    return [where_hits[trial] for trial in page if trial in where_hits], total


@dataclass(frozen=True)
class Shown:
    """A hit as a page shows it: its call (the step: the model call's 0-based line in the
    trajectory; -1 for the attempt's own words) and the words around the first it found."""

    step: int
    label: str  # the part they are in: instruction, user, assistant, tool, reply, tool call, ...
    text: str
    at: str = ""  # a note's step on the trial page (`e<n>`), when it is on one


def locate(q: str, hits: Sequence[Hit]) -> dict[tuple[int, int], Shown]:
    """Each hit's call and snippet, read again from its attempt folder, by (attempt, piece): in
    a piece of calls, the first call with every word of the query (else the most of them)."""
    words = terms(q)
    rows = {
        pk: (path, rollout, error, verifier_error)
        for pk, path, rollout, error, verifier_error in Attempt.objects.filter(
            pk__in={h.attempt_id for h in hits}
        ).values_list("id", "trial__job__path", "rollout_name", "error", "verifier_error")
    }
    out: dict[tuple[int, int], Shown] = {}
    for hit in hits:
        if hit.attempt_id not in rows:
            continue
        path, rollout, error, verifier_error = rows[hit.attempt_id]
        folder = Path(path) / rollout
        if hit.piece < 0:
            out[(hit.attempt_id, hit.piece)] = _shown_note(-hit.piece, words)
            continue
        if hit.piece == 0:
            piece: Piece | None = search_text.own_words(
                folder, (error, verifier_error), instruction=not search_text.has_calls(folder)
            )
        else:
            piece = search_text.locate(folder, (hit.piece - 1) * BLOCK, BLOCK, words)
        if piece is not None:
            out[(hit.attempt_id, hit.piece)] = Shown(piece.step, *search_text.snippet(piece, words))
    return out


def _shown_note(note_id: int, words: list[str]) -> Shown:
    note = ReviewNote.objects.filter(pk=note_id).first()
    if note is None:
        return Shown(-1, "note", "")
    piece = Piece(-1, (("note", note.text), ("tags", note.tags.strip())))
    label, text = search_text.snippet(piece, words)
    return Shown(-1, label, text, f"e{note.step}" if note.step else "")


def job_keys(job_ids: Iterable[int]) -> dict[int, tuple[str, str]]:
    """(name, key) of each job, for the hits' links."""
    rows = Job.objects.filter(pk__in=set(job_ids)).values_list("id", "name")
    return {pk: (name, job_key(name, pk)) for pk, name in rows}
