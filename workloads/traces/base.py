"""What every trace kind shares: the error type that names the file and line."""

from __future__ import annotations

from pathlib import Path


class TraceFormatError(ValueError):
    """A trace file that cannot be read; the message always names the file (and line if any)."""

    def __init__(self, path: Path | str, message: str, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line


def resolve_trace_path(path: Path, base_dir: Path | None) -> Path:
    """Relative paths are relative to the experiment file, then to the packaged data folder."""
    if path.is_absolute():
        return path
    candidates = [] if base_dir is None else [base_dir / path]
    candidates += [Path.cwd() / path, Path(__file__).resolve().parent.parent / "data" / path]
    for c in candidates:
        if c.exists():
            return c
    raise TraceFormatError(path, "trace file not found (looked in: " + ", ".join(str(c) for c in candidates) + ")")
