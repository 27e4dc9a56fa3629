"""The tiny profile's assets: the warm start's length-sorted sub-batches give exactly the loss and
the gradient of one padded batch (what Hugging Face's `.loss` computes), checked in float64; a fresh
cache gets the model the package ships (no warm start), whose tokenizer is what the data train."""

from __future__ import annotations

import pytest

from fixtures_tiny import untrained_tiny_model  # noqa: F401  (pytest fixture)


@pytest.mark.parametrize("sub_batch", [1, 4, 5, 64])
def test_sub_batches_give_the_padded_batch_loss_and_gradient(untrained_tiny_model, sub_batch):
    import torch
    from transformers import AutoTokenizer, Qwen3ForCausalLM

    from opsdkit.tiny import accumulate_batch_loss, padded

    tok = AutoTokenizer.from_pretrained(untrained_tiny_model)
    model = Qwen3ForCausalLM.from_pretrained(untrained_tiny_model, torch_dtype=torch.float64)
    model.train()
    g = torch.Generator().manual_seed(0)
    batch = []  # 12 examples of lengths 5..60, prompts 2..20 tokens: very unequal padding
    for _ in range(12):
        n = int(torch.randint(5, 61, (1,), generator=g))
        ids = torch.randint(5, len(tok), (n,), generator=g).tolist()
        batch.append((ids, int(torch.randint(2, min(20, n - 1) + 1, (1,), generator=g))))
    pad = tok.pad_token_id

    # the reference: one padded batch, the mean over its answer tokens in float64 ...
    input_ids, labels, mask = padded(batch, pad)
    logits = model(input_ids=input_ids, attention_mask=mask).logits[:, :-1]
    ref = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                            ignore_index=-100)
    ref.backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    # ... which is Hugging Face's `.loss` (computed in float32, hence the tolerance)
    hf = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
    assert hf.item() == pytest.approx(ref.item(), rel=1e-6)
    model.zero_grad(set_to_none=True)

    got = accumulate_batch_loss(model, batch, pad, sub_batch=sub_batch)
    assert got == pytest.approx(ref.item(), rel=1e-12)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want[name], rtol=1e-9, atol=1e-12, msg=name)


def test_a_fresh_cache_gets_the_shipped_model_and_trains_nothing(tmp_path, monkeypatch):
    """The first command on a fresh machine copies the package's model and generates the data: no
    warm start runs (it is what took 15 minutes on a loaded 2-core machine)."""
    import json

    from transformers import AutoTokenizer, Qwen3ForCausalLM

    from opsdkit import tiny

    def no_warm_start(*args, **kwargs):
        raise AssertionError("the warm start ran although the package ships the model")

    monkeypatch.setattr(tiny, "warm_start", no_warm_start)
    assets = tiny.ensure_tiny_assets(tmp_path / "cache", log=None)
    info = json.loads((assets.root / "info.json").read_text())
    assert info["source"].startswith("shipped") and info["version"] == tiny.TINY_VERSION
    model = Qwen3ForCausalLM.from_pretrained(assets.model_dir)
    assert sum(p.numel() for p in model.parameters()) == info["parameters"]
    assert {k: getattr(model.config, k) for k in tiny.TINY_SHAPE} == tiny.TINY_SHAPE
    tok = AutoTokenizer.from_pretrained(assets.model_dir)
    rows = [json.loads(line) for line in assets.train_file.read_text().splitlines()]
    assert len(rows) == tiny.N_TRAIN and rows[0][tiny.TRACE_COLUMN] == tiny.make_rows(1, seed=1)[0][tiny.TRACE_COLUMN]
    for r in rows[:50]:  # counted with the tokenizers library, as the trained build counts with transformers'
        assert r["num_tokens"] == len(tok(r[tiny.TRACE_COLUMN], add_special_tokens=False)["input_ids"])
    bench = [json.loads(line) for line in assets.bench_file.read_text().splitlines()]
    assert bench == tiny.make_benchmark()
    assert not list((tmp_path / "cache").glob(".tiny-v*"))  # no partial build left


def test_the_shipped_tokenizer_is_the_one_its_data_train():
    """The package's tokenizer is what train_tokenizer makes of the generated data today: the data
    and the shipped model cannot drift apart without `python -m opsdkit.tiny --ship`."""
    import json

    from opsdkit import tiny

    tokenizer = tiny.train_tokenizer(tiny._tokenizer_texts(tiny.make_rows(tiny.N_TRAIN, seed=1)))
    fresh = json.loads(tokenizer.backend_tokenizer.to_str())
    shipped = json.loads((tiny.SHIPPED / "tokenizer.json").read_text())
    assert fresh["model"] == shipped["model"] and fresh["added_tokens"] == shipped["added_tokens"]
    assert json.loads((tiny.SHIPPED / "config.json").read_text())["vocab_size"] == len(tokenizer)
