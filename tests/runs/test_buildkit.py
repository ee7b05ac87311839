"""BuildKit builds (runs/sandboxes/buildkit.py): the syntax line, and what only BuildKit can do."""

from __future__ import annotations

import pytest

from runs.sandboxes.buildkit import buildkit_only_line, without_syntax_line


@pytest.mark.parametrize(
    ("text", "expected", "dropped"),
    [
        ("# syntax=docker/dockerfile:1\nFROM a\n", "# (syntax", True),
        ("# escape=`\n#syntax = docker/dockerfile:1.4\nFROM a\n", "# escape=`\n# (syntax", True),
        ("FROM a\n# syntax=docker/dockerfile:1\n", "FROM a\n# syntax=", False),  # not a directive
        ("FROM a\n", "FROM a\n", False),
    ],
)
def test_a_syntax_directive_becomes_a_comment_keeping_the_line_count(
    text: str, expected: str, dropped: bool
) -> None:
    out, was = without_syntax_line(text)
    assert out.startswith(expected) and was is dropped
    assert out.count("\n") == text.count("\n")


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("FROM a\nRUN <<EOF\necho\nEOF\n", (2, "a heredoc (<<EOF)")),
        ("FROM a\nCOPY <<-'EOT' /x\nhi\nEOT\n", (2, "a heredoc (<<EOF)")),
        ("FROM a\nRUN true\nRUN --mount=type=cache,target=/c make\n", (3, "RUN --mount")),
        ("FROM a\nRUN cat <<< word\n", None),  # a here-string is plain shell
        ("FROM a\nRUN echo hi\n", None),
    ],
)
def test_the_first_line_only_buildkit_can_build_is_named(text: str, found) -> None:
    assert buildkit_only_line(text) == found
