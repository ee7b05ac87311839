"""The model proxy on the sandbox's own loopback: a listener made inside its network namespace.

The runner (root, beside the Docker engine) opens a socket on 127.0.0.1 *inside* the container's
network namespace, and the proxy serves the connections it accepts directly. The agent calls
http://127.0.0.1:PORT; the proxy listens on the host's loopback only; and a `no-network` sandbox
keeps nothing but `lo`, yet still reaches its model. LoopbackRelay does the same for any other
service on the host's loopback (a Claude login's gateway), by copying bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import socket
import threading

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


class NetnsError(OSError):
    """The sandbox's network namespace could not be entered (not root, or not a local engine)."""


def listen_in_netns(pid: int, port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:port in the network namespace of process `pid`."""
    box: dict[str, object] = {}

    def worker() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        except OSError as exc:
            os.close(own)
            box["error"] = exc
            return
        try:
            if _libc.setns(target, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise NetnsError(
                    err, f"setns into the sandbox's network namespace: {os.strerror(err)}"
                )
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(256)
            sock.setblocking(False)
            box["sock"] = sock
        except OSError as exc:
            box["error"] = exc
        finally:
            # this thread ends here, but return it to our namespace all the same
            _libc.setns(own, CLONE_NEWNET)
            os.close(target)
            os.close(own)

    thread = threading.Thread(target=worker, name="bench-netns")
    thread.start()
    thread.join()
    if "error" in box:
        err = box["error"]
        raise NetnsError(getattr(err, "errno", 0) or 0, f"cannot listen inside the sandbox: {err}")
    return box["sock"]  # type: ignore[return-value]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


class LoopbackRelay:
    """Relays connections from the sandbox's 127.0.0.1:port to the same port on the host's loopback."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()

    async def start(self, pid: int, port: int) -> None:
        sock = await asyncio.get_running_loop().run_in_executor(None, listen_in_netns, pid, port)
        self._server = await asyncio.start_server(self._handle, sock=sock)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._conns.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except asyncio.CancelledError:
            for w in (writer, up_writer):
                w.close()
        finally:
            if task is not None:
                self._conns.discard(task)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        conns = list(self._conns)
        for task in conns:
            task.cancel()
        await asyncio.gather(*conns, return_exceptions=True)
