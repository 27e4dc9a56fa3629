"""How workers sharing one GPU split its memory (pure arithmetic of eval/backends.py)."""

from __future__ import annotations


def test_workers_sharing_a_gpu_split_its_memory_share():
    from eval.runner import engine_options

    opts = {"batch_invariant": True, "gpu_memory_utilization": 0.85, "max_num_seqs": 64}
    assert engine_options("vllm", opts, 1) == opts
    assert engine_options("vllm", opts, 2) == {**opts, "gpu_memory_utilization": 0.425}
    assert engine_options("hf", {}, 4) == {}
    assert opts["gpu_memory_utilization"] == 0.85  # the settings (the run's identity) are left as they are
