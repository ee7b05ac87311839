"""A sandbox's removal outlasts a busy engine: a refused forced removal is tried again, one
already in progress is waited out, and one that keeps failing stays to be removed later."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import requests
from docker.errors import APIError, NotFound

from runs.sandboxes import docker as sandboxes
from runs.sandboxes.docker import Sandbox


class Engine:
    """The docker API's two calls a removal makes, scripted: each item raises or returns."""

    def __init__(self, removals: list, inspections: list | None = None) -> None:
        self.removals, self.inspections = removals, inspections or []
        self.calls: list[str] = []

    def remove_container(self, container_id, force, v):
        self.calls.append("remove")
        outcome = self.removals.pop(0)
        if isinstance(outcome, Exception):
            raise outcome

    def inspect_container(self, container_id):
        self.calls.append("inspect")
        outcome = self.inspections.pop(0) if self.inspections else NotFound("gone")
        if isinstance(outcome, Exception):
            raise outcome
        return {}


def api_error(text: str) -> APIError:
    response = requests.Response()
    response.status_code = 409
    return APIError(text, response=response, explanation=text)


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(sandboxes.time, "sleep", lambda _s: None)


def sandbox(engine: Engine) -> Sandbox:
    return Sandbox(SimpleNamespace(api=engine), "c0ffee", None)  # type: ignore[arg-type]


def test_a_refused_forced_removal_is_tried_again():
    engine = Engine([api_error("tried to kill container, but did not receive an exit event"), None])

    sandbox(engine).remove()

    assert engine.calls == ["remove", "remove"]


def test_a_removal_already_in_progress_is_waited_out_until_the_container_is_gone():
    engine = Engine(
        [api_error("removal of container c0ffee is already in progress")], [{}, NotFound("gone")]
    )

    sandbox(engine).remove()

    assert engine.calls == ["remove", "inspect", "inspect"]


def test_a_removal_that_keeps_failing_raises_and_can_be_tried_again():
    refused = [api_error("did not receive an exit event")] * len(sandboxes.REMOVE_RETRY_S)
    engine = Engine(refused + [None])
    box = sandbox(engine)

    with pytest.raises(APIError):
        box.remove()
    box.remove()

    assert engine.calls.count("remove") == len(sandboxes.REMOVE_RETRY_S) + 1 and box.removed
