"""The GPU pool (opsdctl.daemon.gpu_pool): disjoint GPUs per stage, aligned blocks, first come
first served, a chain's own GPUs kept for its next stage, whole slots kept whole."""

from __future__ import annotations

import threading

import pytest

from opsdctl.daemon.gpu_pool import GpuPool
from opsdctl.plan.slots import Layout


def _take(pool, chain, stage, k, prefer=()):
    return pool.take(pool.ticket(chain, stage, k, prefer))


def test_one_gpu_slots_hand_out_disjoint_gpus_and_take_them_back():
    pool = GpuPool(Layout((0, 1, 2, 3), 1))
    got = [_take(pool, c, "train", 1) for c in range(1, 5)]
    assert got == [(0,), (1,), (2,), (3,)]
    t = pool.ticket(5, "train", 1)
    assert pool.take(t) is None and "in use by chains 1, 2, 3, 4" in pool.waiting_for(t)
    pool.give_back((2,))
    assert pool.take(t) == (2,) and pool.free() == ()


def test_first_come_first_served_a_wide_stage_is_not_starved():
    pool = GpuPool(Layout((0, 1, 2, 3), None, (("eval", 1),)))
    assert _take(pool, 1, "eval", 1) == (0,)
    wide = pool.ticket(2, "train", 4)
    narrow = pool.ticket(3, "eval", 1)
    assert pool.take(wide) is None
    assert pool.take(narrow) is None  # GPUs 1-3 are free, but the train is ahead in line
    assert "chain 2's train is ahead in line for 4" in pool.waiting_for(narrow)
    pool.give_back((0,))
    assert pool.take(wide) == (0, 1, 2, 3)
    assert pool.take(narrow) is None
    pool.give_back((0, 1, 2, 3))
    assert pool.take(narrow) == (0,)


def test_a_chain_keeps_its_own_gpus_and_narrow_stages_fill_a_used_slot_first():
    pool = GpuPool(Layout((0, 1, 2, 3), 2, (("eval", 1),)))
    assert _take(pool, 1, "train", 2) == (0, 1)
    assert _take(pool, 2, "train", 2) == (2, 3)
    pool.give_back((2, 3))
    pool.give_back((0, 1))
    assert _take(pool, 2, "eval", 1, prefer=(2, 3)) == (2,)  # its own, where its eval was pre-started
    assert _take(pool, 3, "eval", 1) == (3,)  # the used slot's other GPU, not one of a whole free slot
    assert _take(pool, 4, "train", 2) == (0, 1)  # which stays whole for a 2-GPU train


def test_blocks_are_aligned_and_a_left_ticket_lets_the_next_go():
    pool = GpuPool(Layout((0, 1, 2, 3), 1, (("train", 2),)))
    assert _take(pool, 1, "eval", 1) == (0,)
    assert _take(pool, 2, "train", 2) == (2, 3)  # not (1, 2): the block must be aligned
    t = pool.ticket(3, "train", 2)
    after = pool.ticket(4, "eval", 1)
    assert pool.take(after) is None
    pool.leave(t)
    assert pool.take(after) == (1,)
    with pytest.raises(ValueError):
        pool.ticket(5, "train", 8)


def test_a_waiting_take_wakes_when_gpus_come_back():
    pool = GpuPool(Layout((0, 1), 2))
    assert _take(pool, 1, "train", 2) == (0, 1)
    t = pool.ticket(2, "train", 2)
    threading.Timer(0.1, lambda: pool.give_back((0, 1))).start()
    assert pool.take(t, timeout=5.0) == (0, 1)
