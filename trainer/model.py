"""The student: base model + one LoRA adapter (PEFT), and its hidden states at completion positions.

The forward runs the decoder backbone only (no output head), with explicit position ids, and
returns the final hidden states of the positions that predict completion tokens; the loss
applies the output head to them chunk by chunk (trainer.loss.chunked_loss).
"""

from __future__ import annotations

import torch

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_config(hparams: dict):
    from peft import LoraConfig

    return LoraConfig(r=hparams["lora_r"], lora_alpha=hparams["lora_alpha"], lora_dropout=hparams["lora_dropout"],
                      target_modules=list(LORA_TARGETS), bias="none", task_type="CAUSAL_LM")


def wrap_with_lora(model, hparams: dict, seed: int, gradient_checkpointing: bool = False):
    """PEFT model with the student adapter "default". Seeded so every process starts identical."""
    from peft import get_peft_model

    for p in model.parameters():
        p.requires_grad_(False)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    torch.manual_seed(seed)  # every device's generator: LoRA init may run on the GPU
    peft_model = get_peft_model(model, lora_config(hparams))
    disable_dropout(peft_model)
    return peft_model


def disable_dropout(model) -> None:
    """Every dropout off, as the release does with TRL's disable_dropout_in_model (opsd_trainer.py)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


def trainable_parameters(peft_model) -> list[torch.nn.Parameter]:
    return [p for n, p in peft_model.named_parameters() if p.requires_grad and ".default." in n]


def backbone_and_head(peft_model):
    base = peft_model.get_base_model()
    return base.get_decoder(), base.get_output_embeddings()


def completion_hidden(peft_model, batch) -> torch.Tensor:
    """(N, H) final hidden states predicting each real completion token, row-major order."""
    backbone, _ = backbone_and_head(peft_model)
    out = backbone(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                   position_ids=batch.position_ids, use_cache=False)
    hidden = out.last_hidden_state[:, batch.predicting_slice()]
    return hidden[batch.completion_mask]


def full_logits(peft_model, batch) -> torch.Tensor:
    """Naive reference: the whole model's logits at every position (B, L, V)."""
    return peft_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                      position_ids=batch.position_ids, use_cache=False).logits
