"""Offline base images: FROM parsing and explanations (pure), and the real stand-ins (docker)."""

from __future__ import annotations

from collections.abc import Iterator

import docker
import docker.errors
import pytest

from runs.doctor import doctor_checks
from runs.sandboxes import baseimages, dockerfile_refs, engine
from runs.sandboxes.baseimages import BASE_VERSION, STAND_INS, build_base_images
from runs.sandboxes.dockerfile_refs import (
    base_image_refs,
    explain_missing_image,
    missing_base_images,
)


class FakeImages:
    def __init__(self, present: set[str]) -> None:
        self.present = present

    def get(self, name: str) -> object:
        if name not in self.present:
            raise docker.errors.ImageNotFound(f"No such image: {name}")
        return type("Image", (), {"labels": {}})()


class FakeClient:
    def __init__(self, *present: str) -> None:
        self.images = FakeImages(set(present))


FROM_CASES = [
    ("plain", "FROM python:3.11-slim\nRUN true\n", ["python:3.11-slim"]),
    ("lowercase keyword", "from debian:bookworm\n", ["debian:bookworm"]),
    (
        "platform flag and alias",
        "FROM --platform=linux/amd64 ubuntu:24.04 AS build\n",
        ["ubuntu:24.04"],
    ),
    (
        "multi-stage alias is not an image",
        "FROM golang:1.22 AS build\nRUN go build\nFROM build AS test\nFROM debian:bookworm-slim\n"
        "COPY --from=build /x /x\n",
        ["golang:1.22", "debian:bookworm-slim"],
    ),
    ("alias matched case-insensitively", "FROM node:20 AS Base\nFROM base\n", ["node:20"]),
    ("scratch is skipped", "FROM scratch\nCOPY x /\n", []),
    ("ARG with default", "ARG BASE=python:3.11-slim\nFROM ${BASE}\n", ["python:3.11-slim"]),
    ("ARG in tag, $VAR form", "ARG V=3.12\nFROM python:$V-slim\n", ["python:3.12-slim"]),
    ("ARG quoted default", 'ARG IMG="ubuntu:22.04"\nFROM $IMG\n', ["ubuntu:22.04"]),
    ("ARG :- default", "ARG TAG\nFROM debian:${TAG:-bookworm}\n", ["debian:bookworm"]),
    ("ARG without default stays unresolved", "ARG BASE\nFROM ${BASE}\n", ["${BASE}"]),
    (
        "ARG after FROM does not apply to FROM",
        "ARG A=debian:bookworm\nFROM $A\nARG A=ubuntu:24.04\nFROM $A\n",
        ["debian:bookworm"],
    ),
    (
        "line continuation and comments",
        "# syntax=docker/dockerfile:1\n# a comment\nFROM \\\n  python:3.11-slim \\\n  AS app\n",
        ["python:3.11-slim"],
    ),
    ("escape directive", "# escape=`\nFROM `\n  debian:bookworm\n", ["debian:bookworm"]),
    ("duplicates reported once", "FROM alpine:3\nFROM alpine:3\n", ["alpine:3"]),
    ("no FROM", "RUN echo hi\n", []),
]


@pytest.mark.parametrize(
    ("text", "expected"), [c[1:] for c in FROM_CASES], ids=[c[0] for c in FROM_CASES]
)
def test_base_image_refs_reads_from_lines(text: str, expected: list[str]) -> None:
    assert base_image_refs(text) == expected


MISSING_CASES = [
    ("present image", "FROM python:3.11-slim\n", ("python:3.11-slim",), []),
    ("absent image", "FROM ubuntu:24.04\n", ("python:3.11-slim",), ["ubuntu:24.04"]),
    (
        "only absent stages reported",
        "FROM debian:bookworm AS a\nFROM ubuntu:24.04 AS b\nFROM a\n",
        ("debian:bookworm",),
        ["ubuntu:24.04"],
    ),
    ("scratch never missing", "FROM scratch\n", (), []),
    ("unresolved ARG is missing", "ARG B\nFROM $B\n", ("debian:bookworm",), ["$B"]),
    (
        "ARG default resolves to present",
        "ARG B=debian:bookworm\nFROM $B\n",
        ("debian:bookworm",),
        [],
    ),
]


@pytest.mark.parametrize(
    ("text", "present", "expected"),
    [c[1:] for c in MISSING_CASES],
    ids=[c[0] for c in MISSING_CASES],
)
def test_missing_base_images_lists_absent_from_images(
    text: str, present: tuple[str, ...], expected: list[str]
) -> None:
    assert missing_base_images(text, FakeClient(*present)) == expected  # type: ignore[arg-type]


def test_explain_missing_image_names_the_image_the_cause_and_the_fix() -> None:
    # when
    text = explain_missing_image("alpine:3.20", ["debian:bookworm", "python:3.11-slim"])
    # then
    assert "alpine:3.20" in text
    assert "no image registry is reachable" in text
    assert "No stand-in is made for alpine:3.20" in text and "Alpine's packages" in text
    assert "debian:bookworm, python:3.11-slim" in text
    assert "FROM" in text and "docker load" in text
    assert "\n" not in text


def test_explain_missing_image_with_no_stand_ins_says_how_to_build_them() -> None:
    assert "bench doctor --fix" in explain_missing_image("python:3.11-slim", [])


def test_apt_mirrors_fall_back_to_deb_debian_org() -> None:
    main, security = baseimages.apt_mirrors()
    assert main.startswith("http") and security.startswith("http")


# --- real engine -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client() -> Iterator[docker.DockerClient]:
    try:
        engine.ensure_engine(log=lambda _line: None)
    except (engine.EngineUnavailable, PermissionError) as exc:
        pytest.skip(f"Docker engine cannot start here: {exc}")
    client = docker.from_env(timeout=300)
    build_base_images(client, log=lambda _line: None)  # seconds when already built
    yield client
    client.close()


def _run(client: docker.DockerClient, image: str, command: list[str]) -> str:
    output = client.containers.run(image, command, remove=True, network_disabled=True)
    return output.decode().strip()


@pytest.mark.docker
@pytest.mark.parametrize("tag", STAND_INS)
def test_each_stand_in_exists_with_the_current_label(client: docker.DockerClient, tag: str) -> None:
    labels = client.images.get(tag).labels
    assert labels["benchflow.base"] == "1"
    assert labels["benchflow.base.version"] == str(BASE_VERSION)


@pytest.mark.docker
def test_python_stand_in_runs_python_and_pip(client: docker.DockerClient) -> None:
    assert _run(client, "python:3.11-slim", ["python", "-c", "print(1)"]) == "1"
    assert "python 3.11" in _run(client, "python:3.11-slim", ["pip", "--version"])
    assert client.images.get("python:3.11-slim").labels["benchflow.base.python"] == "3.11"


@pytest.mark.docker
def test_python_stand_in_keeps_the_standard_library_where_the_official_image_does(
    client: docker.DockerClient,
) -> None:
    # a task's module that loads `inspect` by the official image's path (a multi-turn set does)
    code = (
        "import importlib.util as u; s = u.spec_from_file_location("
        "'inspect_copy', '/usr/local/lib/python3.11/inspect.py'); m = u.module_from_spec(s); "
        "s.loader.exec_module(m); print(m.signature.__name__)"
    )
    for tag in ("python:3.11-slim", "public.ecr.aws/docker/library/python:3.11-slim"):
        assert _run(client, tag, ["python3", "-c", code]) == "signature"


@pytest.mark.docker
def test_python_stand_in_allows_system_pip_installs(client: docker.DockerClient) -> None:
    out = _run(
        client,
        "python:3.11-slim",
        ["sh", "-c", "ls /usr/lib/python3*/EXTERNALLY-MANAGED || echo none"],
    )
    assert out.endswith("none")


@pytest.mark.docker
def test_host_ca_files_are_baked_in(client: docker.DockerClient) -> None:
    ca_files = baseimages.host_ca_files()
    if not ca_files:
        pytest.skip("this host has no extra CA files to bake in")
    name = ca_files[0].name
    out = _run(
        client,
        "debian:bookworm",
        [
            "sh",
            "-c",
            f"test -s /usr/local/share/ca-certificates/{name} "
            "&& test -s $SSL_CERT_FILE && echo $NODE_EXTRA_CA_CERTS",
        ],
    )
    assert out == "/etc/ssl/certs/ca-certificates.crt"


@pytest.mark.docker
def test_second_build_builds_nothing(client: docker.DockerClient) -> None:
    # given the fixture already built everything; when
    lines: list[str] = []
    built = build_base_images(client, log=lines.append)
    # then
    assert built == []
    assert lines[-1] == "base images: all current, nothing built"


@pytest.mark.docker
def test_an_image_with_no_stand_in_is_reported_missing_and_stand_ins_are_not(
    client: docker.DockerClient,
) -> None:
    dockerfile = "FROM alpine:3.20 AS a\nFROM python:3.11-slim\nFROM debian:bookworm-slim\n"
    assert missing_base_images(dockerfile, client) == ["alpine:3.20"]


@pytest.mark.docker
def test_doctor_passes_engine_and_image_checks(client: docker.DockerClient) -> None:
    checks = {c.name: c for c in doctor_checks(client, fix=False, log=lambda _l: None)}
    assert checks["docker engine"].status == "PASS"
    assert checks["base images"].status == "PASS"


def test_a_python_version_no_base_holds_has_no_stand_in_and_the_message_says_why() -> None:
    text = explain_missing_image("python:3.13-slim", ["python:3.11-slim"])
    assert "No stand-in is made for python:3.13-slim" in text
    assert "Python 3.11 (Debian bookworm) and 3.12 (Ubuntu 24.04) only" in text
    assert "carry the version (and system) its tag names" in text
    # a 3.12 tag naming Debian is not the Ubuntu-based stand-in either
    assert "No stand-in is made" in baseimages.no_stand_in_reason("python:3.12-slim-bookworm")
    assert "`bench doctor --fix`" in baseimages.no_stand_in_reason("python:3.12-slim")
    assert "`bench doctor --fix`" in baseimages.no_stand_in_reason("python:3.11-slim")


@pytest.mark.parametrize(
    ("tag", "labels", "lies"),
    [
        ("python:3.12-slim", {"benchflow.base": "1", "benchflow.base.python": "3.11"}, True),
        ("python:3.11-slim", {"benchflow.base": "1", "benchflow.base.python": "3.11"}, False),
        ("python:3.12-slim", {}, False),  # a real image someone loaded: it is what it says
        ("debian:bookworm", {"benchflow.base": "1"}, False),
    ],
)
def test_a_stand_in_that_names_another_python_than_it_holds_is_not_used(
    tag: str, labels: dict[str, str], lies: bool
) -> None:
    assert bool(baseimages.untruthful(tag, labels)) is lies


def test_a_lying_stand_in_counts_as_missing() -> None:
    class Image:
        labels = {"benchflow.base": "1", "benchflow.base.python": "3.11"}

    class Images:
        def get(self, ref: str) -> Image:
            return Image()

    client = type("C", (), {"images": Images()})()
    assert missing_base_images("FROM python:3.12-slim\n", client) == ["python:3.12-slim"]  # type: ignore[arg-type]
    assert missing_base_images("FROM python:3.11-slim\n", client) == []  # type: ignore[arg-type]


def test_copy_from_images_are_needed_too_but_stages_are_not() -> None:
    text = (
        "FROM python:3.11-slim AS build\nFROM debian:bookworm\nCOPY --from=build /a /b\n"
        "COPY --from=0 /a /b\nCOPY --from=ghcr.io/astral-sh/uv:0.5 /uv /bin/\n"
        "RUN --mount=type=bind,from=node:20,source=/x,target=/y true\n"
    )
    assert dockerfile_refs.image_refs(text) == [
        "python:3.11-slim",
        "debian:bookworm",
        "ghcr.io/astral-sh/uv:0.5",
        "node:20",
    ]


def test_each_image_is_named_with_the_instruction_and_line_naming_it() -> None:
    text = (
        "ARG UV=0.8.15\nFROM python:3.12-slim AS app\n\nRUN apt-get update \\\n && true\n"
        "COPY --from=ghcr.io/astral-sh/uv:${UV} /uv /bin/\nCOPY --from=app /a /b\n"
        "ADD --from=busybox:1 /bin/sh /sh\nRUN --mount=type=bind,from=node:20,target=/n true\n"
    )
    assert [r.where + " " + r.image for r in dockerfile_refs.image_refs_at(text)] == [
        "FROM (line 2) python:3.12-slim",
        "COPY --from (line 6) ghcr.io/astral-sh/uv:0.8.15",
        "ADD --from (line 8) busybox:1",
        "RUN --mount from= (line 9) node:20",
    ]
