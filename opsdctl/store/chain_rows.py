"""The one place a chain row is made: a new chain, a repeat, a re-eval, an eval-only chain, a copy.

Every `Chain` starts here, queued, so what a queued chain must carry (what it runs, frozen when
queued: its profile, code snapshot and view, stage settings and their hash; its place in the
queue; its seed and repeat) is filled by one rule per kind of chain. The callers decide which
chain to make and refuse what they must (client/ for the commands, plan/ for auto-repeat); the
functions taking a session write inside the caller's transaction, `repeat` and `reeval` in one
of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping, Optional

from sqlalchemy import func, or_, select

from opsdctl.errors import UserError
from opsdctl.store.engine import get_chain, next_repeat, next_seq, stage_of
from opsdctl.store.models import Chain, Score, Variant, utcnow
from opsdctl.store.states import State

# why chain `train_id`'s checkpoint may not be evaluated again, from its frozen stage settings and
# its checkpoint (None: it may): the planner's rule (opsdctl.plan.reeval.refusal)
Refusal = Callable[[int, Optional[Mapping], Optional[str]], Optional[str]]


@dataclass(frozen=True)
class Frozen:
    """What a chain runs, fixed when it is queued: the profile, the code snapshot and the view the
    stages run in, and the stage settings with their hash."""

    profile: str
    snapshot_id: Optional[int]
    code_dir: Optional[str]
    stage_spec: Optional[dict]
    commands_hash: Optional[str]

    @classmethod
    def of(cls, chain: Chain) -> "Frozen":
        return cls(chain.profile, chain.snapshot_id, chain.code_dir, chain.stage_spec, chain.commands_hash)

    def with_stages(self, spec: Optional[dict], commands_hash: Optional[str]) -> "Frozen":
        return replace(self, stage_spec=spec, commands_hash=commands_hash)


def _add(session, frozen: Frozen, **columns) -> Chain:
    chain = Chain(state=State.QUEUED.value, queued_at=utcnow(), profile=frozen.profile, snapshot_id=frozen.snapshot_id,
                  code_dir=frozen.code_dir, stage_spec=frozen.stage_spec, commands_hash=frozen.commands_hash, **columns)
    session.add(chain)
    session.flush()
    return chain


def training(session, variant_id: int, frozen: Frozen, *, seed: int, repeat: int, priority: int,
             seq: Optional[int] = None, eval_problems: Optional[int] = None, eval_k: Optional[int] = None,
             reason: Optional[str] = None) -> Chain:
    """A new queued chain that trains variant `variant_id` and evaluates it (`eval_problems` x
    `eval_k` for a partial eval); last in the queue unless `seq` places it."""
    return _add(session, frozen, variant_id=variant_id, seed=seed, repeat=repeat, priority=priority,
                seq=next_seq(session) if seq is None else seq, eval_problems=eval_problems, eval_k=eval_k,
                reason=reason)


def eval_only(session, variant_id: int, frozen: Frozen, *, checkpoint: str, seed: int, repeat: int, priority: int,
              trained_by: Optional[int] = None, requeued_from: Optional[int] = None, seq: Optional[int] = None,
              eval_problems: Optional[int] = None, eval_k: Optional[int] = None, draw: int = 0,
              reason: Optional[str] = None) -> Chain:
    """A new queued chain that only evaluates `checkpoint` (a directory, or `base`); `trained_by`:
    the chain of this store that trained it; `draw`: a re-eval's draw of fresh samples."""
    return _add(session, frozen, variant_id=variant_id, seed=seed, repeat=repeat, priority=priority,
                seq=next_seq(session) if seq is None else seq, eval_problems=eval_problems, eval_k=eval_k,
                eval_only=True, checkpoint=checkpoint, trained_by=trained_by, requeued_from=requeued_from,
                eval_draw=draw, reason=reason)


def copy(session, old: Chain, priority: Optional[int] = None) -> Chain:
    """A fresh queued copy of chain `old` pointing at it (`requeue`, or the worker's re-run of a
    chain it interrupted): everything it was to run, and its place in the queue."""
    return _add(session, Frozen.of(old), variant_id=old.variant_id, seed=old.seed, repeat=old.repeat,
                priority=old.priority if priority is None else priority, seq=old.seq, requeued_from=old.id,
                eval_problems=old.eval_problems, eval_k=old.eval_k, eval_only=old.eval_only,
                checkpoint=old.checkpoint, trained_by=old.trained_by,
                eval_draw=old.eval_draw)  # a re-eval cut short is the same draw again


def repeat(store, chain_id: int, *, same_seed: bool, reason: str) -> tuple[Chain, Variant]:
    """One more queued training of chain `chain_id`'s variant, with what that chain ran (code
    snapshot, profile, frozen stage settings): at its seed under the same-seed protocol
    (`same_seed`), else one above the variant's highest seed."""
    with store.write() as s:
        last = get_chain(s, chain_id)
        variant = s.get(Variant, last.variant_id)
        if same_seed:
            seed = last.seed
        else:
            seed = int(s.scalar(select(func.max(Chain.seed)).where(Chain.variant_id == variant.id)) or 0) + 1
        chain = training(s, variant.id, Frozen.of(last), seed=seed, repeat=next_repeat(s, variant.id), priority=0,
                         reason=reason)
        return chain, variant


def reeval(store, chain_id: int, refusal: Refusal, *, priority: Optional[int] = None,
           reason: Optional[str] = None) -> tuple[Chain, Variant]:
    """Queue the next draw of the checkpoint chain `chain_id` trained (or, for an eval-only chain,
    evaluated): a full eval, eval-only, with what the training ran. Refused in one line
    (UserError) when `refusal` says so, or when the checkpoint has no full score yet (its first
    eval is what `requeue --eval-only` runs). Checked and written in one transaction."""
    with store.write() as s:
        old = get_chain(s, chain_id)
        if old.state in (State.QUEUED.value, State.RUNNING.value):
            raise UserError(f"re-eval: chain {chain_id} is {old.state}; re-evaluate a finished chain's checkpoint")
        if old.eval_only and old.trained_by is None:
            raise UserError(f"re-eval: chain {chain_id} evaluated {old.checkpoint}, which no chain of this store "
                            f"trained; only a checkpoint opsdctl trained can be re-evaluated (evals pool by training)")
        trainer = get_chain(s, old.trained_by) if old.eval_only else old
        train = stage_of(s, trainer.id, "train")
        checkpoint = train.checkpoint if train is not None and train.state == State.SUCCEEDED.value else None
        why = refusal(trainer.id, trainer.stage_spec, checkpoint)
        if why is not None:
            raise UserError(f"re-eval: {why}")
        same = or_(Chain.id == trainer.id, Chain.trained_by == trainer.id)
        scored = s.scalar(select(func.count()).select_from(Chain).join(Score, Score.chain_id == Chain.id)
                          .where(same, Chain.state == State.SUCCEEDED.value, Score.partial.is_(False),
                                 Chain.eval_problems.is_(None), Chain.eval_k.is_(None)))
        if not scored:
            raise UserError(f"re-eval: chain {trainer.id}'s checkpoint has no full score yet; "
                            f"`opsdctl requeue {trainer.id} --eval-only` evaluates it the first time")
        draw = int(s.scalar(select(func.max(Chain.eval_draw)).where(same)) or 0) + 1
        chain = eval_only(s, trainer.variant_id, Frozen.of(trainer), checkpoint=checkpoint, seed=trainer.seed,
                          repeat=trainer.repeat, priority=old.priority if priority is None else priority,
                          trained_by=trainer.id, draw=draw, reason=reason)
        return chain, s.get(Variant, chain.variant_id)
