"""A TCP proxy on loopback that breaks the first connections through it the ways a network or a server does.

It stands between a client and a real engine: the faults are the network's (a reset, a stall, a stream cut
mid-event, bytes dribbling in) or a front end's (503s), which a real engine cannot produce on demand. The
first ``count`` connections get ``fault`` on their answer, the rest pass untouched, so a test sees both that
each fault is recorded under its kind and that the run goes on. It runs its own event loop on a thread.

Faults (``after_bytes``: how much of the answer passes first):
- ``reset``: then an RST (SO_LINGER 0) to the client;
- ``stall``: then nothing more, the connection held open, until the client gives up;
- ``truncate``: then a clean close (FIN) in the middle of an SSE event;
- ``slow``: every answer on the connection, one byte per write (``byte_gap_s`` apart, or just a loop turn);
- ``503``: no upstream at all: a 503 with ``Connection: close``.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from typing import Literal

Fault = Literal["reset", "stall", "truncate", "slow", "503"]

BUSY = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 4\r\n\r\nbusy"


class FaultProxy:
    def __init__(
        self,
        upstream: str,
        fault: Fault,
        count: int,
        after_bytes: int = 400,
        byte_gap_s: float = 0.0,
    ) -> None:
        host, _, port = upstream.removeprefix("http://").rpartition(":")
        self.upstream_host, self.upstream_port = host, int(port)
        self.fault, self.count, self.after_bytes, self.byte_gap_s = fault, count, after_bytes, byte_gap_s
        self.connections = 0
        self.faulted = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self.url = ""

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        self._ready.set()
        async with server:
            await self._stop.wait()
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in rest:  # connections still open (kept alive, or stalled): end them before the loop closes
            t.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        fault = self.fault if self.connections <= self.count else None
        try:
            if fault == "503":
                await reader.readuntil(b"\r\n\r\n")  # the head is enough: the answer closes the connection
                self.faulted += 1
                writer.write(BUSY)
                await writer.drain()
                return
            up_reader, up_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
            try:
                upstream = asyncio.create_task(self._pipe(reader, up_writer))
                stalled = await self._answer(up_reader, writer, fault)
                upstream.cancel()
                if stalled:  # hold the connection, forward nothing, until the client gives up and closes it
                    await asyncio.gather(upstream, return_exceptions=True)
                    while await reader.read(65536):
                        pass
            finally:
                up_writer.close()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:  # the proxy is stopping: end quietly (asyncio would log a cancelled handler)
            pass
        finally:
            if not writer.is_closing():
                writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()

    async def _answer(self, up: asyncio.StreamReader, client: asyncio.StreamWriter, fault: Fault | None) -> bool:
        """Upstream to client, with the fault on the first answer of a faulted connection; True: stalled."""
        passed = 0
        while data := await up.read(65536):
            if fault is None:
                client.write(data)
                await client.drain()
                continue
            if fault == "slow":
                if passed == 0:
                    self.faulted += 1
                for i in range(len(data)):
                    client.write(data[i : i + 1])
                    await client.drain()
                    await asyncio.sleep(self.byte_gap_s)
                passed += len(data)
                continue
            take = data[: max(0, self.after_bytes - passed)]
            client.write(take)
            await client.drain()
            passed += len(take)
            if passed < self.after_bytes:
                continue
            self.faulted += 1
            if fault == "reset":
                sock = client.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.transport.abort()
            elif fault == "truncate":
                client.close()
            return fault == "stall"
        return False
