"""ubuntu:24.04 and ubuntu:22.04 stand-ins (runs/sandboxes/ubuntu.py): built from the Ubuntu
archive with its keyring checked against the pinned sums, holding the release their tags name,
and the doctor saying so when the archive cannot be reached."""

from __future__ import annotations

import hashlib
import io
import socket
import urllib.request
from collections.abc import Iterator

import docker
import pytest

from runs import doctor
from runs.sandboxes import baseimages, engine, ubuntu
from runs.sandboxes.dockerfile_refs import explain_missing_image, missing_base_images


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_keyring_package_that_is_not_the_pinned_one_is_not_trusted(tmp_path, monkeypatch) -> None:
    # given an archive that serves something else under the keyring package's name
    monkeypatch.setattr(ubuntu, "CACHE", tmp_path)
    monkeypatch.setattr(urllib.request, "urlopen", lambda *_a, **_k: io.BytesIO(b"not the keyring"))
    # when the keyring is fetched
    with pytest.raises(ubuntu.UbuntuArchiveError) as raised:
        ubuntu.keyring(lambda _line: None)
    # then it is refused, naming both sums
    got = hashlib.sha256(b"not the keyring").hexdigest()
    assert f"has SHA-256 {got}, not the pinned {ubuntu.KEYRING_DEB_SHA256}" in str(raised.value)
    assert not list(tmp_path.rglob("*.gpg"))


def test_an_unreachable_archive_is_named_with_the_fix(tmp_path, monkeypatch) -> None:
    mirror = f"http://127.0.0.1:{closed_port()}/ubuntu"
    monkeypatch.setattr(ubuntu, "MIRROR", mirror)
    monkeypatch.setattr(ubuntu, "KEYRING_DEB", f"{mirror}/pool/k.deb")
    monkeypatch.setattr(ubuntu, "CACHE", tmp_path)
    why = ubuntu.archive_unreachable(timeout=5)
    assert why is not None and why.startswith(f"the Ubuntu archive ({mirror}) cannot be reached")
    with pytest.raises(ubuntu.UbuntuArchiveError, match="cannot be reached from this machine"):
        ubuntu.keyring(lambda _line: None)


@pytest.mark.parametrize(
    ("tag", "labels", "lies"),
    [
        ("ubuntu:24.04", {"benchflow.base": "1", "benchflow.base.ubuntu": "24.04"}, False),
        ("ubuntu:noble", {"benchflow.base": "1", "benchflow.base.ubuntu": "24.04"}, False),
        ("ubuntu:22.04", {"benchflow.base": "1", "benchflow.base.ubuntu": "24.04"}, True),
        ("ubuntu:24.04", {"benchflow.base": "1"}, True),  # a Debian stand-in under Ubuntu's name
        ("ubuntu:20.04", {"benchflow.base": "1", "benchflow.base.ubuntu": "24.04"}, True),
        ("ubuntu:20.04", {}, False),  # a real image someone loaded: it is what it says
    ],
)
def test_an_ubuntu_stand_in_holds_the_release_its_tag_names(tag, labels, lies) -> None:
    assert bool(baseimages.untruthful(tag, labels)) is lies


def test_a_release_not_built_here_says_which_are() -> None:
    text = explain_missing_image("ubuntu:20.04", ["ubuntu:24.04"])
    assert "only ubuntu:24.04 and ubuntu:22.04 are built here" in text
    assert "`bench doctor --fix`" in explain_missing_image("ubuntu:24.04", [])


def test_terminal_benchs_own_base_is_not_made_and_the_message_says_why() -> None:
    text = explain_missing_image("ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624", [])
    assert "Terminal-Bench's base images are built from its own Dockerfiles" in text


def test_the_sources_are_the_releases_pockets() -> None:
    noble, jammy = ubuntu.RELEASES
    path, text = ubuntu._sources(noble)
    assert path == "etc/apt/sources.list.d/ubuntu.sources"
    assert "Suites: noble noble-updates noble-backports" in text
    assert "Suites: noble-security" in text
    path, text = ubuntu._sources(jammy)
    assert path == "etc/apt/sources.list"
    assert "deb http://security.ubuntu.com/ubuntu jammy-security main" in text


# --- real engine, real archive ---------------------------------------------------------------


@pytest.fixture(scope="module")
def client() -> Iterator[docker.DockerClient]:
    try:
        engine.ensure_engine(log=lambda _line: None)
    except (engine.EngineUnavailable, PermissionError) as exc:
        pytest.skip(f"Docker engine cannot start here: {exc}")
    client = docker.from_env(timeout=600)
    if why := ubuntu.archive_unreachable():
        pytest.fail(f"these tests build from the Ubuntu archive: {why}")
    baseimages.build_ubuntu(client, log=lambda _line: None)  # seconds when already built
    yield client
    client.close()


@pytest.mark.docker
@pytest.mark.parametrize(
    ("tag", "version", "python"),
    [("ubuntu:24.04", "24.04", "3.12"), ("ubuntu:22.04", "22.04", "3.10")],
)
def test_the_stand_in_is_the_release_it_names_and_installs_from_its_archive(
    client: docker.DockerClient, tag: str, version: str, python: str
) -> None:
    script = (
        ". /etc/os-release && echo $VERSION_ID && apt-get update -qq >/dev/null "
        "&& apt-get install -y -qq --no-install-recommends python3 >/dev/null 2>&1 "
        "&& python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'"
    )
    out = client.containers.run(tag, ["sh", "-c", script], remove=True).decode().split()
    assert out == [version, python]
    labels = client.images.get(tag).labels
    assert labels["benchflow.base.ubuntu"] == version
    assert missing_base_images(f"FROM {tag}\n", client) == []


@pytest.mark.docker
def test_the_host_ca_files_are_baked_in(client: docker.DockerClient) -> None:
    ca_files = baseimages.host_ca_files()
    if not ca_files:
        pytest.skip("this host has no extra CA files to bake in")
    name = ca_files[0].name
    out = client.containers.run(
        "ubuntu:24.04",
        [
            "sh",
            "-c",
            f"test -s /usr/local/share/ca-certificates/{name} && grep -c BEGIN $SSL_CERT_FILE",
        ],
        remove=True,
    )
    assert int(out.decode()) > 100


@pytest.mark.docker
def test_a_second_build_builds_nothing_and_the_doctor_passes(client: docker.DockerClient) -> None:
    assert baseimages.build_ubuntu(client, log=lambda _line: None) == []
    checks = {c.name: c for c in doctor.doctor_checks(client, fix=False, log=lambda _l: None)}
    assert checks["ubuntu base images"].status == "PASS"


@pytest.mark.docker
def test_the_doctor_names_an_unreachable_archive(client: docker.DockerClient, monkeypatch) -> None:
    # given the stand-ins look missing and the archive is out of reach
    monkeypatch.setattr(doctor, "ubuntu_image_status", lambda _c: {"ubuntu:24.04": "missing"})
    monkeypatch.setattr(ubuntu, "MIRROR", f"http://127.0.0.1:{closed_port()}/ubuntu")
    check = doctor._ubuntu_check(client, fix=False, log=lambda _l: None)
    assert check.status == "FAIL"
    assert "missing: ubuntu:24.04" in check.detail
    assert "the Ubuntu archive (http://127.0.0.1:" in check.detail
    assert check.fix.startswith("let this machine reach http://archive.ubuntu.com/ubuntu")


@pytest.mark.docker
def test_python_312_is_ubuntu_2404s_with_pip_and_no_extra_user(client: docker.DockerClient) -> None:
    script = (
        "python -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])' && . /etc/os-release "
        "&& echo $VERSION_ID && ls /usr/lib/python3*/EXTERNALLY-MANAGED 2>/dev/null | wc -l "
        "&& (id ubuntu >/dev/null 2>&1 && echo user || echo nouser) && pip --version | cut -c1-3"
    )
    out = client.containers.run("python:3.12-slim", ["sh", "-c", script], remove=True)
    assert out.decode().split() == ["3.12", "24.04", "0", "nouser", "pip"]
    assert client.images.get("python:3.12").id == client.images.get("python:3.12-slim").id
    assert client.images.get("python:3.12-slim").labels["benchflow.base.python"] == "3.12"
