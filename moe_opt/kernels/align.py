"""Per-expert token alignment: group (token, k) slots by expert, each group padded to the M tile.

Outputs (all on the ids' device):
  sorted_token_ids [max_padded] int32: flat slot indices (token * top_k + k) grouped by expert, in
      token order inside a group; padding slots hold `numel` (one past the last valid slot).
  expert_ids [max_padded / block_m] int32: the expert of each M block; -1 past the padded count.
  num_tokens_post_padded [1] int32: the padded count actually used, kept on the device so the GEMM
      grid can be sized by the bound `max_padded` and the whole forward can be captured in a graph.

The order inside each expert is the token order (stable), so the Triton version and its torch twin
agree exactly, which makes the test a plain equality.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Arguments whose value follows the batch size: specialising on them is what recompiles per batch.
BATCH_VARYING_ARGS = ["numel", "max_padded"]


def max_padded_slots(numel: int, num_experts: int, block_m: int) -> int:
    """Upper bound of the padded count: every active expert wastes at most block_m - 1 slots."""
    active = min(numel, num_experts)
    return triton.cdiv(numel + active * (block_m - 1), block_m) * block_m


@triton.jit
def _write_expert_blocks(
    sorted_ids_ptr, expert_ids_ptr, num_post_pad_ptr, counts, padded, expert, num_experts, numel, max_padded,
    BLOCK: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """Expert `expert`'s block ids and padding sentinels; the last expert also the tail and the padded count.

    The outputs come from torch.empty: the kernels write every element themselves (sentinels included),
    which saves three fill launches per forward, a visible share of a decode step."""
    offs_e = tl.arange(0, BLOCK_E)
    start_slot = tl.sum(tl.where(offs_e < expert, padded, 0), 0)
    my_padded = tl.sum(tl.where(offs_e == expert, padded, 0), 0)
    my_count = tl.sum(tl.where(offs_e == expert, counts, 0), 0)
    if expert == num_experts - 1:
        total = tl.sum(padded, 0)
        tl.store(num_post_pad_ptr, total)
        for tail in range(total, max_padded, BLOCK):
            offs_t = tail + tl.arange(0, BLOCK)
            tl.store(sorted_ids_ptr + offs_t, numel, mask=offs_t < max_padded)
        for tail_b in range(total // BLOCK_M, max_padded // BLOCK_M, BLOCK):
            offs_b = tail_b + tl.arange(0, BLOCK)
            tl.store(expert_ids_ptr + offs_b, -1, mask=offs_b < max_padded // BLOCK_M)
    offs_pad = start_slot + my_count + tl.arange(0, BLOCK_M)
    tl.store(sorted_ids_ptr + offs_pad, numel, mask=offs_pad < start_slot + my_padded)
    for b in range(start_slot // BLOCK_M, (start_slot + my_padded) // BLOCK_M):
        tl.store(expert_ids_ptr + b, expert)
    return start_slot


def _align_body(
    ids_ptr,
    sorted_ids_ptr,
    expert_ids_ptr,
    num_post_pad_ptr,
    numel,
    max_padded,
    num_experts,
    BLOCK: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    expert = tl.program_id(0)
    # Every program histograms all ids itself: one launch instead of count + scatter (a decode step
    # pays a few microseconds per launch); the ids are tiny and L2-resident.
    counts = tl.zeros([BLOCK_E], dtype=tl.int32)
    for start in range(0, numel, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        ids = tl.load(ids_ptr + offs, mask=offs < numel, other=0)
        counts += tl.histogram(ids, BLOCK_E, mask=offs < numel)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    start_slot = _write_expert_blocks(
        sorted_ids_ptr, expert_ids_ptr, num_post_pad_ptr, counts, padded, expert, num_experts, numel, max_padded,
        BLOCK, BLOCK_E, BLOCK_M,
    )  # fmt: skip
    written = start_slot
    for start in range(0, numel, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        ids = tl.load(ids_ptr + offs, mask=offs < numel, other=-1)
        hit = (ids == expert).to(tl.int32)
        pos = written + tl.cumsum(hit, 0) - 1
        tl.store(sorted_ids_ptr + pos, offs.to(tl.int32), mask=hit != 0)
        written += tl.sum(hit, 0)


_align_spec = triton.jit(_align_body)
_align_nospec = triton.jit(do_not_specialize=BATCH_VARYING_ARGS)(_align_body)
# A fixed chunk, not one sized to the batch: a batch-dependent constexpr would compile per batch size
# even with do_not_specialize (seen on the H200: 4 compiles after warm-up in the trace replay).
ALIGN_BLOCK = 1024


def _chunk_counts_body(ids_ptr, counts_ptr, numel, BLOCK: tl.constexpr, BLOCK_E: tl.constexpr):
    chunk = tl.program_id(0)
    offs = chunk * BLOCK + tl.arange(0, BLOCK)
    ids = tl.load(ids_ptr + offs, mask=offs < numel, other=0)
    tl.store(counts_ptr + chunk * BLOCK_E + tl.arange(0, BLOCK_E), tl.histogram(ids, BLOCK_E, mask=offs < numel))


def _chunk_scatter_body(
    ids_ptr,
    counts_ptr,
    sorted_ids_ptr,
    expert_ids_ptr,
    num_post_pad_ptr,
    numel,
    max_padded,
    num_experts,
    num_chunks,
    BLOCK: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    # Programs [0, num_chunks) place one chunk's slots each; programs num_chunks + e write expert e's
    # block ids and padding. Every program sums the small [num_chunks, E] count table itself: a grid-wide
    # prefix without a third launch.
    pid = tl.program_id(0)
    offs_e = tl.arange(0, BLOCK_E)
    total = tl.zeros([BLOCK_E], dtype=tl.int32)
    before = tl.zeros([BLOCK_E], dtype=tl.int32)
    mine = tl.zeros([BLOCK_E], dtype=tl.int32)
    for row in range(0, num_chunks):
        counts = tl.load(counts_ptr + row * BLOCK_E + offs_e)
        total += counts
        before += tl.where(row < pid, counts, 0)
        mine += tl.where(row == pid, counts, 0)
    padded = (total + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    start = tl.cumsum(padded, 0) - padded
    if pid < num_chunks:
        # Sorting (expert, position) keys groups the chunk's slots by expert in token order; a slot's
        # place is then its expert's start, the expert's slots in earlier chunks, and its rank here.
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        valid = offs < numel
        ids = tl.load(ids_ptr + offs, mask=valid, other=0)
        local = tl.arange(0, BLOCK)
        keys = tl.sort(tl.where(valid, ids * BLOCK + local, BLOCK_E * BLOCK), 0)
        expert_of = tl.minimum(keys // BLOCK, BLOCK_E - 1)
        base = start + before - (tl.cumsum(mine, 0) - mine)
        dest = tl.gather(base, expert_of, 0) + local
        tl.store(sorted_ids_ptr + dest, (pid * BLOCK + keys % BLOCK).to(tl.int32), mask=keys < BLOCK_E * BLOCK)
    else:
        _write_expert_blocks(
            sorted_ids_ptr, expert_ids_ptr, num_post_pad_ptr, total, padded, pid - num_chunks, num_experts, numel,
            max_padded, BLOCK, BLOCK_E, BLOCK_M,
        )  # fmt: skip


# The chunk count follows the batch as well.
_CHUNKED_VARYING_ARGS = [*BATCH_VARYING_ARGS, "num_chunks"]
_counts_spec = triton.jit(_chunk_counts_body)
_counts_nospec = triton.jit(do_not_specialize=["numel"])(_chunk_counts_body)
_scatter_spec = triton.jit(_chunk_scatter_body)
_scatter_nospec = triton.jit(do_not_specialize=_CHUNKED_VARYING_ARGS)(_chunk_scatter_body)


def _alloc_outputs(
    topk_ids: torch.Tensor, block_m: int, num_experts: int, fill: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    numel = topk_ids.numel()
    max_padded = max_padded_slots(numel, num_experts, block_m)
    device = topk_ids.device
    if not fill:
        return (
            torch.empty((max_padded,), dtype=torch.int32, device=device),
            torch.empty((max_padded // block_m,), dtype=torch.int32, device=device),
            torch.empty((1,), dtype=torch.int32, device=device),
        )
    sorted_ids = torch.full((max_padded,), numel, dtype=torch.int32, device=device)
    expert_ids = torch.full((max_padded // block_m,), -1, dtype=torch.int32, device=device)
    num_post_pad = torch.zeros((1,), dtype=torch.int32, device=device)
    return sorted_ids, expert_ids, num_post_pad


# Up to this many (token, k) slots one launch aligns; past it, two launches per chunk. On an H100 (2026-12-07,
# results/h200/issue20-kernel-check-h100-20261207/) chunking from 1,025 slots made the whole forward 1-4% slower
# at 2,048 slots (256 tokens x top-8, 128 experts), where a second launch costs more than the extra reads, and
# 2-16% faster from 8,192 slots (1,024 tokens x top-8). `moe_opt.bench.align_paths` timed both paths alone on an
# H100 (2026-12-07, results/h200/issue20-h100-tables-20261207/align_paths.json): one launch was no slower up to
# 4,096 slots with 8 and 256 experts and up to 6,144 with 128, at block_m 16 and 64; 4,096 is the smallest of those.
ONE_LAUNCH_MAX_SLOTS = 4096


def moe_align_block_size(
    topk_ids: torch.Tensor, block_m: int, num_experts: int, respecialize: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Triton version; returns (sorted_token_ids, expert_ids, num_tokens_post_padded)."""
    if topk_ids.numel() <= ONE_LAUNCH_MAX_SLOTS:
        return moe_align_one_launch(topk_ids, block_m, num_experts, respecialize)
    return moe_align_chunked(topk_ids, block_m, num_experts, respecialize)


def moe_align_one_launch(
    topk_ids: torch.Tensor, block_m: int, num_experts: int, respecialize: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`moe_align_block_size` in one launch of one program per expert, at any slot count."""
    numel = topk_ids.numel()
    if numel == 0:
        return _alloc_outputs(topk_ids, block_m, num_experts)
    sorted_ids, expert_ids, num_post_pad = _alloc_outputs(topk_ids, block_m, num_experts, fill=False)
    kernel = _align_spec if respecialize else _align_nospec
    kernel[(num_experts,)](
        topk_ids.reshape(-1), sorted_ids, expert_ids, num_post_pad, numel, sorted_ids.numel(), num_experts,
        BLOCK=ALIGN_BLOCK, BLOCK_E=triton.next_power_of_2(num_experts), BLOCK_M=block_m, num_warps=4,
    )  # fmt: skip
    return sorted_ids, expert_ids, num_post_pad


def moe_align_chunked(
    topk_ids: torch.Tensor, block_m: int, num_experts: int, respecialize: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`moe_align_block_size` in two launches over chunks of `ALIGN_BLOCK` slots, at any slot count.

    One program per expert that reads every id twice grows with E x numel (58 us at 4096 tokens x top-8 on an
    H100, against vLLM's 24: 2026-12-07). Counting per chunk, then placing per chunk, reads each id twice in all."""
    numel = topk_ids.numel()
    if numel == 0:
        return _alloc_outputs(topk_ids, block_m, num_experts)
    sorted_ids, expert_ids, num_post_pad = _alloc_outputs(topk_ids, block_m, num_experts, fill=False)
    flat = topk_ids.reshape(-1)
    block_e = triton.next_power_of_2(num_experts)
    num_chunks = triton.cdiv(numel, ALIGN_BLOCK)
    counts = torch.empty((num_chunks, block_e), dtype=torch.int32, device=topk_ids.device)
    (_counts_spec if respecialize else _counts_nospec)[(num_chunks,)](
        flat, counts, numel, BLOCK=ALIGN_BLOCK, BLOCK_E=block_e, num_warps=4
    )
    (_scatter_spec if respecialize else _scatter_nospec)[(num_chunks + num_experts,)](
        flat, counts, sorted_ids, expert_ids, num_post_pad, numel, sorted_ids.numel(), num_experts, num_chunks,
        BLOCK=ALIGN_BLOCK, BLOCK_E=block_e, BLOCK_M=block_m, num_warps=4,
    )  # fmt: skip
    return sorted_ids, expert_ids, num_post_pad


def moe_align_block_size_torch(
    topk_ids: torch.Tensor, block_m: int, num_experts: int, respecialize: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Plain-torch twin of `moe_align_block_size` (`respecialize` is accepted and has no effect)."""
    del respecialize
    sorted_ids, expert_ids, num_post_pad = _alloc_outputs(topk_ids, block_m, num_experts)
    flat = topk_ids.reshape(-1).long()
    slot = 0
    for expert in range(num_experts):
        members = torch.nonzero(flat == expert).flatten()
        count = int(members.numel())
        if count == 0:
            continue
        sorted_ids[slot : slot + count] = members.to(torch.int32)
        padded = triton.cdiv(count, block_m) * block_m
        expert_ids[slot // block_m : (slot + padded) // block_m] = expert
        slot += padded
    num_post_pad[0] = slot
    return sorted_ids, expert_ids, num_post_pad
