"""Console output: BenchFlow's lines, and on a terminal a live display that keeps them readable."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import IO, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text


class Reporter:
    """Prints lines; on a TTY (and not --quiet) shows running trials live below them."""

    def __init__(
        self, *, quiet: bool = False, stream: IO[str] | None = None, err: IO[str] | None = None
    ):
        self.stream = stream or sys.stdout
        self.err = err or sys.stderr
        self.quiet = quiet
        self.tty = self.stream.isatty() and not quiet
        self.console = (
            Console(file=self.stream, highlight=False, soft_wrap=True) if self.tty else None
        )
        self._live: Live | None = None
        self._rows: Callable[[], list[tuple[str, str, float, int, str]]] | None = None
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

    def start_live(
        self, rows: Callable[[], list[tuple[str, str, float, int, str]]], counts: Callable[[], str]
    ) -> None:
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
