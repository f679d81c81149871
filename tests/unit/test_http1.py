"""The replay's HTTP/1.1 client against raw loopback servers that frame answers in every way the client must
read (chunked split anywhere, sized, to EOF, interim 100, keep-alive or not) and break them the ways a network
or a server can (reset mid-body, bad chunk size, a stale kept-alive connection, silence past the timeout).
Both event loops the client runs on are covered: asyncio's, and uvloop's (Ray's async actors run on it)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from workloads.client import ClientSettings, connections_to_open
from workloads.http1 import ConnectFailed, ConnectionClosed, Http1Pool, ProtocolViolation
from workloads.schedule import PlannedRequest
from workloads.sse import classify_error

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]
LOOPS = {"asyncio": None, "uvloop": uvloop.new_event_loop}

SSE_BODY = b'data: {"choices":[{"text":"x"}],"usage":{"completion_tokens":1}}\n\ndata: [DONE]\n\n'


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


OK_CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(SSE_BODY[:30], SSE_BODY[30:])


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    return head + await reader.readexactly(length)


class Server:
    """A loopback server; ``handler(reader, writer, connection_number)`` serves each connection."""

    def __init__(self, handler: Handler) -> None:
        self.handler, self.connections, self.requests = handler, 0, []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await self.handler(reader, writer, self.connections)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


def run(coro_fn: Callable[[], Awaitable[object]], loop: str) -> object:
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        return runner.run(coro_fn())  # type: ignore[arg-type]


def answering(answer: bytes, keep_serving: bool = True, byte_at_a_time: bool = False) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            await read_request(reader)
            if byte_at_a_time:
                for i in range(len(answer)):
                    writer.write(answer[i : i + 1])
                    await writer.drain()
            else:
                writer.write(answer)
            await writer.drain()
            if not keep_serving:
                return

    return handler


async def post(pool: Http1Pool, timeout_s: float | None = 5.0) -> tuple[int, bytes, bytes]:
    got: list[bytes] = []
    status, error_body = await pool.post("/v1/completions", b'{"prompt":[1]}', got.append, timeout_s)
    return status, error_body, b"".join(got)


def sequential_posts(srv: Server, n: int, loop: str) -> list[tuple[int, bytes, bytes]]:
    """``n`` requests one after another through one pool to ``srv``."""

    async def main():
        async with srv as url:
            pool = Http1Pool(url)
            try:
                return [await post(pool) for _ in range(n)]
            finally:
                pool.close()

    return run(main, loop)  # type: ignore[return-value]


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("byte_at_a_time", [False, True], ids=["whole", "byte-at-a-time"])
def test_a_chunked_stream_arrives_whole_however_it_is_cut_and_the_connection_is_reused(loop, byte_at_a_time):
    interim = b"HTTP/1.1 100 Continue\r\n\r\n"
    srv = Server(answering(interim + OK_CHUNKED, byte_at_a_time=byte_at_a_time))

    answers = sequential_posts(srv, 3, loop)
    assert answers == [(200, b"", SSE_BODY)] * 3
    assert srv.connections == 1


@pytest.mark.parametrize("loop", LOOPS)
def test_a_sized_error_answer_returns_its_status_and_body_and_connection_close_is_obeyed(loop):
    body = b'{"error":"too many"}'
    answer = b"HTTP/1.1 429 Too Many\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    srv = Server(answering(answer, keep_serving=False))

    assert sequential_posts(srv, 2, loop) == [(429, body, b"")] * 2
    assert srv.connections == 2  # "Connection: close": never reused


@pytest.mark.parametrize("loop", LOOPS)
def test_an_answer_read_to_eof_ends_when_the_server_closes(loop):
    srv = Server(answering(b"HTTP/1.1 200 OK\r\n\r\n" + SSE_BODY, keep_serving=False))

    async def main():
        async with srv as url:
            pool = Http1Pool(url)
            try:
                return await post(pool)
            finally:
                pool.close()

    assert run(main, loop) == (200, b"", SSE_BODY)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_kept_alive_connection_the_server_dropped_is_retried_once_on_a_new_one(loop):
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(OK_CHUNKED)
        await writer.drain()
        if n == 1:  # its idle timeout crosses the client's next request: read, then closed, unanswered
            await read_request(reader)
            return
        await reader.read()

    srv = Server(handler)

    assert sequential_posts(srv, 2, loop) == [(200, b"", SSE_BODY)] * 2
    assert srv.connections == 2


@pytest.mark.parametrize("loop", LOOPS)
def test_a_connection_that_had_sent_part_of_an_answer_is_not_retried(loop):
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(OK_CHUNKED)
        await writer.drain()
        await read_request(reader)
        writer.write(OK_CHUNKED[:40])  # part of the second answer, then gone: the request may have run
        await writer.drain()

    srv = Server(handler)

    async def main():
        async with srv as url:
            pool = Http1Pool(url)
            try:
                await post(pool)
                with pytest.raises(ConnectionClosed):
                    await post(pool)
            finally:
                pool.close()

    run(main, loop)
    assert srv.connections == 1


def _truncating(n: int) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: int) -> None:
        await read_request(reader)
        writer.write(OK_CHUNKED[:n])
        await writer.drain()

    return handler


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("cut", [0, 20, len(OK_CHUNKED) - 3], ids=["before-the-head", "in-the-head", "in-the-body"])
def test_a_connection_closed_before_the_answer_ends_is_a_reset(loop, cut):
    async def main():
        async with Server(_truncating(cut)) as url:
            pool = Http1Pool(url)
            try:
                await post(pool)
            except ConnectionClosed as e:
                return classify_error(e)[0]
            finally:
                pool.close()

    assert run(main, loop) == "reset"


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA",
    ],
    ids=["bad-chunk-size", "no-crlf-after-chunk", "not-http", "bytes-after-the-end"],
)
def test_an_answer_that_breaks_http_framing_is_a_protocol_violation_and_its_connection_is_dropped(loop, answer):
    srv = Server(answering(answer))

    async def main():
        async with srv as url:
            pool = Http1Pool(url)
            try:
                with pytest.raises(ProtocolViolation) as e:
                    await post(pool)
                assert classify_error(e.value)[0] == "reset"
                assert not pool._idle
            finally:
                pool.close()

    run(main, loop)


@pytest.mark.parametrize("loop", LOOPS)
def test_silence_past_the_timeout_is_a_timeout_and_the_connection_is_not_reused(loop):
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        if n == 1:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")  # then nothing
            await reader.read()  # until the client gives up and closes
            return
        writer.write(OK_CHUNKED)
        await writer.drain()
        await reader.read()

    srv = Server(handler)

    async def main():
        async with srv as url:
            pool = Http1Pool(url)
            try:
                with pytest.raises(TimeoutError) as e:
                    await post(pool, timeout_s=0.2)
                assert classify_error(e.value)[0] == "timeout"
                return await post(pool)
            finally:
                pool.close()

    assert run(main, loop) == (200, b"", SSE_BODY)
    assert srv.connections == 2


@pytest.mark.parametrize("loop", LOOPS)
def test_no_listener_is_a_connect_failure(loop):
    async def main():
        srv = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        srv.close()
        await srv.wait_closed()
        pool = Http1Pool(f"http://127.0.0.1:{port}")
        with pytest.raises(ConnectFailed) as e:
            await post(pool)
        return classify_error(e.value)[0]

    assert run(main, loop) == "connect"


@pytest.mark.parametrize("loop", LOOPS)
def test_connections_opened_ahead_are_the_ones_requests_use(loop):
    srv = Server(answering(OK_CHUNKED))

    async def main():
        async with srv as url:
            pool = Http1Pool(url)
            try:
                assert await pool.open(4) == 4
                answers = await asyncio.gather(*(post(pool) for _ in range(4)))
                return answers, srv.connections
            finally:
                pool.close()

    answers, connections = run(main, loop)
    assert answers == [(200, b"", SSE_BODY)] * 4
    assert connections == 4


def test_the_request_head_carries_the_host_the_length_and_the_pool_headers():
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        seen.append(await read_request(reader))
        writer.write(OK_CHUNKED)
        await writer.drain()
        await reader.read()

    async def main():
        async with Server(handler) as url:
            pool = Http1Pool(url + "/prefix/", headers={"Authorization": "Bearer k"})
            try:
                return url, await post(pool)
            finally:
                pool.close()

    url, answer = run(main, "asyncio")
    head, _, body = seen[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /prefix/v1/completions HTTP/1.1"
    assert f"Host: {url.removeprefix('http://')}".encode() in lines
    assert b"Authorization: Bearer k" in lines and b"Content-Type: application/json" in lines
    assert b"Content-Length: %d" % len(body) in lines and body == b'{"prompt":[1]}'


def _req(i: int, t: float) -> PlannedRequest:
    return PlannedRequest(index=i, send_offset_s=t, prompt_tokens=1, max_tokens=1)


def test_connections_to_open_covers_the_cap_a_burst_and_the_start_of_a_high_rate():
    s = ClientSettings(base_url="http://127.0.0.1:1", model="m", arm="a", vocab_lo=0, vocab_hi=9)
    burst = [_req(i, 0.5) for i in range(64)]
    rate = [_req(i, i / 2000) for i in range(4000)]
    assert connections_to_open(burst, s) == 64
    assert connections_to_open(rate, s) == 101  # sends due within any 50 ms at 2,000 requests/s
    assert connections_to_open(rate, s.__class__(**{**s.__dict__, "max_in_flight": 16})) == 16
    assert connections_to_open(burst, s.__class__(**{**s.__dict__, "connection_limit": 8})) == 8
    assert connections_to_open([], s) == 0
