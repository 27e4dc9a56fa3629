"""Benchmark models of real shapes are built once and shared (vLLM keys its compile cache by the
model path, so every benchmark part must load the same dir)."""

from __future__ import annotations

from opsdkit import shapes

TOY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
           head_dim=16, vocab_size=64, max_position_embeddings=128, rope_theta=10000.0, rms_norm_eps=1e-6,
           tie_word_embeddings=True)


def test_cached_random_model_is_built_once(tmp_path, monkeypatch):
    monkeypatch.setitem(shapes.SHAPES, "toy", TOY)
    dest = tmp_path / "m"
    assert shapes.cached_random_qwen3(dest, "toy") == str(dest)
    weights = next(dest.glob("*.safetensors"))
    stamp = weights.stat().st_mtime_ns
    assert shapes.cached_random_qwen3(dest, "toy") == str(dest)  # found, not rebuilt
    assert weights.stat().st_mtime_ns == stamp and not (tmp_path / "m.partial").exists()
