"""Loading models and tokenizers, and the out-of-place LoRA merge.

Why out of place: merging an adapter into bf16 base weights in place and unmerging it again
does not give the same bits back (W + BA - BA != W in bf16). With a fixed teacher (the base
with the adapter disabled) that drift silently corrupts the teacher after every weight sync.
So the merged weight is computed as a new tensor, in fp32, from the untouched base weight:
    W' = (W.float() + scaling * B.float() @ A.float()).to(W.dtype)
"""

from __future__ import annotations

import json
from pathlib import Path

from opsdkit.tiny import resolve


def load_tokenizer(location: str, *, padding_side: str = "left"):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve(location))
    if tok.pad_token is None:  # left padding keeps prompt and completion contiguous
        tok.pad_token = tok.eos_token
    tok.padding_side = padding_side
    return tok


def load_model(location: str, *, dtype=None, device=None, attn_implementation: str | None = None):
    import torch
    from transformers import AutoModelForCausalLM

    kwargs = {"dtype": dtype or torch.float32}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    model = AutoModelForCausalLM.from_pretrained(resolve(location), **kwargs)
    if device is not None:
        model.to(device)
    return model


def stop_token_ids(tokenizer, model=None) -> list[int]:
    """Every token that ends a turn: the tokenizer's eos plus the model's generation eos ids."""
    ids = {tokenizer.eos_token_id}
    for name in ("<|im_end|>", "<|endoftext|>"):
        tid = tokenizer.convert_tokens_to_ids(name)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid is not None:
            ids.add(tid)
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, (list, tuple)):
        ids.update(eos)
    return sorted(i for i in ids if i is not None)


def lora_delta(lora_a, lora_b, scaling: float):
    """scaling * B @ A in fp32."""
    return (lora_b.float() @ lora_a.float()) * float(scaling)


def merged_state_dict(peft_model, adapter_name: str = "default") -> dict:
    """Base-model-named weights with every LoRA layer merged, computed out of place.

    Returns only the weights of LoRA-wrapped modules (what changes); the base tensors are
    never written to.
    """
    import torch

    out = {}
    with torch.no_grad():
        for name, module in peft_model.named_modules():
            if not (hasattr(module, "base_layer") and hasattr(module, "lora_A")):
                continue
            if adapter_name not in module.lora_A:
                continue
            base_w = module.base_layer.weight
            delta = lora_delta(module.lora_A[adapter_name].weight, module.lora_B[adapter_name].weight,
                               module.scaling[adapter_name])
            if getattr(module, "fan_in_fan_out", False):
                delta = delta.T
            key = name.removeprefix("base_model.model.") + ".weight"
            out[key] = (base_w.float() + delta).to(base_w.dtype)
    return out


def read_adapter(adapter_dir: str | Path) -> tuple[dict, dict]:
    """(adapter_config, tensors) of a saved PEFT LoRA adapter."""
    from safetensors.torch import load_file

    adapter_dir = Path(adapter_dir)
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    weights = adapter_dir / "adapter_model.safetensors"
    if weights.exists():
        tensors = load_file(str(weights))
    else:
        import torch

        tensors = torch.load(adapter_dir / "adapter_model.bin", map_location="cpu", weights_only=True)
    return config, tensors


def merge_adapter_into(model, adapter_dir: str | Path) -> int:
    """Replace the LoRA-targeted weights of a plain model with W + scaling * B @ A (fp32 math).

    The model's weights are replaced by new tensors (the old ones are not modified in place).
    Returns the number of merged weights.
    """
    import torch

    config, tensors = read_adapter(adapter_dir)
    r = config["r"]
    alpha = config.get("lora_alpha", r)
    scaling = alpha / (r ** 0.5) if config.get("use_rslora") else alpha / r
    params = dict(model.named_parameters())
    merged = 0
    with torch.no_grad():
        for key, a in tensors.items():
            if ".lora_A." not in key:
                continue
            b = tensors[key.replace(".lora_A.", ".lora_B.")]
            module = key.split(".lora_A.")[0].removeprefix("base_model.model.")
            pname = module + ".weight"
            if pname not in params:
                raise ValueError(f"{adapter_dir}: adapter targets {module}, which the model does not have")
            w = params[pname]
            delta = lora_delta(a.to(w.device), b.to(w.device), scaling)
            if config.get("fan_in_fan_out"):
                delta = delta.T
            new = (w.detach().float() + delta).to(w.dtype)
            owner = model.get_submodule(module)
            owner.weight = torch.nn.Parameter(new, requires_grad=False)
            merged += 1
    if merged == 0:
        raise ValueError(f"{adapter_dir}: no LoRA weights found in the adapter")
    return merged
