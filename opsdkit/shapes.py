"""Randomly initialised models of real shapes, for GPU benchmarks where no weights can be
downloaded: speed and memory depend on shapes, not on weights."""

from __future__ import annotations

# Qwen3-1.7B (config.json of Qwen/Qwen3-1.7B).
QWEN3_1P7B = dict(
    hidden_size=2048,
    intermediate_size=6144,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
    max_position_embeddings=40960,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)

SHAPES = {"qwen3-1.7b": QWEN3_1P7B}


def random_qwen3(shape: str = "qwen3-1.7b", *, dtype=None, device=None, eos_token_id: int = 2,
                 pad_token_id: int = 0, seed: int = 0):
    """A Qwen3ForCausalLM with random weights of the named shape."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(eos_token_id=eos_token_id, pad_token_id=pad_token_id, bos_token_id=None, **SHAPES[shape])
    torch.manual_seed(seed)
    with torch.device(device or "cpu"):
        model = Qwen3ForCausalLM(cfg)
    return model.to(dtype or torch.bfloat16)


def cached_random_qwen3(dest, shape: str = "qwen3-1.7b", *, tokenizer=None, dtype=None, device=None) -> str:
    """`dest` if a model is already there, else a new random one written whole (a temp dir
    renamed into place). Benchmarks share one dir: vLLM keys its compile cache by the model path."""
    import os
    import shutil
    from pathlib import Path

    dest = Path(dest)
    if (dest / "config.json").is_file() and any(dest.glob("*.safetensors")):
        return str(dest)
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    eos = tokenizer.eos_token_id if tokenizer is not None else 2
    pad = tokenizer.pad_token_id if tokenizer is not None else 0
    model = random_qwen3(shape, dtype=dtype, device=device, eos_token_id=eos, pad_token_id=pad)
    model.save_pretrained(tmp)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    del model
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return str(dest)
