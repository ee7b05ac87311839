"""The proxy's HTTP/1.1 server, spoken to with raw sockets: framing, keep-alive, disconnects."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from proxy import http11, http11_conn
from proxy.http11 import HttpServer

Seen = list[dict[str, Any]]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Echoes the request; /stream answers in chunks until the client goes; /hold takes its
    time; /boom raises."""
    body = (await receive())["body"]
    path = scope["path"]
    scope["_seen"].append(
        {
            "method": scope["method"],
            "path": path,
            "body": body,
            "query": scope["query_string"],
            "headers": dict(scope["headers"]),
        }
    )
    if path == "/boom":
        raise RuntimeError("the app failed")
    if path == "/silent":
        return
    if path == "/hold":  # works `body` seconds, client or not, as the proxy finishes a stream
        try:
            await asyncio.sleep(float(body))
        except asyncio.CancelledError:
            scope["_seen"].append({"held": "cancelled"})
            raise
        scope["_seen"].append({"held": "done"})
    if path == "/many":  # 32 MB in 1 MB chunks: a reader that does not read holds it back
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for n in range(32):
            await send({"type": "http.response.body", "body": b"x" * (1 << 20), "more_body": True})
            scope["_seen"].append({"sent": n + 1})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/stream":
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        for n in range(3):
            await send(
                {"type": "http.response.body", "body": b"data: %d\n\n" % n, "more_body": True}
            )
        scope["_seen"].append({"disconnect": await receive()})
        return
    out = b"%s %s %s" % (scope["method"].encode(), path.encode(), body)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(out))],
        }
    )
    await send({"type": "http.response.body", "body": out})


@pytest.fixture
async def served() -> AsyncIterator[tuple[int, Seen, HttpServer]]:
    seen: Seen = []

    async def with_seen(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope["_seen"] = seen
        await app(scope, receive, send)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    server = HttpServer(with_seen)
    await server.start(sock)
    yield sock.getsockname()[1], seen, server
    await server.close()


async def sandbox_listener(server: HttpServer) -> tuple[int, Any]:
    """A second listener, as a sandbox's: its port, and the function that stops it."""
    extra = socket.socket()
    extra.bind(("127.0.0.1", 0))
    extra.listen(8)
    extra.setblocking(False)
    return extra.getsockname()[1], await server.add_listener(extra)


async def exchange(port: int, data: bytes, until: bytes | None = None) -> bytes:
    """Send raw bytes; read until `until` appears or the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    out = b""
    try:
        while until is None or until not in out:
            chunk = await asyncio.wait_for(reader.read(65536), 5)
            if not chunk:
                break
            out += chunk
    finally:
        writer.close()
    return out


async def test_keep_alive_serves_several_requests_on_one_connection(served) -> None:
    port, seen, _ = served
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        replies = [await http.post("/a", content=b"one"), await http.post("/b?x=1", content=b"two")]
    assert [r.text for r in replies] == ["POST /a one", "POST /b two"]
    assert seen[1]["query"] == b"x=1" and seen[1]["headers"][b"content-length"] == b"3"


async def test_pipelined_requests_are_answered_in_order(served) -> None:
    port, _, _ = served
    raw = b"".join(
        b"POST /p%d HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n\r\n%d" % (n, n) for n in range(3)
    )
    out = await exchange(port, raw, until=b"POST /p2 2")
    assert out.count(b"HTTP/1.1 200 OK") == 3
    assert out.index(b"POST /p0 0") < out.index(b"POST /p1 1") < out.index(b"POST /p2 2")


async def test_a_chunked_request_body_arrives_whole(served) -> None:
    port, seen, _ = served
    raw = (
        b"POST /c HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    )
    out = await exchange(port, raw, until=b"hello world")
    assert b"POST /c hello world" in out and seen[0]["body"] == b"hello world"


async def refused(port: int) -> bool:
    """Whether the server closes a new connection without answering its request."""
    try:
        out = await exchange(port, b"GET /r HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    except ConnectionResetError:
        return True
    return out == b""


async def test_a_body_in_many_tiny_chunks_arrives_whole_and_is_not_kept_afterwards(served) -> None:
    # given a chunked body sent as 20000 two-byte chunks on a keep-alive connection
    port, seen, server = served
    pieces = [b"%02d" % (n % 100) for n in range(20000)]
    raw = (
        b"POST /t HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
        + b"".join(b"2\r\n%s\r\n" % p for p in pieces)
        + b"0\r\n\r\n"
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    # when it has been answered
    await asyncio.wait_for(reader.readuntil(b"POST /t "), 5)
    # then the app got it whole, as bytes, and the idle connection holds no body buffer
    assert seen[0]["body"] == b"".join(pieces) and type(seen[0]["body"]) is bytes
    (conn,) = server.connections
    assert not conn.closed and conn.reader.buffered == 0
    writer.close()


async def test_expect_100_continue_is_answered_before_the_body(served) -> None:
    port, _, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /e HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\nexpect: 100-continue\r\n\r\n"
    )
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"body")
    final = await asyncio.wait_for(reader.readuntil(b"POST /e body"), 5)
    writer.close()
    assert final.startswith(b"HTTP/1.1 200 OK")


async def test_a_response_without_a_length_is_chunked_and_a_disconnect_reaches_the_app(
    served,
) -> None:
    port, seen, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /stream HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
    out = await asyncio.wait_for(reader.readuntil(b"data: 2\n\n\r\n"), 5)
    assert b"transfer-encoding: chunked" in out and b"9\r\ndata: 0\n\n\r\n" in out
    writer.close()
    for _ in range(100):
        if len(seen) == 2:
            break
        await asyncio.sleep(0.02)
    assert seen[1] == {"disconnect": {"type": "http.disconnect"}}


async def test_head_gets_headers_only(served) -> None:
    port, _, _ = served
    async with httpx.AsyncClient() as http:
        r = await http.head(f"http://127.0.0.1:{port}/h")
        again = await http.get(f"http://127.0.0.1:{port}/h")  # the connection is still usable
    # "HEAD /h "
    assert r.status_code == 200 and r.content == b"" and r.headers["content-length"] == "8"
    assert again.text == "GET /h "


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n", b"400"),
        (b"POST /boom HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n", b"500"),
        (b"POST /silent HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n", b"500"),
    ],
)
async def test_bad_requests_and_app_failures_get_an_error_and_a_closed_connection(
    served, raw: bytes, status: bytes
) -> None:
    port, _, _ = served
    out = await exchange(port, raw)  # returns once the server closes the connection
    assert out.startswith(b"HTTP/1.1 " + status) and b"connection: close" in out


async def test_a_body_over_the_limit_gets_413(served, monkeypatch) -> None:
    port, seen, _ = served
    monkeypatch.setattr(http11_conn, "MAX_BODY", 10)
    out = await exchange(
        port, b"POST /big HTTP/1.1\r\nhost: x\r\ncontent-length: 20\r\n\r\n" + b"x" * 20
    )
    assert out.startswith(b"HTTP/1.1 413") and seen == []
    # in the error shape both SDKs read, so an agent's SDK shows why
    head, _, body = out.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head
    assert json.loads(body)["error"] == {
        "type": "request_too_large",
        "message": "Request body too large (over 10 bytes)",
    }


async def test_a_request_head_over_the_limit_gets_431(served) -> None:
    port, seen, _ = served
    headers = b"".join(b"x-h%d: %s\r\n" % (n, b"v" * 1000) for n in range(80))
    out = await exchange(port, b"GET /h HTTP/1.1\r\nhost: x\r\n" + headers + b"\r\n")
    assert out.startswith(b"HTTP/1.1 431") and seen == []


async def test_a_slow_reader_pauses_the_app_rather_than_growing_the_buffer(served) -> None:
    port, seen, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /many HTTP/1.1\r\nhost: x\r\n\r\n")
    await asyncio.sleep(0.5)  # the client reads nothing meanwhile
    held_back = len(seen) - 1
    got = 0
    while got < 32 << 20:
        chunk = await asyncio.wait_for(reader.read(1 << 20), 5)
        assert chunk
        got += chunk.count(b"x")
    writer.close()
    assert held_back < 32 and got == 32 << 20 and seen[-1] == {"sent": 32}


async def test_idle_keep_alive_connections_are_closed(served, monkeypatch) -> None:
    port, _, server = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /i HTTP/1.1\r\nhost: x\r\n\r\n")
    await asyncio.wait_for(reader.readuntil(b"GET /i "), 5)
    server._sweep()
    assert len(server.connections) == 1  # not idle for long yet
    monkeypatch.setattr(http11, "IDLE_TIMEOUT", -1.0)  # uvloop's clock may not have moved yet
    server._sweep()
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
    writer.close()


async def test_an_added_listener_is_served_until_its_closer_runs(served) -> None:
    # given a listening socket made elsewhere (as inside a sandbox's network namespace)
    _, seen, server = served
    extra = socket.socket()
    extra.bind(("127.0.0.1", 0))
    extra.listen(8)
    extra.setblocking(False)
    port = extra.getsockname()[1]
    close = await server.add_listener(extra)
    # when a client keeps a connection open on it
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nhi")
    assert b"POST /x hi" in await asyncio.wait_for(reader.readuntil(b"POST /x hi"), 5)
    # then closing the listener closes that connection and accepts no more
    await close()
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
    assert seen[0]["path"] == "/x"


async def test_a_request_head_sent_a_byte_at_a_time_gets_408_at_its_deadline(
    served, monkeypatch
) -> None:
    port, seen, server = served
    monkeypatch.setattr(http11, "HEAD_TIMEOUT", 0.2)
    # given a request the app works on for a while, and another whose head trickles in
    busy_reader, busy_writer = await asyncio.open_connection("127.0.0.1", port)
    busy_writer.write(b"POST /hold HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n\r\n1")
    slow_reader, slow_writer = await asyncio.open_connection("127.0.0.1", port)
    for byte in b"GET /slow":
        slow_writer.write(bytes([byte]))
        await asyncio.sleep(0.05)  # active all along, as far as the idle timeout can tell
    # when the sweeper runs after the head's deadline
    assert seen[0]["path"] == "/hold" and len(seen) == 1  # still at work
    server._sweep()
    # then the trickling client gets 408 and a closed connection; the request at work does not
    assert (await asyncio.wait_for(slow_reader.read(), 5)).startswith(b"HTTP/1.1 408")
    assert b"POST /hold 1" in await asyncio.wait_for(busy_reader.readuntil(b"POST /hold 1"), 5)
    slow_writer.close()
    busy_writer.close()


async def test_a_request_body_sent_a_byte_at_a_time_gets_408_at_its_deadline(
    served, monkeypatch
) -> None:
    port, seen, server = served
    monkeypatch.setattr(http11, "BODY_TIMEOUT", 0.2)
    # given a client whose head came whole and whose body trickles in, active all along
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /slow HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n")
    for _ in range(6):
        writer.write(b"x")
        await asyncio.sleep(0.05)
    server._sweep()  # past the body's deadline
    # then it gets 408 and a closed connection, and the app never saw the request
    out = await asyncio.wait_for(reader.read(), 5)
    assert out.startswith(b"HTTP/1.1 408"), out
    assert json.loads(out.partition(b"\r\n\r\n")[2])["error"]["message"] == (
        "Request Timeout: the body took over 0.2 s"
    )
    assert seen == []
    writer.close()


async def test_each_listener_closes_connections_over_its_own_cap_at_once(
    served, monkeypatch
) -> None:
    port, _, server = served
    monkeypatch.setattr(http11_conn, "MAX_CONNECTIONS", 1)
    monkeypatch.setattr(http11_conn, "MAX_SANDBOX_CONNECTIONS", 1)
    sandbox_port, close = await sandbox_listener(server)
    # given one connection kept open on the sandbox's listener
    reader, writer = await asyncio.open_connection("127.0.0.1", sandbox_port)
    writer.write(b"GET /k HTTP/1.1\r\nhost: x\r\n\r\n")
    await asyncio.wait_for(reader.readuntil(b"GET /k "), 5)
    # then a second there is closed unanswered, while the main listener still serves one
    assert await refused(sandbox_port)
    main_reader, main_writer = await asyncio.open_connection("127.0.0.1", port)
    main_writer.write(b"GET /m HTTP/1.1\r\nhost: x\r\n\r\n")
    await asyncio.wait_for(main_reader.readuntil(b"GET /m "), 5)
    assert await refused(port)
    # and once the held connection goes, its listener serves a new one
    writer.close()
    for _ in range(100):
        if len(server.connections) == 1:
            break
        await asyncio.sleep(0.02)
    assert not await refused(sandbox_port)
    main_writer.close()
    await close()


async def test_a_listeners_closer_waits_for_requests_whose_clients_left_then_cancels_them(
    served,
) -> None:
    # given a sandbox's listener and two requests on it that the app works on after their
    # clients leave (as the proxy reads a model stream to its end): one short, one long
    _, seen, server = served
    extra = socket.socket()
    extra.bind(("127.0.0.1", 0))
    extra.listen(8)
    extra.setblocking(False)
    close = await server.add_listener(extra)
    for hold in (b"0.5", b"60"):
        _, writer = await asyncio.open_connection("127.0.0.1", extra.getsockname()[1])
        writer.write(
            b"POST /hold HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n%s" % (len(hold), hold)
        )
        writer.close()
    for _ in range(100):
        if len(seen) == 2 and all(c.closed for c in server.connections):
            break
        await asyncio.sleep(0.02)
    assert len(seen) == 2
    # when the listener is closed with a timeout
    await close(timeout=1.0)
    # then the short request was let finish and the long one cancelled at the timeout
    assert {"held": "done"} in seen and {"held": "cancelled"} in seen
    assert not server.connections


async def test_a_sandboxs_connections_together_hold_at_most_its_body_limit(
    served, monkeypatch
) -> None:
    # given a sandbox listener whose connections may hold 100 bytes of request bodies in all
    port, seen, server = served
    monkeypatch.setattr(http11_conn, "MAX_SANDBOX_HELD", 100)
    sandbox_port, close = await sandbox_listener(server)
    # when one client sends 60 of an 80-byte body and stops, and a second sends 60 more
    r1, w1 = await asyncio.open_connection("127.0.0.1", sandbox_port)
    w1.write(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 80\r\n\r\n" + b"a" * 60)
    await w1.drain()
    await asyncio.sleep(0.1)
    out = await exchange(
        sandbox_port, b"POST /b HTTP/1.1\r\nhost: x\r\ncontent-length: 80\r\n\r\n" + b"b" * 60
    )
    # then the second is refused with 413 and why, in the SDKs' error shape, and never served
    assert out.startswith(b"HTTP/1.1 413"), out
    assert json.loads(out.partition(b"\r\n\r\n")[2])["error"]["message"] == (
        "Request bodies in progress from this client's sandbox hold over 100 bytes"
    )
    # and the first, within the limit, is served once its body is whole
    w1.write(b"a" * 20)
    assert (await asyncio.wait_for(r1.readuntil(b"a" * 80), 5)).endswith(b"POST /a " + b"a" * 80)
    assert [s["path"] for s in seen] == ["/a"]
    # and what a served request held is given back: the next one fits again
    out = await exchange(
        sandbox_port,
        b"POST /c HTTP/1.1\r\nhost: x\r\ncontent-length: 90\r\n"
        b"connection: close\r\n\r\n" + b"c" * 90,
    )
    assert out.startswith(b"HTTP/1.1 200"), out
    w1.close()
    await close()
