"""One vLLM OpenAI-compatible server process: start, wait for health, stop, and keep its log.

Kept free of Ray so its behaviour (port clashes, early death, log tails) can be exercised on
its own. The server runs in its own process group so that stopping it also stops the engine-core
and worker processes vLLM forks.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ADDRESS_IN_USE_MARKERS = ("address already in use", "errno 98")


class EngineStartError(RuntimeError):
    def __init__(self, message: str, log_tail: str) -> None:
        super().__init__(f"{message}\n--- engine log (tail) ---\n{log_tail}")
        self.message, self.log_tail = message, log_tail

    def __reduce__(self) -> tuple[type[EngineStartError], tuple[str, str]]:
        # Ray pickles it from the EngineActor to the driver; the default would call __init__ with the one
        # formatted string and fail, and the arm's reason would read "UnserializableException" (seen on the H200).
        return (type(self), (self.message, self.log_tail))


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


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
    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path, host: str, port: int) -> None:
        self.argv, self.env, self.log_path, self.host, self.port = argv, env, log_path, host, port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        guarded = [sys.executable, "-m", "cluster.engine.orphan_guard", "--", *self.argv]
        self.proc = subprocess.Popen(
            guarded,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def wait_healthy(self, timeout_s: float, poll_interval_s: float = 0.5) -> float:
        """Seconds until healthy; raises with the log tail if the process exits or times out."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            code = self.poll()
            if code is not None:
                raise EngineStartError(f"vLLM server exited with code {code} before becoming healthy", self.log_tail())
            if self.healthy():
                return time.monotonic() - t0
            time.sleep(poll_interval_s)
        self.stop()
        raise EngineStartError(f"vLLM server not healthy after {timeout_s:.0f} s", self.log_tail())

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

    def stop(self, grace_s: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
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
