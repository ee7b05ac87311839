"""Downloads: a job's trials table as the page shows it (its filter, search and sort; every page
of it) as CSV or JSON, and one trial as JSON: its row, each attempt's result.json and model calls
(trajectory/llm_trajectory.jsonl, one JSON value a call, as the proxy logged it: redacted), and
its notes.

Each is streamed a piece at a time (a 100,000-trial table, a trial of thousands of calls), never
held whole; under ASGI the pieces are made in Django's sync thread, a batch per hop.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from itertools import islice
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse
from django.utils.http import content_disposition_header

from runs.results import attempt_folder, attempt_page, files
from runs.review import human
from viewer import queries

try:
    from orjson import loads as _loads
except ImportError:  # pragma: no cover
    _loads = json.loads  # type: ignore[assignment]

COLUMNS = [
    ("trial", "name"),
    ("task", "task_name"),
    ("state", "state"),
    ("outcome", "outcome"),
    ("reward", "reward"),
    ("cost_usd", "cost_usd"),
    ("total_tokens", "total_tokens"),
    ("turns", "n_turns"),
    ("tool_calls", "n_tool_calls"),
    ("duration_s", "duration_s"),
    ("error_class", "error_category"),
    ("attempts", "n_attempts"),
]
LINE_MAX = 4 << 20  # a longer trajectory line is given as a note, not read
BATCH = 200  # pieces made per hop to the sync thread


def _value(v: Any) -> Any:
    return str(v) if isinstance(v, Decimal) else v  # money stays exact: "0.0021000000"


def _cell(v: Any) -> Any:
    """A CSV cell; text a spreadsheet would take for a formula is quoted as text."""
    if isinstance(v, str) and v[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + v
    return _value(v)


def _rows(job: queries.Job, sort: str, show: str, q: str) -> Iterator[tuple[Any, ...]]:
    rows = queries.trials(job, sort, show, q).values_list(*(field for _, field in COLUMNS))
    return rows.iterator(chunk_size=2000)


def _csv(job: queries.Job, sort: str, show: str, q: str) -> Iterator[bytes]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([name for name, _ in COLUMNS])
    for n, row in enumerate(_rows(job, sort, show, q)):
        writer.writerow([_cell(v) for v in row])
        if n % 500 == 499:
            yield buffer.getvalue().encode()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue().encode()


def _json(job: queries.Job, sort: str, show: str, q: str) -> Iterator[bytes]:
    head = {"job": job.name, "key": job.key, "filter": {"sort": sort, "show": show, "q": q}}
    yield json.dumps(head)[:-1].encode() + b', "trials": ['
    names = [name for name, _ in COLUMNS]
    for n, row in enumerate(_rows(job, sort, show, q)):
        record = dict(zip(names, (_value(v) for v in row), strict=True))
        yield (b",\n" if n else b"\n") + json.dumps(record).encode()
    yield b"\n]}\n"


def _trial(job: queries.Job, trial: queries.Trial) -> Iterator[bytes]:
    """The trial as one JSON document, an attempt and a model call at a time."""
    notes, verdicts = human.trial_reviews(trial)
    head = {
        "job": job.name,
        "key": job.key,
        "trial": {
            **{name: _value(getattr(trial, field)) for name, field in COLUMNS},
            "best_attempt": None,
        },
        # people's notes and tags, and verdicts, as reviews.json holds them (runs/review/human.py)
        "notes": [human.note_record(n) for n in notes],
        "verdict": verdicts[-1].verdict if verdicts else None,
        "verdicts": [human.verdict_record(v) for v in verdicts],
    }
    attempts = queries.attempts(trial)
    best = next((a.rollout_name for a in attempts if a.pk == trial.best_id), None)
    head["trial"]["best_attempt"] = best
    yield json.dumps(head)[:-1].encode() + b', "attempts": ['
    for n, attempt in enumerate(attempts):
        folder = queries.attempt_folder(job, attempt)
        record = attempt_folder.read_attempt(str(folder)) if folder.is_dir() else None
        result = record.document if record is not None and record.kind == "ok" else None
        meta = {
            "rollout": attempt.rollout_name,
            "number": attempt.number,
            "state": attempt.state,
            "outcome": attempt.outcome,
            "result": result,
        }
        if record is not None and record.kind == "corrupt":
            meta["result_error"] = record.error
        yield (b",\n" if n else b"\n") + json.dumps(meta)[:-1].encode() + b', "transcript": ['
        yield from _calls(folder)
        yield b"]}"
    yield b"\n]}\n"


def _calls(folder: Path) -> Iterator[bytes]:
    fh = files.open_file(folder, attempt_page.TRAJECTORY) if folder.is_dir() else None
    if fh is None:
        return
    with fh:
        n = 0
        while raw := fh.readline(LINE_MAX + 1):
            if len(raw) > LINE_MAX and not raw.endswith(b"\n"):
                while (rest := fh.readline(1 << 20)) and not rest.endswith(b"\n"):
                    pass
                body = json.dumps({"unreadable": f"line {n + 1} is longer than 4 MB"}).encode()
            elif not raw.strip():
                continue
            else:
                try:
                    _loads(raw)
                    body = raw.strip()
                except ValueError:
                    body = json.dumps({"unreadable": f"line {n + 1} is not JSON"}).encode()
            yield (b",\n" if n else b"\n") + body
            n += 1


async def _hops(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    take = sync_to_async(lambda: list(islice(chunks, BATCH)), thread_sensitive=True)
    while batch := await take():
        for chunk in batch:
            yield chunk


def _response(
    request: HttpRequest, chunks: Iterator[bytes], content_type: str, name: str
) -> StreamingHttpResponse:
    body = _hops(chunks) if isinstance(request, ASGIRequest) else chunks
    response = StreamingHttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = content_disposition_header(True, name)
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _table_args(request: HttpRequest) -> tuple[str, str, str]:
    return (
        request.GET.get("sort", "trial"),
        request.GET.get("show", ""),
        request.GET.get("q", "")[:200],
    )


def trials_csv(request: HttpRequest, job: str) -> StreamingHttpResponse:
    row = queries.get_job(job)
    chunks = _csv(row, *_table_args(request))
    return _response(request, chunks, "text/csv; charset=utf-8", f"{row.name}-trials.csv")


def trials_json(request: HttpRequest, job: str) -> StreamingHttpResponse:
    row = queries.get_job(job)
    chunks = _json(row, *_table_args(request))
    return _response(request, chunks, "application/json", f"{row.name}-trials.json")


def trial_json(request: HttpRequest, job: str, trial: str) -> StreamingHttpResponse:
    row = queries.get_job(job)
    trial_row = queries.get_trial(row, trial)
    name = f"{row.name}-{trial_row.name.replace('#', '-')}.json"
    return _response(request, _trial(row, trial_row), "application/json", name)
