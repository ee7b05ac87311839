"""An attempt folder's size cap (--max-attempt-mb): the agent and the tests write into /logs through
a bind mount on the attempt folder, so nothing but a watch of the folder stops them filling the
host's disk.

The watch looks at the folder's size (each file's allocated or apparent size, the larger: a sparse
file of a terabyte takes no disk, but a copy or a viewer reading it would), stopping as soon as the
sum passes the cap. A look costs a walk of the folder, so looks are spaced at least EVERY_S apart
and at least SPACING times as long as the last look took: a folder of a million files is walked
rarely, one of a hundred every couple of seconds.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

EVERY_S = 2.0
SPACING = 20


def folder_bytes(folder: Path, stop_over: int | None = None) -> int:
    """The folder's size (symlinks not followed), counted until it passes `stop_over`."""
    total = 0
    stack = [os.fspath(folder)]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += max(info.st_blocks * 512, info.st_size)
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(entry.path)
                    if stop_over is not None and total > stop_over:
                        return total
        except OSError:
            continue
    return total


def cap_error(limit_mb: int, size: int) -> str:
    """The error text; the error table's attempt_disk marker matches it."""
    return (
        f"the attempt folder grew past --max-attempt-mb {limit_mb} MB ({size / 2**20:.0f} MB "
        "written into /logs and the attempt's other files): the attempt was stopped"
    )


async def over_cap(folder: Path, limit_bytes: int) -> int:
    """Wait until the folder passes `limit_bytes`; returns its size then. Runs until cancelled."""
    while True:
        started = time.monotonic()
        size = await asyncio.to_thread(folder_bytes, folder, limit_bytes)
        if size > limit_bytes:
            return size
        took = time.monotonic() - started
        await asyncio.sleep(max(EVERY_S, SPACING * took))


async def within_cap(work: Coroutine[Any, Any, None], folder: Path, limit_mb: int) -> int | None:
    """Run `work` while the folder stays within `limit_mb` (0: no cap). None when it ended; the
    folder's size when it passed the cap, `work` then cancelled (its processes in the sandbox are
    the caller's to stop). Cancelled itself, it cancels `work` and waits for it."""
    if not limit_mb:
        await work
        return None
    running = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(over_cap(folder, limit_mb << 20))
    try:
        await asyncio.wait({running, watch}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        running.cancel()
        watch.cancel()
        await asyncio.gather(running, watch, return_exceptions=True)
        raise
    if running.done():
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        running.result()  # its exception, if it raised one
        return None
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    return watch.result()
