"""An agent's files as a cached layer over a task image, with the real engine."""

from __future__ import annotations

import io
import secrets
from concurrent.futures import ThreadPoolExecutor

import pytest

from runs.sandboxes.layers import AgentLayer, LayerCache, LayerError, layered_tag

pytestmark = pytest.mark.docker
BASE = "debian:bookworm-slim"


def _base_image(client, marker: str) -> str:
    """A throwaway task image of our own, so that the test may rebuild it."""
    tag = f"benchflow-test-base:{marker}"
    dockerfile = f"FROM {BASE}\nRUN echo {marker} > /marker\n"
    client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    return tag


def _cat(client, image: str, path: str) -> str:
    return client.containers.run(image, ["cat", path], remove=True).decode()


def test_the_layer_puts_the_folder_into_the_image_once(docker_client, tmp_path):
    # given an agent folder on the host and a task image
    name = f"fake-agent-{secrets.token_hex(4)}"
    source = tmp_path / "bin"
    source.mkdir()
    (source / "agent").write_text("#!/bin/sh\necho agent ran\n")
    (source / "agent").chmod(0o755)
    base = _base_image(docker_client, secrets.token_hex(4))
    layer = AgentLayer(name, source, "/opt/benchflow/agents/fake")
    try:
        # when four trials ask for it at once
        cache = LayerCache(docker_client)
        with ThreadPoolExecutor(4) as pool:
            tags = set(pool.map(lambda _: cache.image_with(base, layer), range(4)))
        # then one image, with the file executable and the task image's own files intact
        [tag] = tags
        assert tag == layered_tag(
            docker_client.images.get(base).id,
            layer,
            docker_client.images.get(f"benchflow-agent:{name}").id,
        )
        out = docker_client.containers.run(tag, ["/opt/benchflow/agents/fake/agent"], remove=True)
        assert out == b"agent ran\n"
        assert _cat(docker_client, tag, "/marker").strip() != ""
        # and a new job (a new cache) reuses it without building
        created = docker_client.images.get(tag).attrs["Created"]
        (source / "agent").write_text("changed on the host")  # the version names the files
        assert LayerCache(docker_client).image_with(base, layer) == tag
        assert docker_client.images.get(tag).attrs["Created"] == created
    finally:
        for image in (
            layered_tag(
                docker_client.images.get(base).id,
                layer,
                docker_client.images.get(f"benchflow-agent:{name}").id,
            ),
            f"benchflow-agent:{name}",
            base,
        ):
            docker_client.images.remove(image, force=True)


def test_doctor_fix_removes_layers_over_task_images_since_rebuilt(
    docker_client, tmp_path, monkeypatch
):
    from runs.agents import install as cli_install
    from runs.doctor import agent_images_check

    # given a layer of a pinned CLI version (a made-up one: a real name would replace the real
    # files image) over a task image, which is then rebuilt
    version = f"9.{secrets.randbelow(10**6)}"
    fake = cli_install.CliSpec("fakecli", "fakecli", version, "bin/fakecli", "chat")
    monkeypatch.setattr(cli_install, "SPECS", {**cli_install.SPECS, "fakecli": fake})
    source = tmp_path / "bin"
    source.mkdir()
    (source / "agent").write_text("x")
    layer = AgentLayer(fake.layer_name, source, "/opt/benchflow/agents/fakecli")
    base = _base_image(docker_client, f"orphan-{secrets.token_hex(4)}")
    stale = LayerCache(docker_client).image_with(base, layer)
    docker_client.images.build(
        fileobj=io.BytesIO(f"FROM {BASE}\nRUN echo rebuilt > /marker\n".encode()), tag=base, rm=True
    )
    fresh = LayerCache(docker_client).image_with(base, layer)
    try:
        # when the doctor looks, it counts the stale one
        check = agent_images_check(docker_client, fix=False)
        assert check.status == "WARN" and "over task images since rebuilt" in check.detail
        # when it fixes, the stale layer is gone and the one over the current task image stays
        check = agent_images_check(docker_client, fix=True)
        assert check.status == "PASS" and "no longer used" in check.detail
        with pytest.raises(Exception, match="No such image"):
            docker_client.images.get(stale)
        assert docker_client.images.get(fresh)
    finally:
        for image in (stale, fresh, base, f"benchflow-agent:{fake.layer_name}"):
            try:
                docker_client.images.remove(image, force=True)
            except Exception:  # noqa: BLE001 - removed by the doctor
                pass


def test_a_rebuilt_task_image_gets_a_new_layered_image(docker_client, tmp_path):
    source = tmp_path / "bin"
    source.mkdir()
    (source / "agent").write_text("x")
    name = f"fake-agent-{secrets.token_hex(4)}"
    layer = AgentLayer(name, source, "/opt/fake")
    first = _base_image(docker_client, "one")
    tag_one = LayerCache(docker_client).image_with(first, layer)
    docker_client.images.build(
        fileobj=io.BytesIO(f"FROM {BASE}\nRUN echo two > /marker\n".encode()), tag=first, rm=True
    )
    try:
        tag_two = LayerCache(docker_client).image_with(first, layer)
        assert tag_two != tag_one
        assert _cat(docker_client, tag_two, "/marker") == "two\n"
    finally:
        for image in (tag_one, tag_two, f"benchflow-agent:{name}", first):
            docker_client.images.remove(image, force=True)


def test_a_missing_agent_folder_is_a_layer_error(docker_client, tmp_path):
    layer = AgentLayer(f"gone-{secrets.token_hex(4)}", tmp_path / "nowhere", "/opt/gone")
    with pytest.raises(LayerError, match="is missing"):
        LayerCache(docker_client).image_with(BASE, layer)


def test_doctor_fix_removes_layers_of_agent_versions_no_longer_pinned(docker_client):
    from runs.doctor import agent_images_check

    # given an image of an agent version this code no longer pins, and one of a pinned version
    dockerfile = io.BytesIO(f"FROM {BASE}\n".encode())
    old = f"benchflow-agent:claude-0.0.{secrets.randbelow(10**6)}"
    docker_client.images.build(
        fileobj=dockerfile, tag=old, labels={"benchflow.agent": old.split(":")[1]}
    )
    try:
        # when the doctor looks, it warns and names it
        check = agent_images_check(docker_client, fix=False)
        assert check.status == "WARN" and old.split(":")[1] in check.detail and "--fix" in check.fix
        assert docker_client.images.get(old)
        # when it fixes, the old one is gone
        check = agent_images_check(docker_client, fix=True)
        assert check.status == "PASS" and "no longer used" in check.detail
        with pytest.raises(Exception, match="No such image"):
            docker_client.images.get(old)
    finally:
        try:
            docker_client.images.remove(old, force=True)
        except Exception:  # noqa: BLE001 - already removed by the doctor
            pass
