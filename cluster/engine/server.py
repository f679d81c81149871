"""One vLLM OpenAI-compatible server process: start on a free port, wait for health, stop, keep its log.

The only place that starts a vLLM server: the EngineActor, the plugin-cost benchmark and the engine
tests all come through here, so a port clash, an engine that dies while loading or one that leaves
children behind is handled the same way everywhere. Kept free of Ray so that behaviour can be
exercised on its own. The server runs in its own process group, under ``orphan_guard``, so stopping
it also stops the engine-core and worker processes vLLM forks, and a killed parent takes it along.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

from cluster.engine.api_key import auth_headers, with_api_key
from cluster.engine.command import ServerCommand
from common.ports import free_port
from common.readiness import ServerExited, ServerNotReady, answers_ok, wait_ready

log = logging.getLogger(__name__)

ADDRESS_IN_USE_MARKERS = ("address already in use", "errno 98")
PORT_ATTEMPTS = 3
STOP_GRACE_S = 20.0

CommandForPort = Callable[[int], ServerCommand]
"""Builds the server's command for the port it was given; called again, for a new port, on a port clash."""


class EngineStartError(RuntimeError):
    def __init__(self, message: str, log_tail: str) -> None:
        super().__init__(f"{message}\n--- engine log (tail) ---\n{log_tail}")
        self.message, self.log_tail = message, log_tail

    def __reduce__(self) -> tuple[type[EngineStartError], tuple[str, str]]:
        # Ray pickles it from the EngineActor to the driver; the default would call __init__ with the one
        # formatted string and fail, and the arm's reason would read "UnserializableException" (seen on the H200).
        return (type(self), (self.message, self.log_tail))


def tail(path: Path, max_bytes: int = 6000) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


class ServerProcess:
    """A vLLM server on ``host``; each start (attempt) gets a free port, its own command and ``server-N.log``.

    Also a context manager: ``with ServerProcess(...) as server`` starts it and stops it, group and
    all, however the block ends. ``env`` of each command goes on top of ``base_env``.
    """

    def __init__(
        self,
        command_for_port: CommandForPort,
        base_env: Mapping[str, str],
        log_dir: Path,
        host: str,
        port_attempts: int = PORT_ATTEMPTS,
        api_key: str | None = None,
    ) -> None:
        # The key reaches the server in its spawn environment only, and every probe here carries it.
        self.base_env = with_api_key(base_env, api_key)
        self.headers = auth_headers(api_key)
        self.command_for_port, self.log_dir, self.host = command_for_port, log_dir, host
        self.port_attempts = port_attempts
        self.attempt = -1
        self.port = 0
        self.command: ServerCommand | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.spawned_at_epoch_s = 0.0
        """Wall clock at the latest attempt's spawn: vLLM stamps its log lines with the wall clock."""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"server-{max(self.attempt, 0)}.log"

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """The next attempt: a port free now, the command for it, a fresh log; returns without waiting."""
        self.attempt += 1
        self.port = free_port(self.host)
        self.command = self.command_for_port(self.port)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        guarded = [sys.executable, "-m", "cluster.engine.orphan_guard", "--", *self.command.argv]
        log.info("starting vLLM server on %s (attempt %d), log %s", self.url, self.attempt + 1, self.log_path)
        with self.log_path.open("ab") as out:
            self.spawned_at_epoch_s = time.time()
            self.proc = subprocess.Popen(
                guarded,
                env={**self.base_env, **self.command.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def healthy(self, timeout_s: float | None = None) -> bool:
        if timeout_s is None:
            return answers_ok(f"{self.url}/health", headers=self.headers)
        return answers_ok(f"{self.url}/health", timeout_s, headers=self.headers)

    def wait_healthy(self, timeout_s: float, poll_interval_s: float = 0.5) -> float:
        """Seconds from the last start until healthy; raises with the log tail if it exits or times out.

        A port taken by another process between our probe and vLLM's bind is not the engine's fault: the
        server is started again on a new port, up to ``port_attempts`` starts in all.
        """
        while True:
            try:
                return self._wait_this_attempt(timeout_s, poll_interval_s)
            except EngineStartError:
                if not self.address_in_use() or self.attempt + 1 >= self.port_attempts:
                    raise
            log.warning("port %d was taken before vLLM bound it; starting again on another port", self.port)
            self.stop()
            self.start()

    def _wait_this_attempt(self, timeout_s: float, poll_interval_s: float) -> float:
        try:
            return wait_ready(f"{self.url}/health", self.poll, timeout_s, poll_interval_s, self.headers)
        except ServerExited as e:
            raise EngineStartError(
                f"vLLM server exited with code {e.code} before becoming healthy", self.log_tail()
            ) from None
        except ServerNotReady:
            self.stop()
            raise EngineStartError(f"vLLM server not healthy after {timeout_s:.0f} s", self.log_tail()) from None

    def address_in_use(self) -> bool:
        text = self.log_tail().lower()
        return any(m in text for m in ADDRESS_IN_USE_MARKERS)

    def log_tail(self, max_bytes: int = 6000) -> str:
        return tail(self.log_path, max_bytes)

    def kill(self) -> None:
        """SIGKILL the whole process group at once: what a crashed or OOM-killed engine looks like."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def freeze(self) -> None:
        """SIGSTOP the whole process group: alive, holding its port, answering nothing (a hung engine)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGSTOP)

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                os.killpg(self.proc.pid, signal.SIGCONT)  # a stopped (hung) group acts on SIGTERM only once continued
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass
        # vLLM's children share the group; make sure none outlive the server.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return self.proc.returncode
