"""Eval-only chains: evaluate a checkpoint that exists already, or the base model.

`opsdctl queue --eval-only CHECKPOINT_DIR|base [--name NAME]` and `opsdctl requeue --eval-only
CHAIN`. An eval-only chain has no train stage; it passes the same gate, admission and store as any
chain, and its score is attributed to the variant whose chain trained the checkpoint:

- a checkpoint a chain of this store trained (its train stage's recorded checkpoint): that
  chain's variant, seed and repeat; `trained_by` points at it, so the training is counted once;
- `base`: the untrained base model, a variant of kind "base" (default name `base`); the eval
  stage gets `{checkpoint}` = `base` (`dev_eval.sh base`, `python -m eval --adapter base`);
- any other checkpoint directory: a variant of kind "checkpoint" named by `--name` (its knobs are
  unknown to opsdctl, so it cannot be exported as a recipe).

One training is one run: a checkpoint that already has a full score (or a full eval queued or
running) is refused a second full evaluation, which compare would count as another training;
a partial (screening) evaluation of it is always allowed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

from sqlalchemy import or_, select

from opsdctl.config import Config
from opsdctl.errors import UserError
from opsdctl.recipes import partial
from opsdctl.recipes.load import NAME_RULE, control_characters, valid_name
from opsdctl.recipes.profiles import get_profile
from opsdctl.daemon import frozen_stages
from opsdctl.identity import snapshot as snap
from opsdctl.client.enqueue import (QueuedChain, QueueResult, _snapshot_row, never_snapshotted, snapshot_globs,
                                 take_current_commands)
from opsdctl.identity.snapshot_lock import snapshot_lock
from opsdctl.store import chain_rows
from opsdctl.store.engine import Store, get_chain, stage_of, variants_named
from opsdctl.store.models import Chain, Score, Stage, Variant
from opsdctl.store.states import State

BASE = "base"
KIND_BASE, KIND_CHECKPOINT, KIND_RECIPE = "base", "checkpoint", "recipe"
_LIVE = (State.QUEUED.value, State.RUNNING.value)


def queue_eval_only(cfg: Config, store_factory, target: str, *, name: Optional[str] = None,
                    partial_spec: Optional[str] = None, priority: int = 0) -> QueueResult:
    """One queued eval-only chain of `target` (a checkpoint directory, or `base`)."""
    setting = partial.parse(partial_spec, get_profile(cfg.profile))
    if name is not None:
        _check_name(name)
    store: Store = store_factory()
    checkpoint = BASE if target.strip().lower() == BASE else _checkpoint_dir(target)
    # Everything that can be refused is refused before the snapshot, by the checks the write below
    # repeats race-free (one implementation: they query the ORM); this transaction writes nothing.
    with store.write() as s:
        trainer = None if checkpoint == BASE else _trained_by(s, checkpoint)
        _plan_variant(s, checkpoint, trainer, name)
        if trainer is not None:
            _refuse_double_count(s, trainer, setting)
    spec = frozen_stages.spec_of(cfg)  # the eval command it will run, frozen now
    with snapshot_lock(cfg.runs_dir):
        frozen = snap.take(cfg.code_dir, cfg.runs_dir, exclude=never_snapshotted(cfg), enabled=cfg.snapshot_code,
                           patterns=snapshot_globs(cfg))
        with store.write() as s:
            trainer = None if checkpoint == BASE else _trained_by(s, checkpoint)
            variant, notes = _plan_variant(s, checkpoint, trainer, name, create=True)
            if trainer is not None:
                _refuse_double_count(s, trainer, setting)  # again, inside the write: race-free
            row = _snapshot_row(s, frozen)
            runs = chain_rows.Frozen(cfg.profile, row.id, frozen.path, spec, frozen_stages.commands_hash(spec))
            trained_by = trainer.id if trainer is not None else None
            chain = chain_rows.eval_only(s, variant.id, runs, checkpoint=checkpoint,
                                         seed=trainer.seed if trainer is not None else 0,
                                         repeat=trainer.repeat if trainer is not None else 0, priority=priority,
                                         trained_by=trained_by, requeued_from=trained_by,  # a re-run of its eval
                                         eval_problems=setting.problems, eval_k=setting.k)
            return QueueResult([QueuedChain.of(chain, variant)], notes, frozen)


def requeue_eval_only(store: Store, chain_id: int, *, partial_spec: Optional[str] = None, full: bool = False,
                      priority: Optional[int] = None, current: Optional[Config] = None) -> QueuedChain:
    """Evaluate again the checkpoint chain `chain_id` trained (its eval timed out, failed or was
    skipped): same variant, seed, repeat and code snapshot; the old chain's eval setting unless
    `partial_spec` or `full` says otherwise; with `current` (`--current-commands`), the eval
    settings opsdctl.toml holds now instead of the frozen ones."""
    if full and partial_spec:
        raise UserError("requeue: --full and --partial ask for different evaluations; give one")
    with store.write() as s:
        old = get_chain(s, chain_id)
        if old.state in _LIVE:
            raise UserError(f"chain {chain_id} is {old.state}; only a finished chain's checkpoint can be evaluated again")
        checkpoint, trainer = _checkpoint_of(s, old)
        if checkpoint != BASE and not Path(checkpoint).is_dir():
            raise UserError(f"chain {chain_id}: its checkpoint {checkpoint} is gone (removed by hand or by "
                            f"`opsdctl gc`?); queue the recipe again to retrain it")
        setting = (partial.FULL if full else partial.parse(partial_spec, get_profile(old.profile)) if partial_spec
                   else partial.of_chain(old))
        if trainer is not None:
            _refuse_double_count(s, trainer, setting)
        new = chain_rows.eval_only(s, old.variant_id, chain_rows.Frozen.of(old), checkpoint=checkpoint, seed=old.seed,
                                   repeat=old.repeat, priority=old.priority if priority is None else priority,
                                   trained_by=trainer.id if trainer is not None else None, requeued_from=old.id,
                                   seq=old.seq, eval_problems=setting.problems, eval_k=setting.k)
        if current is not None:
            take_current_commands(new, old, current)
        return QueuedChain.of(new, s.get(Variant, new.variant_id))


def requeue_reeval(store: Store, cfg: Config, chain_id: int, *, priority: Optional[int] = None) -> QueuedChain:
    """Evaluate the checkpoint chain `chain_id` trained (or evaluated) again with fresh samples:
    the next draw of its training (opsdctl.plan.reeval), pooled with its other evals by compare."""
    from opsdctl.plan import reeval

    chain, variant = reeval.queue(store, cfg, chain_id, priority=priority)
    return QueuedChain.of(chain, variant)


# --- what is evaluated, and whose it is ------------------------------------------------------


def _checkpoint_dir(target: str) -> str:
    if control_characters(target):  # it reaches status, the worker log and the eval's command line
        raise UserError(f"queue --eval-only {target!r}: the path holds a control character; rename the directory")
    path = Path(target).expanduser()
    if not path.is_dir():
        raise UserError(f"queue --eval-only {target}: no such directory; give a checkpoint directory, "
                        f"or `base` for the base model")
    return str(path.resolve())


def _check_name(name: str) -> None:
    if not valid_name(name):
        raise UserError(f"--name {name!r}: a variant name is a plain word: {NAME_RULE}")


def _trained_by(s, checkpoint: str) -> Optional[Chain]:
    """The chain whose train stage left exactly this checkpoint (the latest, if several did)."""
    stage = s.scalars(select(Stage).where(Stage.name == "train", Stage.state == "succeeded",
                                          Stage.checkpoint == checkpoint).order_by(Stage.id.desc())).first()
    return None if stage is None else s.get(Chain, stage.chain_id)


def _checkpoint_of(s, chain: Chain) -> tuple[str, Optional[Chain]]:
    """(checkpoint, training chain) of a chain: its own train stage's, or what its eval-only run took."""
    if chain.eval_only:
        return chain.checkpoint, (s.get(Chain, chain.trained_by) if chain.trained_by else None)
    train = stage_of(s, chain.id, "train")
    if train is None or train.state != "succeeded" or not train.checkpoint:
        state = "did not start training" if train is None else f"its train stage is {train.state}"
        raise UserError(f"chain {chain.id} has no trained checkpoint ({state}); requeue it without --eval-only "
                        f"to train it")
    return train.checkpoint, chain


def _plan_variant(s, checkpoint: str, trainer: Optional[Chain], name: Optional[str],
                  create: bool = False) -> tuple[Optional[Variant], list[str]]:
    """The variant the score goes to (created when `create` and it is new); refuses a wrong --name."""
    if trainer is not None:
        variant = s.get(Variant, trainer.variant_id)
        if name is not None and name not in (variant.name, variant.label):
            raise UserError(f"--name {name}: {checkpoint} was trained by chain {trainer.id} ({variant.label}); its "
                            f"scores belong to {variant.label}; drop --name")
        return variant, [f"{checkpoint}: trained by chain {trainer.id}; scored as {variant.label}"]
    kind = KIND_BASE if checkpoint == BASE else KIND_CHECKPOINT
    if name is None:
        if kind == KIND_CHECKPOINT:
            raise UserError(f"queue --eval-only {checkpoint}: no chain of this store trained it; name the variant "
                            f"its score belongs to with --name NAME")
        name = BASE
    versions = variants_named(s, name)
    if versions and versions[-1].kind != kind:
        what = {"recipe": "a recipe variant", "base": "the base model", "checkpoint": "another checkpoint's"}
        raise UserError(f"--name {name}: already {what.get(versions[-1].kind, versions[-1].kind)} variant "
                        f"({versions[-1].kind}); a {'base model' if kind == KIND_BASE else 'checkpoint trained outside opsdctl'} "
                        f"cannot be scored as it; pick another name")
    if versions or not create:
        return (versions[-1] if versions else None), []
    variant = Variant(name=name, version=1, hash=hashlib.sha256(f"{kind}:{name}".encode()).hexdigest(),
                      description="the base model, untrained" if kind == KIND_BASE
                      else f"a checkpoint trained outside opsdctl ({checkpoint})",
                      hparams={}, method={}, source=checkpoint, kind=kind)
    s.add(variant)
    s.flush()
    return variant, []


def _refuse_double_count(s, trainer: Chain, setting: partial.EvalSetting) -> None:
    """One training is one run: no second full evaluation of its checkpoint."""
    if setting.partial:
        return
    same = s.scalars(select(Chain).where(or_(Chain.id == trainer.id, Chain.trained_by == trainer.id))
                     .where(Chain.eval_problems.is_(None), Chain.eval_k.is_(None))).all()
    for c in same:
        score = s.scalars(select(Score).where(Score.chain_id == c.id)).first()
        scored = c.state == State.SUCCEEDED.value and score is not None and not score.partial
        if scored or c.state in _LIVE:
            what = f"a full score ({score.avg_at_k:.2f}, chain {c.id})" if scored else f"a full eval {c.state} (chain {c.id})"
            raise UserError(f"chain {trainer.id}'s checkpoint already has {what}; a second full evaluation of the "
                            f"same samples would count one training twice; `opsdctl requeue {trainer.id} --reeval` "
                            f"draws fresh samples (pooled with the first), --partial takes a screening look")
