"""The compile counter's hook chaining and bookkeeping, driven by calling the hooks as Triton does.

Real compilations need a GPU (the interpreter never compiles); tests/gpu covers those.
"""

import triton

from moe_opt.kernels import CompileCounter


class _Info:
    module, name = "m", "k"


def _fire(cache_hit, key="K1"):
    kw = dict(key=key, repr="k[...]", fn=_Info(), compile={}, is_manual_warmup=False, already_compiled=False)
    triton.knobs.runtime.jit_cache_hook(**kw)
    triton.knobs.compilation.listener(src=None, metadata={}, metadata_group={}, times=_Times(), cache_hit=cache_hit)
    triton.knobs.runtime.jit_post_compile_hook(**kw)


class _Times:
    total = 250_000  # microseconds


def test_counts_events_and_separates_cache_hits():
    seen = []
    with CompileCounter(on_event=seen.append) as cc:
        _fire(cache_hit=False, key="A")
        mark = cc.mark()
        _fire(cache_hit=True, key="B")
        _fire(cache_hit=False, key="C")
    assert cc.compiles() == 2 and cc.compiles(include_cache_hits=True) == 3
    assert cc.compiles(mark) == 1
    assert cc.per_kernel() == {"m.k": 2}
    assert [e.specialization for e in seen] == ["A", "B", "C"]
    assert seen[0].compiler_s == 0.25 and seen[1].compiler_s is None and seen[1].cache_hit
    assert cc.compile_seconds() >= 0.0


def test_a_server_counter_passes_events_on_without_keeping_them():
    seen = []
    with CompileCounter(on_event=seen.append, keep_events=False) as cc:
        for key in "ABC":
            _fire(cache_hit=False, key=key)
    assert [e.specialization for e in seen] == ["A", "B", "C"] and cc.events == []


def test_chains_and_restores_existing_hooks():
    calls = []
    prev_cache = lambda **kw: calls.append("cache")  # noqa: E731
    prev_post = lambda **kw: calls.append("post")  # noqa: E731
    prev_listener = lambda **kw: calls.append("listener")  # noqa: E731
    knobs = triton.knobs
    knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = prev_cache, prev_post
    knobs.compilation.listener = prev_listener
    try:
        cc = CompileCounter().install()
        _fire(cache_hit=False)
        cc.uninstall()
        assert calls == ["cache", "listener", "post"] and cc.compiles() == 1
        assert knobs.runtime.jit_cache_hook is prev_cache and knobs.compilation.listener is prev_listener
    finally:
        knobs.runtime.jit_cache_hook = knobs.runtime.jit_post_compile_hook = None
        knobs.compilation.listener = None


def test_skip_requested_by_chained_hook_records_nothing():
    knobs = triton.knobs
    knobs.runtime.jit_cache_hook = lambda **kw: True
    try:
        with CompileCounter() as cc:
            kw = dict(key="K", repr="r", fn=_Info(), compile={}, is_manual_warmup=True, already_compiled=False)
            assert knobs.runtime.jit_cache_hook(**kw) is True
        assert cc.compiles() == 0
    finally:
        knobs.runtime.jit_cache_hook = None
