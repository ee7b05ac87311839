"""A user's mistake, said once: what is wrong, where, and the fix; never a traceback.

Every command, view and form raises or shows these; the CLI prints the message and exits 2 (or
the code given, e.g. 1 when the Docker engine is down).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One problem with a run's settings, tied to the RunSpec field it is about."""

    field: str  # a RunSpec field ("max_cost_usd"), or "" for the run as a whole
    text: str  # what is wrong and its fix, as the CLI prints it

    def __str__(self) -> str:
        return self.text


class UserError(Exception):
    """A user mistake found before anything was created (or nothing finished was lost)."""

    def __init__(self, message: str, exit_code: int = 2, problems: Sequence[Problem] = ()):
        super().__init__(message)
        self.exit_code = exit_code
        self.problems = list(problems)


def refusal(problems: Sequence[Problem]) -> UserError:
    """All the problems at once, as `bench run` prints them: nothing was created."""
    head = f"{len(problems)} problem{'s' if len(problems) != 1 else ''} found; nothing was created:"
    return UserError("\n".join([head, *(f"  {p}" for p in problems)]), problems=problems)
