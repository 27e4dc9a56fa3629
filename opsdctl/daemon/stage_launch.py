"""What starting a stage on its GPUs means: its rendered command, environment, token and paths.

A stage's `{gpus}`, `{num_gpus}` and `CUDA_VISIBLE_DEVICES` are its own grant's: the GPUs the
pool handed this stage (or the gate named, without a pool), spelled as the worker inherited
them when it inherited a CUDA_VISIBLE_DEVICES list.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from opsdctl.contract import eval_request
from opsdctl.daemon import stages
from opsdctl.plan.gate import Grant


@dataclass(frozen=True)
class Launch:
    stage: str
    command: str
    env: dict
    token: str
    values: dict
    stage_dir: Path
    log_path: Path

    def same_run(self, other: "Launch") -> bool:
        """Would start the same thing (the token and the go pipe aside)."""
        own = {stages.ENV_STAGE_TOKEN, stages.ENV_GO_FD}
        strip = lambda env: {k: v for k, v in env.items() if k not in own}  # noqa: E731
        return (self.stage, self.command, self.stage_dir, self.log_path) == (
            other.stage, other.command, other.stage_dir, other.log_path) and strip(self.env) == strip(other.env)


def build(ctx, settings, chain, variant, stage: str, run_dir: Path, code_dir: Path, *, checkpoint,
          grant: Grant) -> Launch:
    """The launch of `stage` of `chain` on `grant` (raises UserError for a command that cannot be rendered)."""
    gpus = tuple(grant.gpus)
    gpus_text = grant.visible if grant.visible is not None else ",".join(str(g) for g in gpus)  # as the gate spells it
    stage_dir = run_dir / stage
    stage_dir.mkdir(parents=True, exist_ok=True)
    log_path = run_dir / f"{stage}.log"
    values = {
        "chain_id": chain.id,
        "variant": variant.label,
        "seed": chain.seed,
        "run_dir": run_dir,
        "stage_dir": stage_dir,
        "code_dir": code_dir,
        "recipe_env": run_dir / "recipe.env",
        "recipe_json": run_dir / "recipe.json",
        "gpus": gpus_text,
        "num_gpus": len(gpus),
        "python": stages.python_executable(),
        "profile": chain.profile,
    }
    if checkpoint is not None:
        values["checkpoint"] = checkpoint
    if stage == "eval":
        values.update(eval_request.placeholders(chain))
    values.update(stages.layout_values(settings.command(stage), chain.profile, len(gpus)))  # {grad_accum}
    command = stages.render(settings.command(stage), values)
    token = uuid.uuid4().hex
    env = stages.stage_env(
        hparams=variant.hparams, method=variant.method, chain_id=chain.id, stage=stage, stage_dir=stage_dir,
        run_dir=run_dir, token=token, gpus=gpus, code_dir=code_dir, runs_dir=ctx.cfg.runs_dir,
        store_url=ctx.store.url,
    )
    if stage == "eval":
        eval_request.apply_env(env, chain)
    env.update(dict(grant.env))
    env["CUDA_VISIBLE_DEVICES"] = gpus_text
    return Launch(stage, command, env, token, values, stage_dir, log_path)


def narrowed(grant: Grant, count: int) -> Grant:
    """The first `count` GPUs of `grant`: what a later stage of fewer GPUs gets of the chain's
    own (the pool prefers them), so a pre-started evaluation is started on exactly those."""
    if count <= 0 or count >= len(grant.gpus):
        return grant
    visible = None if grant.visible is None else ",".join(grant.visible.split(",")[:count])
    return replace(grant, gpus=tuple(grant.gpus)[:count], visible=visible)


def checkpoint_path(settings, values: dict, code_dir: Path) -> Path:
    """Where the train stage leaves its checkpoint ([stages.train] checkpoint, rendered)."""
    ckpt = Path(stages.render(settings.checkpoint, values, quote=False))
    return ckpt if ckpt.is_absolute() else code_dir / ckpt
