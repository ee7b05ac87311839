"""Typed events: each kind is named once, survives its payload, and a failing subscriber harms no other."""

from __future__ import annotations

import ast
import dataclasses
import json
import typing
from pathlib import Path

import pytest

from runs import events as ev
from tests.conftest import trial_result

RESULT = trial_result(
    rewards={"reward": 1.0},
    trial_budget={
        "budget": {"tokens": 10, "turns": None},
        "source": {"tokens": "run"},
        "used": {"tokens": 3},
    },
)


def sample(cls: type[ev.Event]) -> ev.Event:
    """An instance with a value of its type in every field."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        kind = str(hints[f.name])
        if "TrialResult" in kind:
            values[f.name] = RESULT
        elif "tuple" in kind:
            values[f.name] = ()
        elif "dict" in kind:
            values[f.name] = {"k": 1}
        elif "bool" in kind:
            values[f.name] = True
        elif "float" in kind:
            values[f.name] = 1.5
        elif "int" in kind:
            values[f.name] = 2
        else:
            values[f.name] = f"{f.name}-value"
    return cls(**values)


@pytest.mark.parametrize("kind", sorted(ev.KINDS))
def test_every_event_comes_back_the_same_from_its_json_payload(kind):
    event = sample(ev.KINDS[kind])

    payload = json.loads(json.dumps(event.to_payload()))

    assert ev.from_payload(kind, payload) == event


def test_kinds_are_the_class_names_in_snake_case_and_unique():
    assert ev.AttemptFinished.kind == "attempt_finished"
    assert ev.UtilizationReported.kind == "utilization_reported"
    assert len(set(ev.KINDS)) == len(ev.KINDS) and all(ev.KINDS[k].kind == k for k in ev.KINDS)


def test_an_attempt_finished_payload_holds_the_result_json_document():
    payload = ev.AttemptFinished("t", RESULT.rollout_name, RESULT).to_payload()

    assert payload["result"] == RESULT.to_json()
    assert payload["result"]["trial_budget"]["budget"] == {"tokens": 10, "turns": None}


def test_a_subscriber_that_fails_does_not_stop_the_others_or_the_job(caplog):
    seen: list[ev.Event] = []

    def broken(_event: ev.Event) -> None:
        raise RuntimeError("a page went away")

    bus = ev.Bus(broken, seen.append)
    bus.emit(ev.SignalReceived("SIGINT"))

    assert seen == [ev.SignalReceived("SIGINT")]
    assert "a page went away" in caplog.text


REPO = Path(__file__).resolve().parents[2]
# string constants that equal an event kind but are not one: regrade-summary.json's count of
# trials regraded (BenchFlow's field name)
NOT_KINDS = {("runs/regrade/report.py", "regraded")}


def test_no_event_kind_is_spelled_outside_runs_events():
    # given every string constant in the project's Python (migrations record the past as it was)
    found = []
    for package in ("runs", "proxy", "viewer", "benchflow_site", "benchmarks"):
        for path in sorted((REPO / package).rglob("*.py")):
            where = str(path.relative_to(REPO))
            if "migrations" in path.parts or where == "runs/events.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value in ev.KINDS:
                    if (where, node.value) not in NOT_KINDS:
                        found.append(f"{where}:{node.lineno} {node.value!r}")
    # then none is a kind written out: code names kinds by their class (ev.AttemptFinished.kind)
    assert found == []


def test_the_pages_script_gets_the_kinds_from_the_server():
    script = (REPO / "static" / "viewer" / "live.js").read_text()

    spelled = [kind for kind in ev.KINDS if f'"{kind}"' in script or f"'{kind}'" in script]

    assert spelled == []
    assert 'getElementById("bench-kinds")' in script
