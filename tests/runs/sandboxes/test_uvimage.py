"""The uv stand-in (runs/sandboxes/uvimage.py) and the names a stand-in answers to."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from runs.sandboxes import baseimages
from runs.sandboxes.uvimage import UvImageError, _binaries, uv_version_of


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("ghcr.io/astral-sh/uv:0.8.15", "0.8.15"),
        ("ghcr.io/astral-sh/uv:latest", None),
        ("ghcr.io/astral-sh/uv:0.8", None),
        ("ghcr.io/astral-sh/uv:0.8.15-python3.12-bookworm", None),
        ("python:3.12", None),
    ],
)
def test_only_an_exact_uv_version_has_a_stand_in(image: str, version: str | None) -> None:
    assert uv_version_of(image) == version


def _wheel(tmp_path: Path, uv: bytes, record_uv: bytes) -> Path:
    def line(name: str, data: bytes) -> str:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return f"{name},sha256={digest},{len(data)}"

    wheel = tmp_path / "uv-0.8.15-py3-none-manylinux_2_17_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("uv-0.8.15.data/scripts/uv", uv)
        zf.writestr("uv-0.8.15.data/scripts/uvx", b"uvx")
        record = [
            line("uv-0.8.15.data/scripts/uv", record_uv),
            line("uv-0.8.15.data/scripts/uvx", b"uvx"),
        ]
        zf.writestr("uv-0.8.15.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def test_the_binaries_come_out_of_the_wheel_checked_against_its_record(tmp_path: Path) -> None:
    got = _binaries(_wheel(tmp_path, b"uv", b"uv"), "0.8.15")
    assert got == [("uv", b"uv", 0o755), ("uvx", b"uvx", 0o755)]
    with pytest.raises(UvImageError, match="does not match the wheel's RECORD"):
        _binaries(_wheel(tmp_path, b"tampered", b"uv"), "0.8.15")


def test_a_missing_uv_image_says_how_to_build_its_stand_in() -> None:
    said = baseimages.no_stand_in_reason("ghcr.io/astral-sh/uv:0.8.15")
    assert "`bench doctor --fix --uv 0.8.15`" in said
    assert "names no exact uv version" in baseimages.no_stand_in_reason(
        "ghcr.io/astral-sh/uv:latest"
    )


def test_a_stand_in_answers_to_ecr_publics_mirror_of_its_name_too() -> None:
    assert "public.ecr.aws/docker/library/python:3.11-slim" in baseimages.STAND_INS
    assert "public.ecr.aws/docker/library/debian:bookworm" in baseimages.STAND_INS
    assert baseimages.unmirrored("public.ecr.aws/docker/library/gcc:14") == "gcc:14"
    said = baseimages.no_stand_in_reason("public.ecr.aws/docker/library/python:3.13-slim")
    assert said.startswith("No stand-in is made for python:3.13-slim")
    labels = {"benchflow.base": "1", "benchflow.base.python": "3.11"}
    assert baseimages.untruthful("public.ecr.aws/docker/library/python:3.12-slim", labels)


def test_uv_asks_for_fix(capsys) -> None:
    from benchflow_site.cli import main

    assert main(["doctor", "--uv", "0.8.15"]) == 2
    assert "give it with --fix" in capsys.readouterr().err
