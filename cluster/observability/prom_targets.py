"""Prometheus file-based service discovery for the engines (and endpoints) of one run.

Engines come and go during a run (interleaved arms stop one engine before starting the next), on
ports chosen at start time, so a static scrape config cannot name them. The run driver keeps one
``file_sd`` JSON file per run up to date instead; Prometheus watches the file and starts or stops
scraping within seconds. Every write replaces the whole file atomically (temporary file in the same
directory, then ``os.replace``): Prometheus never reads a half-written file.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlsplit

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class TargetsError(ValueError):
    """A URL or label that Prometheus could not use."""


def _target(url: str) -> tuple[str, dict[str, str]]:
    """``http://host:port/path`` -> ("host:port", labels that tell Prometheus the scheme and path)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None:
        raise TargetsError(f"{url!r}: expected http(s)://host:port[/path]")
    extra: dict[str, str] = {}
    if parts.scheme != "http":
        extra["__scheme__"] = parts.scheme
    if parts.path not in ("", "/"):
        extra["__metrics_path__"] = parts.path
    return parts.netloc, extra


class TargetsFile:
    """The targets of one run, keyed by arm; ``add``/``remove`` rewrite the file at once.

    Every target carries the labels ``run`` and ``arm`` (so every series scraped from it does)
    plus whatever the caller adds (``node``, ...). ``close`` deletes the file: a finished run
    leaves nothing for Prometheus to scrape.
    """

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = Path(path)
        self.run_id = run_id
        self._entries: dict[str, dict[str, object]] = {}
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write()

    def add(self, arm: str, url: str, labels: dict[str, str]) -> None:
        """Scrape ``url`` (an engine's base URL; ``/metrics`` is Prometheus's default path) as ``arm``."""
        self.add_endpoint(arm, url, {**labels, "arm": arm})

    def add_endpoint(self, key: str, url: str, labels: dict[str, str]) -> None:
        """Scrape ``url`` under ``key`` without an ``arm`` label (e.g. the harness's own endpoint)."""
        address, extra = _target(url)
        for name in labels:
            if not LABEL_NAME.match(name) or name.startswith("__"):
                raise TargetsError(f"label {name!r} is not a valid Prometheus target label")
        entry: dict[str, object] = {"targets": [address], "labels": {"run": self.run_id, **labels, **extra}}
        with self._lock:
            self._entries[key] = entry
            self._write()

    def remove(self, arm: str) -> None:
        """Stop scraping ``arm``; a no-op for an arm that is not there (stop paths run more than once)."""
        with self._lock:
            if self._entries.pop(arm, None) is not None:
                self._write()

    def targets(self) -> list[dict[str, object]]:
        with self._lock:
            return [self._entries[k] for k in sorted(self._entries)]

    def close(self) -> None:
        with self._lock:
            self._entries.clear()
            try:
                self.path.unlink(missing_ok=True)
            except NotADirectoryError:  # the folder itself is gone: nothing of ours is left to delete
                pass

    def _write(self) -> None:
        body = json.dumps([self._entries[k] for k in sorted(self._entries)], indent=1) + "\n"
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)  # mkstemp makes it 0600; a Prometheus running as another user must read it
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
