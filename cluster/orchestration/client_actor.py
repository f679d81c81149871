"""ClientActor: runs the asyncio replay in a Ray actor and streams finished records to the driver.

Records leave the actor as soon as they finish (a Ray streaming generator), so the driver can
append them to disk at once: if this actor, its node or the engine dies, what finished is kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from workloads.client import ClientSettings, replay
from workloads.health import HealthProbe
from workloads.schedule import PlannedRequest
from workloads.schedule_columns import ScheduleColumns


class ClientActor:
    def __init__(self) -> None:
        self._health: dict[str, Any] | None = None

    async def ready(self) -> bool:
        return True

    async def health(self) -> dict[str, Any] | None:
        """Event-loop lag and CPU of the last replay (a ClientHealth as a dict); None before one ends."""
        return self._health

    async def replay(
        self, requests: dict[str, Any] | list[dict[str, Any]], settings: ClientSettings, start_epoch_s: float
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """Yield batches of finished records (as dicts); a batch is whatever finished since the last.

        ``requests``: the shard as ``ScheduleColumns.to_arrays()`` (what the driver sends: a million requests
        pickle as a few buffers, and no object is made per request until it is sent), or a list of
        ``PlannedRequest`` dicts."""
        if isinstance(requests, dict):
            planned = ScheduleColumns.from_arrays(requests)
        else:
            planned = ScheduleColumns.from_requests([PlannedRequest.model_validate(r) for r in requests])
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        probe = HealthProbe(client=settings.client)

        async def pump() -> None:
            try:
                async for rec in replay(planned, settings, start_epoch_s, health=probe):
                    await queue.put(rec.model_dump())
            finally:
                self._health = probe.result.model_dump() if probe.result is not None else None
                await queue.put(None)

        task = asyncio.create_task(pump())
        try:
            finished = False
            while not finished:
                batch = []
                item = await queue.get()
                while True:
                    if item is None:
                        finished = True
                        break
                    batch.append(item)
                    if queue.empty():
                        break
                    item = queue.get_nowait()
                if batch:
                    yield batch
            await task  # re-raise anything the replay itself raised
        finally:
            task.cancel()
