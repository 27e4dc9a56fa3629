"""Named profiles: the fixed setting a recipe is trained and evaluated in.

A profile holds what a recipe may not change (model, data, benchmark, the step and batch
budget, the evaluation protocol). The trainer and the evaluator take `--profile NAME` and
read it from here; opsdctl's starter config names one. `tiny://...` locations are built
offline on first use by `opsdkit.tiny` (a tiny Qwen3-architecture model, its tokenizer and
generated arithmetic data), so the whole job runs on a laptop with no downloads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from opsdctl.errors import UserError


@dataclass(frozen=True)
class Profile:
    name: str
    model: str  # Hugging Face id, local path, or tiny://model
    dataset: str  # Hugging Face id, local json/jsonl/parquet, or tiny://train
    benchmark: str  # Hugging Face id, local json/jsonl, or tiny://bench
    max_steps: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    num_processes: int
    save_steps: int
    # Caps a recipe's max_completion_length: only the tiny profile sets it (its answers are short).
    completion_length_cap: int | None
    # Multiplies a recipe's learning_rate: only the tiny profile sets it, because a
    # hundred-thousand-parameter model needs far larger steps than 1.7B to move in 6 steps.
    learning_rate_scale: float
    gpu_memory_utilization: float  # vLLM colocated rollouts
    # The benchmark's frozen evaluation protocol.
    eval_k: int
    eval_num_problems: int | None  # None = all
    benchmark_problems: int  # how many problems the benchmark holds (a partial eval takes fewer)
    eval_temperature: float
    eval_top_p: float
    eval_top_k: int  # 0 = off
    eval_min_p: float
    eval_presence_penalty: float
    eval_max_new_tokens: int
    eval_thinking: bool
    eval_seed: int
    # Fallback stage durations for the planner before any history exists.
    train_minutes: float
    eval_minutes: float
    # What one chain's processes take from the host ([host] overrides; 0 = not checked):
    # opsdctl.daemon.host_limits refuses more chains at once than the host's RAM and CPUs hold.
    host_ram_gib_per_chain: float = 0.0
    host_cpus_per_chain: float = 0.0
    # How repeats of a recipe are seeded by default (`queue`; [queue] seed / same_seed override).
    # qwen3-1.7b: the scorer's protocol, 5 re-trains at the same seed 42 (their spread is vLLM
    # sampling and CUDA nondeterminism); tiny: seeds S, S+1, ... since CPU training is deterministic.
    repeat_seed: int = 0
    repeat_same_seed: bool = False

    @property
    def global_batch(self) -> int:
        """Rows per optimizer step (a budget knob): per-device batch x accumulation x processes."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps * self.num_processes

    def to_dict(self) -> dict:
        return asdict(self)


PROFILES: dict[str, Profile] = {
    "qwen3-1.7b": Profile(
        name="qwen3-1.7b",
        model="Qwen/Qwen3-1.7B",
        dataset="siyanzhao/Openthoughts_math_30k_opsd",
        benchmark="HuggingFaceH4/aime_2024",
        max_steps=100,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        num_processes=4,
        save_steps=25,
        completion_length_cap=None,
        learning_rate_scale=1.0,
        gpu_memory_utilization=0.6,
        eval_k=12,
        eval_num_problems=None,
        benchmark_problems=30,  # AIME 2024
        eval_temperature=1.0,
        eval_top_p=0.95,
        eval_top_k=0,
        eval_min_p=0.0,
        eval_presence_penalty=0.0,
        eval_max_new_tokens=38912,
        eval_thinking=True,
        eval_seed=0,
        train_minutes=19.0,
        eval_minutes=27.0,
        # provisional: a trainer with its sleeping engine's weights in host memory, then the
        # evaluator; benchmarks/gpu_throughput.py measures them (host_per_chain)
        host_ram_gib_per_chain=16.0,
        host_cpus_per_chain=2.0,
        repeat_seed=42,
        repeat_same_seed=True,
    ),
    "tiny": Profile(
        name="tiny",
        model="tiny://model",
        dataset="tiny://train",
        benchmark="tiny://bench",
        max_steps=6,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        num_processes=1,
        save_steps=3,
        completion_length_cap=48,
        learning_rate_scale=10.0,
        gpu_memory_utilization=0.3,
        eval_k=4,
        eval_num_problems=None,
        benchmark_problems=30,  # opsdkit.tiny.N_BENCH
        eval_temperature=1.0,
        eval_top_p=0.95,
        eval_top_k=0,
        eval_min_p=0.0,
        eval_presence_penalty=0.0,
        eval_max_new_tokens=48,
        eval_thinking=True,
        eval_seed=0,
        train_minutes=1.0,
        eval_minutes=1.0,
    ),
}


def get_profile(name: str, where: str = "profile") -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise UserError(
            f"{where}: unknown profile {name!r}; known profiles: {', '.join(PROFILES)}"
        ) from None


def with_overrides(profile: Profile, **overrides) -> Profile:
    """A copy with the given fields replaced (None values are ignored)."""
    return replace(profile, **{k: v for k, v in overrides.items() if v is not None})
