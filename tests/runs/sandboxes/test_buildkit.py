"""BuildKit builds (runs/sandboxes/buildkit.py): the syntax line, and what only BuildKit can do."""

from __future__ import annotations

import pytest

from runs.sandboxes import buildkit
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


@pytest.mark.parametrize(
    ("code", "said"),
    [(6, "curl could not resolve the host"), (7, "curl could not connect to the host"), (22, None)],
)
def test_a_curl_in_the_build_that_cannot_reach_its_host_says_so(
    code: int, said: str | None
) -> None:
    log = (
        "#7 ERROR: process ...\n"
        f'ERROR: failed to solve: process "/bin/sh -c curl -LsSf https://go.dev/dl/go.tgz -o /tmp/go.tgz" '
        f"did not complete successfully: exit code: {code}\n"
    )
    error = buildkit._error_of(log, 1)
    assert error.startswith('process "/bin/sh -c curl')
    assert (said in error) if said else ("cannot reach" not in error)
