"""Where a job's console lines go: stdout for lines and stderr for warnings, and on a terminal (not
--quiet) a live table of the running trials below them, redrawn twice a second."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import IO, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

Rows = Callable[[], list[tuple[str, str, float, int, str]]]  # (trial, phase, seconds, tools, last)


class Terminal:
    """A console's output: plain lines when piped, rich's console and live table on a TTY."""

    def __init__(
        self, *, quiet: bool = False, stream: IO[str] | None = None, err: IO[str] | None = None
    ):
        self.stream = stream or sys.stdout
        self.err = err or sys.stderr
        self.tty = self.stream.isatty() and not quiet
        self.console = (
            Console(file=self.stream, highlight=False, soft_wrap=True) if self.tty else None
        )
        self._live: Live | None = None
        self._rows: Rows | None = None
        self._counts: Callable[[], str] | None = None

    def line(self, text: str) -> None:
        if self.console is not None:
            self.console.print(Text(text))
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def warn(self, text: str) -> None:
        if self._live is not None and self.console is not None:
            self.console.print(Text(text, style="yellow"))
        else:
            self.err.write(text + "\n")
            self.err.flush()

    def start_live(self, rows: Rows, counts: Callable[[], str]) -> None:
        if not self.tty or self.console is None:
            return
        self._rows, self._counts = rows, counts
        self._live = Live(
            self._render(),
            console=self.console,
            refresh_per_second=2,
            transient=True,
            get_renderable=self._render,
        )
        self._live.start()

    def stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _render(self) -> Any:
        table = Table.grid(padding=(0, 2))
        if self._counts is not None:
            table.add_row(Text(self._counts(), style="bold"))
        for name, phase, elapsed, tools, last in (self._rows() if self._rows else [])[:12]:
            detail = f"{phase}, {elapsed / 60:.1f}min, {tools} tool calls" + (
                f" (last: {last[:50]})" if last else ""
            )
            table.add_row(Text(f"  {name}: {detail}", style="dim"))
        return table
