"""The tiny profile's warm start: its length-sorted sub-batches give exactly the loss and the
gradient of one padded batch (what Hugging Face's `.loss` computes), checked in float64."""

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
