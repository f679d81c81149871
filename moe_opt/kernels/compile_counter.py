"""Counts Triton JIT compilations per kernel through `triton.knobs` hooks, chaining hooks already set.

Why three hooks: `runtime.jit_cache_hook` fires when a kernel misses the in-process cache (a new
specialisation key) and starts the clock; `compilation.listener` tells whether the binary came from
the on-disk cache (`cache_hit`) or was really compiled, with the compiler's own stage times;
`runtime.jit_post_compile_hook` stops the clock. A warm disk cache would otherwise make every
"compile" look free, so studies should point TRITON_CACHE_DIR at a fresh directory.

The vLLM worker plugin reuses `CompileCounter` as is: pass `on_event` to export each event.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import triton


@dataclass(frozen=True)
class CompileEvent:
    kernel: str  # qualified Python name of the @triton.jit function
    specialization: str  # Triton's in-process cache key: argument types, ==1/%16 attributes, constexprs
    wall_s: float  # seconds between cache-miss and kernel ready (compile or disk-cache load)
    compiler_s: float | None  # compiler's own stage total, when the listener saw a real compile
    cache_hit: bool | None  # True: loaded from the on-disk cache; None: listener did not report
    is_warmup: bool  # compiled by an explicit `kernel.warmup(...)`
    t_unix: float


@dataclass
class _Pending:
    kernel: str
    specialization: str
    start: float
    is_warmup: bool
    cache_hit: bool | None = None
    compiler_s: float | None = None


@dataclass
class CompileCounter:
    """Install with `with CompileCounter() as cc:` or `install()`/`uninstall()`; read `events`."""

    on_event: Callable[[CompileEvent], None] | None = None
    events: list[CompileEvent] = field(default_factory=list)
    keep_events: bool = True  # False: only on_event sees them (a long-running server must not hoard them)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self._prev: dict[str, Any] = {}
        self._installed = False

    # ----- hooks -------------------------------------------------------------------------------------
    def _stack(self) -> list[_Pending]:
        if not hasattr(self._local, "stack"):
            self._local.stack = []
        return self._local.stack

    def _cache_hook(self, *, key: Any, repr: str, fn: Any, compile: Any, is_manual_warmup: bool,
                    already_compiled: bool) -> Any:  # fmt: skip
        name = f"{getattr(fn, 'module', '')}.{getattr(fn, 'name', repr.split('[')[0])}"
        self._stack().append(_Pending(name, str(key), time.perf_counter(), bool(is_manual_warmup)))
        prev = self._prev.get("jit_cache_hook")
        result = None
        if prev is not None:
            result = prev(key=key, repr=repr, fn=fn, compile=compile, is_manual_warmup=is_manual_warmup,
                          already_compiled=already_compiled)  # fmt: skip
        if result:  # a chained hook asked Triton to skip this compile: nothing will follow
            self._stack().pop()
        return result

    def _listener(self, *, src: Any, metadata: Any, metadata_group: Any, times: Any, cache_hit: bool) -> None:
        stack = self._stack()
        if stack:
            stack[-1].cache_hit = bool(cache_hit)
            stack[-1].compiler_s = None if cache_hit else getattr(times, "total", 0) / 1e6
        prev = self._prev.get("listener")
        if prev is not None:
            prev(src=src, metadata=metadata, metadata_group=metadata_group, times=times, cache_hit=cache_hit)

    def _post_hook(self, *, key: Any, repr: str, fn: Any, compile: Any, is_manual_warmup: bool,
                   already_compiled: bool) -> Any:  # fmt: skip
        stack = self._stack()
        if stack:
            p = stack.pop()
            event = CompileEvent(p.kernel, p.specialization, time.perf_counter() - p.start, p.compiler_s,
                                 p.cache_hit, p.is_warmup, time.time())  # fmt: skip
            if self.keep_events:
                with self._lock:
                    self.events.append(event)
            if self.on_event is not None:
                self.on_event(event)
        prev = self._prev.get("jit_post_compile_hook")
        if prev is not None:
            return prev(key=key, repr=repr, fn=fn, compile=compile, is_manual_warmup=is_manual_warmup,
                        already_compiled=already_compiled)  # fmt: skip
        return None

    # ----- lifecycle ---------------------------------------------------------------------------------
    def install(self) -> CompileCounter:
        if self._installed:
            return self
        knobs = triton.knobs
        self._prev = {
            "jit_cache_hook": knobs.runtime.jit_cache_hook,
            "jit_post_compile_hook": knobs.runtime.jit_post_compile_hook,
            "listener": knobs.compilation.listener,
        }
        knobs.runtime.jit_cache_hook = self._cache_hook
        knobs.runtime.jit_post_compile_hook = self._post_hook
        knobs.compilation.listener = self._listener
        self._installed = True
        return self

    def uninstall(self) -> None:
        """Restore the hooks found at install time (only if ours are still the ones installed)."""
        if not self._installed:
            return
        knobs = triton.knobs
        if knobs.runtime.jit_cache_hook == self._cache_hook:
            knobs.runtime.jit_cache_hook = self._prev["jit_cache_hook"]
        if knobs.runtime.jit_post_compile_hook == self._post_hook:
            knobs.runtime.jit_post_compile_hook = self._prev["jit_post_compile_hook"]
        if knobs.compilation.listener == self._listener:
            knobs.compilation.listener = self._prev["listener"]
        self._installed = False

    def __enter__(self) -> CompileCounter:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    # ----- reading -----------------------------------------------------------------------------------
    def mark(self) -> int:
        """Index to pass as `since` later (e.g. the end of warm-up)."""
        with self._lock:
            return len(self.events)

    def since(self, mark: int = 0) -> list[CompileEvent]:
        with self._lock:
            return list(self.events[mark:])

    def compiles(self, mark: int = 0, include_cache_hits: bool = False) -> int:
        """Real compilations (disk-cache loads excluded unless asked) since `mark`."""
        return sum(1 for e in self.since(mark) if include_cache_hits or e.cache_hit is not True)

    def per_kernel(self, mark: int = 0, include_cache_hits: bool = False) -> dict[str, int]:
        c: Counter[str] = Counter(e.kernel for e in self.since(mark) if include_cache_hits or e.cache_hit is not True)
        return dict(c)

    def compile_seconds(self, mark: int = 0) -> float:
        return sum(e.wall_s for e in self.since(mark))
