"""The trainer's one validated input: profile, hyper-parameters, method knobs, seed, output.

Built by trainer.cli from the command line; read by trainer.train. It lives apart from both so
the CLI can import the training loop lazily without the loop importing the CLI back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from opsdctl.recipes.profiles import Profile


@dataclass
class TrainConfig:
    profile: Profile
    hparams: dict
    method: dict
    seed: int
    output_dir: Path
    recipe_name: str = "unnamed"
    recipe_hash: str | None = None
    sources: dict = field(default_factory=dict)  # knob -> where its value came from
    rollout_backend: str = "auto"  # auto | hf | vllm
    loss_chunk_size: int = 512
    # keep the profile's global batch if the process count differs (off once batch/accumulation are overridden)
    keep_global_batch: bool = True
    columns: dict = field(default_factory=dict)  # role -> explicit column name
    notes: list = field(default_factory=list)  # lines for the log

    @property
    def max_completion_length(self) -> int:
        cap = self.profile.completion_length_cap
        n = self.hparams["max_completion_length"]
        return min(n, cap) if cap else n

    @property
    def rationale_max_tokens(self) -> int:
        """reason_first's analysis budget: the release's 4096, capped like completions by the profile."""
        from trainer.prompting import RATIONALE_MAX_TOKENS

        cap = self.profile.completion_length_cap
        return min(RATIONALE_MAX_TOKENS, cap) if cap else RATIONALE_MAX_TOKENS

    @property
    def optimizer_hparams(self) -> dict:
        """The recipe's knobs as the optimizer sees them (the profile's learning_rate_scale applied)."""
        return {**self.hparams, "learning_rate": self.hparams["learning_rate"] * self.profile.learning_rate_scale}

    def to_dict(self) -> dict:
        d = asdict(self)
        d["output_dir"] = str(self.output_dir)
        d["effective_max_completion_length"] = self.max_completion_length
        return d
