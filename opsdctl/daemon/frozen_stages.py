"""Stage settings frozen per chain: what a chain runs is decided when it is queued.

`queue` records with each chain the stage settings of opsdctl.toml as they are then
(`Chain.stage_spec`): the train and eval command templates, the checkpoint template, the
recipe_env_path and the [stages.train.expect] patterns. Editing opsdctl.toml while a worker
runs (or before it restarts) changes only chains queued afterwards; the worker says when a
chain's frozen settings differ from opsdctl.toml as it is when the chain starts (read again then,
not as the worker loaded it), and `status` shows the queued chains whose settings differ from the
file now. `requeue N [--eval-only] --current-commands` takes the file's settings instead (an
eval-only re-run keeps the train settings its checkpoint was trained with). Timeouts stay live:
they say how long to wait, not what runs.

`Chain.commands_hash` is the sha256 of what decides what runs (the commands, the checkpoint
template, recipe_env_path), so runs made with different commands are never pooled silently:
compare's code identity reads it. A chain recorded without them (a store older than these
columns) has neither (NULL) and runs with the worker's config.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Optional

from opsdctl.config import Config, load_config
from opsdctl.errors import UserError

SPEC_VERSION = 1
IDENTITY = (("train", "command"), ("train", "checkpoint"), ("train", "recipe_env_path"), ("eval", "command"))


def spec_of(cfg: Config) -> dict:
    """The stage settings of `cfg` as recorded with a chain."""
    train = cfg.stages["train"]
    sec = cfg.section("stages.train")
    return {
        "version": SPEC_VERSION,
        "train": {"command": train.command, "checkpoint": train.checkpoint,
                  "recipe_env_path": sec.get("recipe_env_path"), "expect": dict(sec.get("expect") or {})},
        "eval": {"command": cfg.stages["eval"].command, "prestart": cfg.stages["eval"].prestart},
    }


def commands_hash(spec: dict) -> str:
    ident = {f"{stage}.{key}": spec.get(stage, {}).get(key) for stage, key in IDENTITY}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class StageSettings:
    """What one chain's stages run: its frozen spec, or the config's for an older chain."""

    train_command: str
    checkpoint: str
    eval_command: str
    recipe_env_path: Optional[str]
    expect: dict
    frozen: bool
    eval_prestart: bool = False  # timing only, so not part of commands_hash: it changes when, not what, runs

    def command(self, stage: str) -> str:
        return self.train_command if stage == "train" else self.eval_command


def settings(spec: Optional[dict], cfg: Config) -> StageSettings:
    s = spec if spec else spec_of(cfg)
    return StageSettings(
        train_command=s["train"]["command"],
        checkpoint=s["train"]["checkpoint"],
        eval_command=s["eval"]["command"],
        recipe_env_path=s["train"].get("recipe_env_path"),
        expect=dict(s["train"].get("expect") or {}),
        frozen=bool(spec),
        eval_prestart=bool(s["eval"].get("prestart", False)),
    )


def differences(spec: Optional[dict], cfg: Config) -> list[str]:
    """How the config the worker loaded differs from a chain's frozen settings ([] = not at all)."""
    if not spec:
        return []
    now = spec_of(cfg)
    out = []
    for stage in ("train", "eval"):
        for key, value in spec.get(stage, {}).items():
            if now[stage].get(key) != value:
                out.append(f"[stages.{stage}] {key}")
    return out


def config_now(cfg: Config) -> Config:
    """opsdctl.toml as it is now (a worker loaded `cfg` when it started); `cfg` itself when it
    was not read from a file, or when the file cannot be read now."""
    if cfg.path is None:
        return cfg
    try:
        return load_config(cfg.path)
    except (UserError, OSError):
        return cfg


def rerun_spec(old: Optional[dict], cfg: Config, eval_only: bool) -> dict:
    """The stage settings of a re-run that takes opsdctl.toml's now (`--current-commands`); an
    eval-only re-run keeps the train settings its checkpoint was trained with."""
    now = spec_of(cfg)
    if eval_only and old:
        now["train"] = dict(old["train"])
    return now
