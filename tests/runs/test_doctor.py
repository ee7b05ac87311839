"""bench doctor's agent-layer check against a fake engine: what it counts, removes and sizes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import docker.errors

from runs.agents.install import SPECS
from runs.doctor import agent_images_check

PINNED = next(s.layer_name for s in SPECS.values())


@dataclass
class Image:
    id: str
    labels: dict[str, str]
    tags: list[str] = field(default_factory=list)

    @property
    def short_id(self) -> str:
        return self.id[:12]


class Engine:
    """The few calls the check makes: list by label, df, remove, inspect a task image."""

    def __init__(self, images: list[Image], own: dict[str, int] | None, tagged: set[str]) -> None:
        self.listed, self.own, self.tagged = images, own, tagged
        self.removed: list[str] = []
        self.images = self
        self.api = self

    def list(self, filters: dict[str, str]) -> list[Image]:
        return [i for i in self.listed if filters["label"] in i.labels]

    def df(self) -> dict[str, Any]:
        if self.own is None:
            raise docker.errors.APIError("df is not supported")
        return {
            "Images": [{"Id": k, "Size": v + 1000, "SharedSize": 1000} for k, v in self.own.items()]
        }

    def remove(self, ref: str, force: bool, noprune: bool) -> None:
        self.removed.append(ref)

    def inspect_image(self, ref: str) -> dict[str, Any]:
        if ref not in self.tagged:
            raise docker.errors.ImageNotFound(ref)
        return {"RepoTags": ["task:latest"]}


def _images() -> list[Image]:
    return [
        Image("sha256:files", {"benchflow.agent": PINNED}, [f"benchflow-agent:{PINNED}"]),
        Image(
            "sha256:layer",
            {"benchflow.agent": PINNED, "benchflow.agent.task_image": "sha256:task"},
            ["benchflow-env:abc"],
        ),
        Image("sha256:old", {"benchflow.agent": "claude-0.0.1"}, ["benchflow-agent:claude-0.0.1"]),
        Image(
            "sha256:orphan",
            {"benchflow.agent": PINNED, "benchflow.agent.task_image": "sha256:gone"},
            ["benchflow-env:def"],
        ),
    ]


SIZES = {
    "sha256:files": 180_000_000,
    "sha256:layer": 185_000_000,
    "sha256:old": 90_000_000,
    "sha256:orphan": 60_000_000,
}


def test_doctor_names_what_agent_layers_hold_on_disk_and_what_is_stale() -> None:
    engine = Engine(_images(), SIZES, {"sha256:task"})

    check = agent_images_check(engine, fix=False)  # type: ignore[arg-type]

    assert check.status == "WARN"
    assert "2 image(s) in use" in check.detail and "holding 365 MB" in check.detail
    assert "1 of CLI versions no longer pinned (claude-0.0.1)" in check.detail
    assert "1 over task images since rebuilt, holding 150 MB" in check.detail
    assert engine.removed == []


def test_doctor_fix_removes_the_stale_ones_and_says_what_it_freed() -> None:
    engine = Engine(_images(), SIZES, {"sha256:task"})

    check = agent_images_check(engine, fix=True)  # type: ignore[arg-type]

    assert check.status == "PASS"
    assert engine.removed == ["benchflow-agent:claude-0.0.1", "benchflow-env:def"]
    assert "removed 2 no longer used, freeing 150 MB" in check.detail


def test_doctor_leaves_sizes_out_when_the_engine_cannot_tell() -> None:
    engine = Engine(_images(), None, {"sha256:task"})

    check = agent_images_check(engine, fix=False)  # type: ignore[arg-type]

    assert check.status == "WARN" and "holding" not in check.detail and "GB" not in check.detail


def test_doctor_counts_a_codex_layer_of_the_old_bin_only_layout_as_no_longer_used() -> None:
    # given the files images of the pinned Codex version: one of the old layout (bin/ alone, named
    # by the version only) and one of the current layout, which ships the whole native package
    codex = SPECS["codex"]
    old, current = f"{codex.name}-{codex.version}", codex.layer_name
    engine = Engine(
        [
            Image("sha256:old", {"benchflow.agent": old}, [f"benchflow-agent:{old}"]),
            Image("sha256:new", {"benchflow.agent": current}, [f"benchflow-agent:{current}"]),
        ],
        SIZES,
        set(),
    )

    check = agent_images_check(engine, fix=True)  # type: ignore[arg-type]

    assert current != old and current in check.detail
    assert engine.removed == [f"benchflow-agent:{old}"]
