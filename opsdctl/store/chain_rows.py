"""The one place a chain row is made: a repeat of a training and a re-eval of a checkpoint.

Every new `Chain` starts here, so the columns a queued chain must carry (its code snapshot, its
frozen stage settings and their hash, its place in the queue, its seed) are filled by one rule
per kind of chain. The callers decide which chain to make (plan/, client/); this module writes it.
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional

from sqlalchemy import func, or_, select

from opsdctl.errors import UserError
from opsdctl.store.engine import get_chain, next_repeat, next_seq, stage_of
from opsdctl.store.models import Chain, Score, Variant, utcnow
from opsdctl.store.states import State

# why chain `train_id`'s checkpoint may not be evaluated again, from its frozen stage settings and
# its checkpoint (None: it may): the planner's rule (opsdctl.plan.reeval.refusal)
Refusal = Callable[[int, Optional[Mapping], Optional[str]], Optional[str]]


def _add(session, chain: Chain) -> Chain:
    session.add(chain)
    session.flush()
    return chain


def repeat(store, chain_id: int, *, same_seed: bool, reason: str) -> tuple[Chain, Variant]:
    """One more queued training of chain `chain_id`'s variant, with that chain's code snapshot,
    profile and frozen stage settings: at its seed under the same-seed protocol (`same_seed`),
    else one above the variant's highest seed."""
    with store.write() as s:
        last = get_chain(s, chain_id)
        variant = s.get(Variant, last.variant_id)
        if same_seed:
            seed = last.seed
        else:
            seed = int(s.scalar(select(func.max(Chain.seed)).where(Chain.variant_id == variant.id)) or 0) + 1
        chain = _add(s, Chain(variant_id=variant.id, seed=seed, repeat=next_repeat(s, variant.id), priority=0,
                              seq=next_seq(s), state=State.QUEUED.value, profile=last.profile,
                              snapshot_id=last.snapshot_id, code_dir=last.code_dir, stage_spec=last.stage_spec,
                              commands_hash=last.commands_hash, queued_at=utcnow(), reason=reason))
        return chain, variant


def reeval(store, chain_id: int, refusal: Refusal, *, priority: Optional[int] = None,
           reason: Optional[str] = None) -> tuple[Chain, Variant]:
    """Queue the next draw of the checkpoint chain `chain_id` trained (or, for an eval-only chain,
    evaluated): a full eval, eval-only, with the training's code and frozen stage settings. Refused
    in one line (UserError) when `refusal` says so, or when the checkpoint has no full score yet
    (its first eval is what `requeue --eval-only` runs). Checked and written in one transaction."""
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
        chain = _add(s, Chain(variant_id=trainer.variant_id, seed=trainer.seed, repeat=trainer.repeat,
                              priority=old.priority if priority is None else priority, seq=next_seq(s),
                              state=State.QUEUED.value, profile=trainer.profile, snapshot_id=trainer.snapshot_id,
                              code_dir=trainer.code_dir, stage_spec=trainer.stage_spec,
                              commands_hash=trainer.commands_hash, queued_at=utcnow(), eval_only=True,
                              checkpoint=checkpoint, trained_by=trainer.id, eval_draw=draw, reason=reason))
        return chain, s.get(Variant, chain.variant_id)
