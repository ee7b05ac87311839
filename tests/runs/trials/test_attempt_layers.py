"""A failed agent layer is an install failure of that attempt, retried, before any sandbox exists."""

from __future__ import annotations

from pathlib import Path

from runs.agents.base import Agent
from runs.errors import lookup
from runs.sandboxes.layers import AgentLayer, LayerError
from runs.sandboxes.resources import HostResources, grant
from runs.spec import RunSpec
from runs.tasks.load import load_task
from runs.trials.attempt import AttemptRunner
from runs.trials.prepared import AttemptPlan
from tests.conftest import write_task


class LayeredAgent(Agent):
    name = "layered"

    def image_layer(self) -> AgentLayer:
        return AgentLayer("layered-1.0", Path("/nowhere"), "/opt/layered")


class FailingLayers:
    """The images seam: the task image builds, the agent's layer over it does not."""

    def image_for(self, task, digest, build_log=None) -> str:
        return "benchflow-env:task"

    def with_layer(self, image: str, layer: AgentLayer) -> str:
        raise LayerError("the build ran out of disk")


class Factory:
    def __init__(self) -> None:
        self.images = FailingLayers()
        self.created = 0

    def grant(self, task):
        return grant(task.sandbox.cpus, task.sandbox.memory_mb, HostResources(2.0, 4096))

    def create(self, *args, **kwargs):
        self.created += 1
        raise AssertionError("no sandbox may be created after the layer failed")


async def test_a_layer_that_cannot_be_built_is_an_install_failure(tmp_path) -> None:
    # given
    task = load_task(write_task(tmp_path / "tasks", "t", test_sh="true\n"))
    factory = Factory()
    runner = AttemptRunner(
        RunSpec(tasks_dir=tmp_path / "tasks", agent="layered"),
        LayeredAgent(),
        factory,  # type: ignore[arg-type]
        tmp_path / "job",
        lambda *a, **k: None,
        set(),
    )
    # when
    prepared = await runner.prepare(AttemptPlan(task, "t", 0, 1, "digest"))
    # then
    assert prepared.error_category == "install_failure" and prepared.sandbox is None
    assert (
        prepared.error
        == "install failed: could not add layered-1.0 to the task image: the build ran out of disk"
    )
    assert factory.created == 0
    error_class = lookup("install_failure")
    assert error_class is not None and error_class.retried
