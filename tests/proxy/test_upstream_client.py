"""The proxy's own HTTP/1.1 client, against small raw servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from proxy.upstream import UpstreamClient, UpstreamError

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], object]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], object]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> str:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/x?a=1"

    yield start
    for server in servers:
        server.close()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    return head, await reader.readexactly(length)


async def test_keep_alive_reuses_one_connection(serve) -> None:
    connections = 0

    async def handler(reader, writer) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                head, body = await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            assert head.startswith(b"POST /v1/x?a=1 HTTP/1.1\r\nhost: 127.0.0.1:")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))

    url = await serve(handler)
    client = UpstreamClient()
    for n in range(5):
        resp = await client.post(url, [(b"x-n", str(n).encode())], b"body%d" % n)
        assert (resp.status, await resp.read()) == (200, b"body%d" % n)
    assert connections == 1
    await client.aclose()


async def test_chunked_body_arrives_in_batches_and_headers_keep_their_case(serve) -> None:
    async def handler(reader, writer) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        for part in (b"data: 1\n\n", b"data: 2\n\n"):
            writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            await writer.drain()
            await asyncio.sleep(0.02)
        writer.write(b"0\r\n\r\n")

    client = UpstreamClient()
    resp = await client.post(await serve(handler), [], b"{}")
    assert resp.header(b"content-type") == b"text/event-stream"
    assert (b"Content-Type", b"text/event-stream") in resp.headers
    batches = [b async for b in resp.batches()]
    assert b"".join(d for d, _ in batches) == b"data: 1\n\ndata: 2\n\n"
    assert batches[-1][1] is True and len(batches) >= 2
    await client.aclose()


async def test_a_body_ended_by_closing_the_connection(serve) -> None:
    async def handler(reader, writer) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end")
        await writer.drain()
        writer.close()

    client = UpstreamClient()
    resp = await client.post(await serve(handler), [], b"")
    assert await resp.read() == b"until the end"
    await client.aclose()


async def test_a_stale_pooled_connection_is_retried_once(serve) -> None:
    requests = 0

    async def handler(reader, writer) -> None:
        nonlocal requests
        await read_request(reader)
        requests += 1
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # keep-alive promised, then dropped: the pooled one is dead

    url = await serve(handler)
    client = UpstreamClient()
    assert await (await client.post(url, [], b"1")).read() == b"ok"
    await asyncio.sleep(0.05)
    assert await (await client.post(url, [], b"2")).read() == b"ok"
    assert requests == 2
    await client.aclose()


async def test_a_pooled_connection_that_fails_late_is_not_sent_again(serve) -> None:
    # given an upstream that answers the first call, then works on the second for a while
    # and drops the connection without an answer (it may have run, and billed, the call)
    requests = 0

    async def handler(reader, writer) -> None:
        nonlocal requests
        await read_request(reader)
        requests += 1
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        await read_request(reader)
        requests += 1
        await asyncio.sleep(0.8)
        writer.transport.abort()

    url = await serve(handler)
    client = UpstreamClient()
    assert await (await client.post(url, [], b"1")).read() == b"ok"
    # when the second call goes out on the pooled connection
    with pytest.raises(UpstreamError, match="closed the connection"):
        await client.post(url, [], b"2")
    # then it was sent once: the failure is the caller's to see, not a silent second call
    await asyncio.sleep(0.1)
    assert requests == 2
    await client.aclose()


async def test_nothing_listening_is_an_upstream_error() -> None:
    client = UpstreamClient(connect_timeout=2)
    with pytest.raises(UpstreamError, match="cannot connect"):
        await client.post("http://127.0.0.1:9/v1/x", [], b"")


async def test_a_silent_upstream_times_out(serve, monkeypatch) -> None:
    async def handler(reader, writer) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    client = UpstreamClient(read_timeout=0.2)
    with pytest.raises(UpstreamError, match="sent nothing"):
        await asyncio.wait_for(client.post(await serve(handler), [], b""), 4)
    await client.aclose()


async def test_a_large_body_flows_through_pause_and_resume(serve) -> None:
    big = bytes(range(256)) * 20_000  # 5 MB, above the high-water mark

    async def handler(reader, writer) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(big))
        writer.write(big)
        await writer.drain()

    client = UpstreamClient()
    resp = await client.post(await serve(handler), [], b"x" * 100_000)
    got = b""
    async for data, _ in resp.batches():
        got += data
        await asyncio.sleep(0)
    assert got == big
    await client.aclose()


async def test_a_cancelled_call_drops_its_connection(serve) -> None:
    async def handler(reader, writer) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    client = UpstreamClient()
    task = asyncio.create_task(client.post(await serve(handler), [], b""))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not client._busy and not any(client._idle.values())
    await client.aclose()
