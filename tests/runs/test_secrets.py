"""Known secret values are replaced wherever a trial's output is written down."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.sandboxes.streams import CappedWriter
from runs.secrets import StreamRedactor, redact_obj, redact_tree, secret_values

# a GitHub token's shape, which no key pattern of the proxy knows
SECRET = "ghp_" + "A1b2C3d4E5" * 4


def test_secret_values_are_the_secret_ones_long_enough_to_search() -> None:
    env = {"GITHUB_TOKEN": SECRET, "MY_KEY": "1", "PLAIN": "visible-value", "ODD": "sk-" + "x" * 20}
    assert secret_values(env, {"OTHER_SECRET": "hunter2hunter2"}) == [
        SECRET,
        "sk-" + "x" * 20,
        "hunter2hunter2",
    ]


@pytest.mark.parametrize("cut", range(0, 60))
def test_a_secret_cut_across_two_chunks_is_still_replaced(cut: int) -> None:
    # given output whose chunks may end anywhere inside the secret
    data = f"token is {SECRET}\nnext line {SECRET[:10]} is not one\n".encode()
    red = StreamRedactor([SECRET])
    # when it passes through in two chunks
    out = red.feed(data[:cut]) + red.feed(data[cut:]) + red.close()
    # then the secret is gone and everything else is kept, in order
    assert out == f"token is [REDACTED]\nnext line {SECRET[:10]} is not one\n".encode()


def test_only_an_end_that_may_start_a_secret_is_held_back() -> None:
    red = StreamRedactor([SECRET])
    # nothing that starts the secret: all out now
    assert red.feed(b"plain text\n") == b"plain text\n"
    assert red.feed(b"abc ghp_A1") == b"abc "  # may be the secret: held until the next chunk
    assert red.feed(b"x\n") == b"ghp_A1x\n"
    assert red.close() == b""


def test_capped_writer_redacts_the_log_as_it_is_written(tmp_path: Path) -> None:
    log = tmp_path / "agent.txt"
    writer = CappedWriter(log, 1 << 20, [SECRET])
    for i in range(0, len(SECRET) + 20, 7):  # the agent printed its environment, 7 bytes at a time
        writer.write(f"GITHUB_TOKEN={SECRET} done".encode()[i : i + 7])
    writer.close()
    assert log.read_bytes() == b"GITHUB_TOKEN=[REDACTED] done"


def test_redact_tree_rewrites_only_the_files_holding_a_secret(tmp_path: Path) -> None:
    (tmp_path / "agent").mkdir()
    held = tmp_path / "agent" / "notes.md"
    held.write_text(f"the key: {SECRET}\n")
    held.chmod(0o640)
    clean = tmp_path / "agent" / "clean.txt"
    clean.write_text("nothing here\n")
    big = tmp_path / "artifacts.bin"
    # a secret across the boundary of the pieces the file is read in
    big.write_bytes(b"x" * ((1 << 20) - 5) + SECRET.encode() + b"y" * 10)
    before = clean.stat().st_mtime_ns
    # when the trial's folder is swept
    changed = redact_tree(tmp_path, [SECRET])
    # then
    assert sorted(changed) == sorted([held, big])
    assert held.read_text() == "the key: [REDACTED]\n" and held.stat().st_mode & 0o777 == 0o640
    assert big.read_bytes() == b"x" * ((1 << 20) - 5) + b"[REDACTED]" + b"y" * 10
    assert clean.stat().st_mtime_ns == before
    assert not list(tmp_path.rglob("*.redacting"))


def test_redact_obj_walks_a_result() -> None:
    result = {"last_tool_call": f"echo {SECRET}", "n": 3, "list": [SECRET, None], "ok": True}
    assert redact_obj(result, [SECRET]) == {
        "last_tool_call": "echo [REDACTED]",
        "n": 3,
        "list": ["[REDACTED]", None],
        "ok": True,
    }


@pytest.mark.parametrize(
    ("text", "left"),
    [
        ("key sk-abcdefghijklmnopqrstu end", "key [REDACTED] end"),
        ("Authorization: Bearer abcdefghijklmnopqrstuvwxyz", "Authorization: [REDACTED]"),
        ("git clone https://me:hunter22@host/x", "git clone https://[REDACTED]@host/x"),
        ("a task-sk-short word", "a task-sk-short word"),  # not a key: left alone
        ("token ghp_abcdefghijklmnopqrstuvwxyz0123", "token [REDACTED]"),
        ("given MY-OWN-VALUE-123 here", "given [REDACTED] here"),
    ],
)
def test_redact_text_replaces_known_values_and_key_shapes(text, left):
    from runs.secrets import redact_text

    assert redact_text(text, ["MY-OWN-VALUE-123"])[0] == left
