"""The settings of one evaluation: resolved from a profile (or the frozen protocol) plus
command-line overrides, validated, and compared with what an output dir was started with.

`identity()` is what defines the samples: two runs with the same identity draw the same samples,
so a resume may only continue a dir whose settings.json holds the same identity.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from opsdctl.errors import UserError

# Keys compared on resume; the rest of settings.json is informative. `draw` comes before `seed`:
# two draws differ in both, and the draw is the one a user asked for.
IDENTITY_KEYS = ("model", "adapter_sha256", "benchmark_hash", "k", "temperature", "top_p", "top_k", "min_p",
                 "presence_penalty", "max_new_tokens", "thinking", "draw", "seed", "backend", "dtype", "batch_size",
                 "backend_options", "extract")
# What a settings.json written before a key existed ran with, so such a dir still resumes.
RECORDED_BEFORE = {"draw": 0}


@dataclass
class EvalSettings:
    model: str
    adapter: Optional[str]  # absolute path of a PEFT LoRA adapter dir, None = base model
    adapter_sha256: Optional[str]
    benchmark: str
    benchmark_hash: str
    n_benchmark: int  # problems in the benchmark
    num_problems: int  # evaluated (the first N)
    k: int
    reference_k: int  # the protocol's k: a smaller k makes the run partial
    temperature: float
    top_p: float
    top_k: int  # 0 = off
    min_p: float
    presence_penalty: float
    max_new_tokens: int
    thinking: bool
    seed: int  # the sampling seed: eval.plan.draw_seed(--seed or the profile's, draw)
    backend: str  # "hf" | "vllm"
    dtype: str  # "float32" | "bfloat16" | "float16"
    batch_size: Optional[int]  # HF: rows per micro-batch (None = one round of one problem)
    profile: Optional[str] = None
    backend_options: dict = field(default_factory=dict)
    extract: str = "released"  # eval.grading.EXTRACT_MODES: how an answer is read and checked
    draw: int = 0  # which fresh draw of samples (OPSD_EVAL_DRAW): 0 = a checkpoint's first evaluation

    @property
    def partial(self) -> bool:
        return self.num_problems < self.n_benchmark or self.k < self.reference_k

    def sampling(self) -> dict:
        return {key: getattr(self, key) for key in ("temperature", "top_p", "top_k", "min_p", "presence_penalty",
                                                    "max_new_tokens", "thinking", "seed")}

    def to_dict(self) -> dict:
        return {**asdict(self), "partial": self.partial}

    def identity(self) -> dict:
        d = self.to_dict()
        return {key: d[key] for key in IDENTITY_KEYS}


def check_resume(recorded: dict, settings: EvalSettings, where: str) -> None:
    """One line naming the first setting that differs from the dir's settings.json."""
    new = settings.identity()
    for key in IDENTITY_KEYS:
        was = recorded.get(key, RECORDED_BEFORE.get(key))
        if was != new[key]:
            raise UserError(
                f"{where}: this output dir was started with {key}={was!r} but this run has "
                f"{key}={new[key]!r}; resuming would mix different samples - rerun with the same settings "
                f"or choose a new --output-dir")


def adapter_fingerprint(adapter_dir: Path) -> str:
    """sha256 of the adapter's config and weights: moving the dir keeps it, retraining changes it."""
    h = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin"):
        p = adapter_dir / name
        if p.is_file():
            h.update(name.encode())
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()[:16]


def check_adapter(value: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """(absolute dir, fingerprint) of --adapter, or (None, None) for none/absent."""
    if value is None or value.strip().lower() in ("", "none", "base"):
        return None, None
    path = Path(value).expanduser().resolve()
    if not path.is_dir():
        raise UserError(f"--adapter {value}: no such directory; pass a PEFT LoRA adapter dir, or 'none' for the base model")
    if not (path / "adapter_config.json").is_file():
        raise UserError(f"--adapter {value}: no adapter_config.json inside; pass a PEFT LoRA adapter dir "
                        f"(a checkpoint saved with save_pretrained)")
    if not any((path / n).is_file() for n in ("adapter_model.safetensors", "adapter_model.bin")):
        raise UserError(f"--adapter {value}: no adapter_model.safetensors (or .bin) inside; the checkpoint is incomplete")
    return str(path), adapter_fingerprint(path)


def check_model(value: str) -> str:
    """Local model dirs must exist; hub ids are checked when the workers load them."""
    if value.startswith("tiny://"):
        return value
    path = Path(value).expanduser()
    looks_local = value.startswith((".", "/", "~")) or path.exists()
    if looks_local and not (path / "config.json").is_file():
        raise UserError(f"--model {value}: no config.json there; give a Hugging Face model dir or a hub id")
    return str(path.resolve()) if looks_local else value
