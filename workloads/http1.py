"""The replay's HTTP/1.1 client: POST a finished body on a kept-alive connection, hand back the streamed answer.

Why not aiohttp for this one request shape: measured on one core (``bench/client_levels_bench.py``), aiohttp's
request path cost 0.6-1.2 ms of loop CPU per streamed request (request and response objects, header
multidicts, a stream reader and a task switch per read), which capped an open loop near 1,000 requests/s
and spread a burst of 64 long prompts over 14-22 ms. Here a connection is an ``asyncio.Protocol``: the head
is pre-encoded but for its length, head and body leave in one vectored write, and the answer is parsed in
``data_received`` (status line, headers, chunked or sized body), each read handed to the caller once with
the time it arrived. Anything the replay does not send (redirects, cookies, proxies, compression) is out
of scope on purpose; ``http`` and ``https`` endpoints are both supported.

Failures are typed for the record's error kind: ``ConnectFailed`` (no connection could be made),
``ConnectionClosed`` (the peer closed or reset mid-answer), ``ProtocolViolation`` (an answer that is not
HTTP/1.1 as framed), ``TimeoutError`` (the request's total timeout).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Mapping
from typing import cast
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 * 1024  # a response head larger than this is not an OpenAI-compatible server's
MAX_ERROR_BODY_BYTES = 16 * 1024  # of a non-200 answer, kept for the record's error text

OnData = Callable[[bytes], None]


class ConnectFailed(OSError):
    """No connection to the endpoint could be made (refused, unreachable, name not resolved)."""


class ConnectionClosed(ConnectionResetError):
    """The peer closed or reset the connection before the answer was complete."""


class ProtocolViolation(ConnectionError):
    """The answer broke HTTP/1.1 framing (status line, headers, chunk sizes); the connection is dropped."""


# Parser states of one response.
_HEAD, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILERS, _SIZED, _TO_EOF, _DONE = range(8)


class _Connection(asyncio.Protocol):
    """One TCP connection carrying one request at a time; parses its answers as bytes arrive."""

    def __init__(self, pool: Http1Pool) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._pool = pool  # takes it back the moment an answer ends, before the task that sent it resumes
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self._on_data: OnData | None = None
        self._reset_answer()

    def _reset_answer(self) -> None:
        self._state = _HEAD
        self._buf = b""
        self._left = 0  # bytes left of the current chunk or sized body
        self.status = 0
        self.keep_alive = True
        self.got_bytes = False  # any byte of this answer: a request on a stale kept-alive connection got none
        self.error_body = bytearray()

    # --- the caller's side -------------------------------------------------------------------------
    def send(self, head: bytes, body: bytes, on_data: OnData) -> asyncio.Future[tuple[int, bytes]]:
        """Write the request; the future is the answer's status (and a non-200's body) once it is read.

        By then the connection may already carry the next request: its caller must not touch it again."""
        assert self.transport is not None and self._waiter is None
        self._reset_answer()
        self._on_data = on_data
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.writelines((head, body))
        return self._waiter

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    # --- asyncio.Protocol --------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio.Transport subclasses

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._state == _TO_EOF and exc is None:
            self._finish()
        else:
            why = f": {exc}" if exc is not None else ""
            self._fail(ConnectionClosed(f"connection closed before the answer was complete{why}"))

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # bytes nobody asked for: the connection cannot be trusted any more
            self.abort()
            return
        self.got_bytes = True
        try:
            out = self._parse(self._buf + data if self._buf else data)
            if out and self.status == 200 and self._on_data is not None:
                self._on_data(out[0] if len(out) == 1 else b"".join(out))
            elif out:
                self.error_body += b"".join(out)[: MAX_ERROR_BODY_BYTES - len(self.error_body)]
        except Exception as e:  # a framing error, or the caller's own error on these bytes (a bad event)
            self._fail(e)
            self.abort()
            return
        if self._state == _DONE:
            self._finish()

    # --- parsing -----------------------------------------------------------------------------------
    def _parse(self, buf: bytes) -> list[bytes]:
        """Advance through ``buf``; returns the body bytes it held (a cut line waits in ``_buf``)."""
        out: list[bytes] = []
        pos, end_all = 0, len(buf)
        self._buf = b""
        while pos < end_all:
            state = self._state
            if state == _CHUNK_DATA or state == _SIZED:
                take = min(self._left, end_all - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self._left -= take
                if self._left == 0:
                    self._state = _CHUNK_END if state == _CHUNK_DATA else _DONE
            elif state == _CHUNK_SIZE:  # the common case: a whole chunk (size, data, CRLF) in one step
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    if end_all - pos > MAX_HEAD_BYTES:
                        raise ProtocolViolation("a chunk-size line longer than 64 KiB")
                    self._buf = buf[pos:]
                    break
                size = _chunk_size(buf[pos:eol])
                pos = eol + 2
                if size == 0:
                    self._state = _TRAILERS
                elif pos + size + 2 <= end_all:
                    out.append(buf[pos : pos + size])
                    pos += size
                    if buf[pos : pos + 2] != b"\r\n":
                        raise ProtocolViolation(f"chunk not followed by CRLF: {buf[pos : pos + 40]!r}")
                    pos += 2
                else:
                    self._left, self._state = size, _CHUNK_DATA
            elif state == _TRAILERS or state == _CHUNK_END:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    if end_all - pos > MAX_HEAD_BYTES:
                        raise ProtocolViolation("a trailer line longer than 64 KiB")
                    self._buf = buf[pos:]
                    break
                line = buf[pos:eol]
                pos = eol + 2
                if state == _CHUNK_END:
                    if line:
                        raise ProtocolViolation(f"chunk not followed by CRLF: {line[:40]!r}")
                    self._state = _CHUNK_SIZE
                elif not line:
                    self._state = _DONE
            elif state == _HEAD:
                eoh = buf.find(b"\r\n\r\n", pos)
                if eoh < 0:
                    if end_all - pos > MAX_HEAD_BYTES:
                        raise ProtocolViolation("a response head longer than 64 KiB")
                    self._buf = buf[pos:]
                    break
                self._head(buf[pos:eoh])
                pos = eoh + 4
            elif state == _TO_EOF:
                out.append(buf[pos:])
                pos = end_all
            else:  # _DONE with bytes left over: a second answer nobody asked for
                raise ProtocolViolation("bytes after the end of the answer")
        return out

    def _head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise ProtocolViolation(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        status = int(parts[1])
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            return
        self.status = status
        self.keep_alive = parts[0] == b"HTTP/1.1"
        length: int | None = None
        chunked = False
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise ProtocolViolation(f"a header line without a colon: {line[:80]!r}")
            name, value = name.strip().lower(), value.strip().lower()
            if name == b"transfer-encoding":
                chunked = value.endswith(b"chunked")
            elif name == b"content-length":
                if not value.isdigit():
                    raise ProtocolViolation(f"bad Content-Length {value[:40]!r}")
                length = int(value)
            elif name == b"connection":
                self.keep_alive = value != b"close" and (self.keep_alive or value == b"keep-alive")
        if chunked:
            self._state = _CHUNK_SIZE
        elif length is not None:
            self._left = length
            self._state = _SIZED if length else _DONE
        else:
            self._state, self.keep_alive = _TO_EOF, False

    def _finish(self) -> None:
        waiter, self._waiter, self._on_data = self._waiter, None, None
        result = (self.status, bytes(self.error_body))
        self._pool._answered(self, reusable=self.keep_alive and not self.closed)
        if waiter is not None and not waiter.done():
            waiter.set_result(result)

    def _fail(self, exc: BaseException) -> None:
        waiter, self._waiter, self._on_data = self._waiter, None, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)


def _chunk_size(line: bytes) -> int:
    try:
        size = int(line.split(b";", 1)[0], 16)
    except ValueError:
        raise ProtocolViolation(f"bad chunk size {line[:40]!r}") from None
    if size < 0:
        raise ProtocolViolation(f"bad chunk size {line[:40]!r}")
    return size


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The header an OpenAI-compatible server started with an API key checks on its /v1 routes."""
    return {} if not api_key else {"Authorization": f"Bearer {api_key}"}


class Http1Pool:
    """Kept-alive connections to one endpoint, at most ``limit`` of them (None: as many as are asked for).

    ``headers`` go on every request (an ``Authorization`` header, say): encoded once, here.
    """

    def __init__(self, base_url: str, limit: int | None = None, headers: Mapping[str, str] | None = None) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if url.scheme == "https" else None
        self._prefix = url.path.rstrip("/")
        host_header = url.netloc.rpartition("@")[2]
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._head_tail = f"Host: {host_header}\r\nContent-Type: application/json\r\n{extra}Content-Length: ".encode()
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        self._slots = asyncio.Semaphore(limit) if limit else None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(lambda: _Connection(self), self.host, self.port, ssl=self._ssl)
        except OSError as e:
            raise ConnectFailed(e.errno, f"cannot connect to {self.host}:{self.port}: {e}") from e
        self._all.add(conn)
        return conn

    def _answered(self, conn: _Connection, reusable: bool) -> None:
        if reusable:
            self._idle.append(conn)
        else:
            conn.abort()
            self._all.discard(conn)

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
            self._all.discard(conn)
        return None

    async def post(self, path: str, body: bytes, on_data: OnData, timeout_s: float | None = None) -> tuple[int, bytes]:
        """POST ``body``; every read of a 200 answer's body goes to ``on_data`` as it arrives.

        Returns the status and, for any other status, the start of its body. A kept-alive connection the
        server had closed unseen (its idle timeout) fails before any byte of an answer: the request is then
        sent once more on a new connection, which is the only retry.
        """
        if self._slots is not None:
            await self._slots.acquire()
        try:
            async with asyncio.timeout(timeout_s):
                return await self._post(f"{self._prefix}{path}", body, on_data)
        finally:
            if self._slots is not None:
                self._slots.release()

    async def _post(self, path: str, body: bytes, on_data: OnData) -> tuple[int, bytes]:
        head = b"POST %s HTTP/1.1\r\n%s%d\r\n\r\n" % (path.encode(), self._head_tail, len(body))
        conn = self._take_idle()
        reused = conn is not None
        if conn is None:
            conn = await self._connect()
        while True:
            answer = conn.send(head, body, on_data)
            try:
                return await answer  # the connection is back in the pool already
            except ConnectionClosed:
                self._all.discard(conn)
                if not (reused and not conn.got_bytes):
                    raise
                conn, reused = await self._connect(), False
            except BaseException:  # a timeout, a cancel, a framing error: this connection's state is unknown ...
                if not answer.done() or answer.cancelled() or answer.exception() is not None:
                    conn.abort()  # ... unless the answer was complete (the connection already serves another)
                    self._all.discard(conn)
                raise

    async def open(self, n: int) -> int:
        """Open up to ``n`` more connections and keep them idle; returns how many opened (failures are left
        for the requests to report). Done before a replay's first send, so that a burst or the first second
        of a high rate does not also pay for connection set-up, on the client and on the server."""

        async def one() -> bool:
            self._idle.append(await self._connect())  # idle at once: a cancelled open keeps what it opened
            return True

        opened = await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
        return sum(1 for ok in opened if ok is True)

    def close(self) -> None:
        for conn in self._all:
            conn.abort()
        self._all.clear()
        self._idle.clear()
