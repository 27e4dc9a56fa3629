"""The store as the planner's Facts, and the plan the worker leaves there for `opsdctl status`.

Reads go through a reader (the worker's open_reader(store), or status's own) and the SQL texts of
opsdctl.store.queries; the two writes (an --auto-repeat chain, the plan) go through the store's
own functions (opsdctl.store.chain_rows, opsdctl.store.engine.set_meta). No SQL is written here.
"""

from __future__ import annotations

import json
from typing import Optional, Sequence

from opsdctl.plan.durations import Sample
from opsdctl.plan.gate import AUTO_REPEAT_REASON, ChainInfo, chain_info
from opsdctl.store import queries
from opsdctl.store.open_read import open_reader
from opsdctl.store.states import State

PLAN_KEY = "planner_plan"  # Meta: the worker's latest plan and settings, for `opsdctl status`


class StoreFacts:
    """The store as Facts: reads through `reader` (the worker's open_reader(store), or status's own
    reader), writes (an auto-repeat chain, the plan for status) through `store` (None: read-only).
    `context`: a command's opsdctl.plan.read_context.ReadContext, whose baseline and duration
    history it reads instead of the store (the worker has none: its facts move)."""

    def __init__(self, cfg, store=None, reader=None, context=None):
        self.cfg = cfg
        self.store = store
        self.reader = reader if reader is not None else open_reader(store)
        self.context = context

    def runs(self) -> list:
        from opsdctl.stats.scores import run_records

        return run_records(self.reader, baseline=self.baseline_label())

    def candidates(self, chain_ids: Sequence[int]) -> dict[int, str]:
        from opsdctl.stats.scores import candidate_labels

        return candidate_labels(self.reader, chain_ids, self.baseline_label())

    def samples(self) -> list[Sample]:
        from opsdctl.plan.durations import history

        return self.context.samples if self.context is not None else history(self.reader)

    def baseline_label(self) -> Optional[str]:
        if self.context is not None:
            return self.context.baseline
        return latest_version(self.reader, self.cfg.baseline_variant)[0]

    def running(self) -> list:
        """The chains running now (facts.LiveChain): their stage, its time so far, its GPUs."""
        from opsdctl.plan.facts import LiveChain
        from opsdctl.store.values import utcnow

        out = []
        with self.reader.snapshot() as r:
            for c in r.chains_in_state(State.RUNNING):
                rows = r.stages_of(c.id)
                cur = next((st for st in reversed(rows) if st.name == c.stage and st.state == State.RUNNING.value), None)
                elapsed = (utcnow() - cur.started_at).total_seconds() if cur is not None else 0.0
                gpus = tuple(int(g) for g in (cur.gpus or "").split(",") if g.strip().isdigit()) if cur else ()
                out.append(LiveChain(chain_info(c, r.variant(c.variant_id)), c.stage if cur is not None else None,
                                     max(0.0, elapsed), gpus))
        return out

    def dropped(self) -> dict[str, str]:
        from opsdctl.store.values import variant_label

        out: dict[str, str] = {}
        for cid, reason, name, version in self.reader.tuples(queries.FUTILE_STOPS, state=State.STOPPED_FUTILE.value):
            out.setdefault(variant_label(name, version),
                           f"an evaluation of it was stopped as futile (chain {cid}: {reason})")
        return out

    def queue_repeat(self, variant: str, why: str) -> Optional[ChainInfo]:
        """One more queued chain of candidate `variant` ("token-clip" or "token-clip @3f2a1c") with the
        code snapshot of the candidate's latest chain: at that chain's seed under the same-seed
        protocol ([queue] same_seed / the profile's), else a fresh one."""
        from opsdctl.stats.scores import candidate_labels
        from opsdctl.store import chain_rows

        v = self.reader.find_variant(variant.split(" @")[0])
        ids = [c.id for c in reversed(self.reader.chains_of_variant(v.id)) if not c.eval_only]  # latest first
        labels = candidate_labels(self.reader, ids, self.baseline_label())
        last_id = next((i for i in ids if labels.get(i) == variant), None)
        if v.kind != "recipe" or last_id is None:  # the base model or an outside checkpoint: nothing to train
            return None
        chain, row = chain_rows.repeat(self.store, last_id, same_seed=self.cfg.seed_policy()[1],
                                       reason=f"{AUTO_REPEAT_REASON}{why}")
        return chain_info(chain, row)

    def latest_training(self) -> Optional[ChainInfo]:
        """The store's latest chain with a train stage (what a repeat would cost like)."""
        row = self.reader.value(queries.LATEST_TRAINING_ID, no=False)
        if row is None:
            return None
        chain = self.reader.get_chain(int(row))
        return chain_info(chain, self.reader.variant(chain.variant_id))

    def reeval_targets(self, runs: list) -> dict:
        from opsdctl.plan import reeval

        return reeval.targets(self.reader, self.cfg, runs)

    def queue_reeval(self, train_id: int, why: str) -> Optional[ChainInfo]:
        """A re-eval of the checkpoint chain `train_id` trained (opsdctl.plan.reeval), marked as
        auto-repeat's; None when it cannot be queued any more (its checkpoint went meanwhile)."""
        from opsdctl.errors import UserError
        from opsdctl.plan import reeval

        try:
            chain, variant = reeval.queue(self.store, self.cfg, train_id, priority=0, reason=f"{AUTO_REPEAT_REASON}{why}")
        except UserError:
            return None
        return chain_info(chain, variant)

    def save_plan(self, doc: dict) -> None:
        from opsdctl.store.engine import save_meta

        save_meta(self.store, PLAN_KEY, json.dumps(doc))


def load_plan(reader) -> Optional[dict]:
    """The plan the worker saved last (None: none, or unreadable)."""
    text = reader.get_meta(PLAN_KEY)
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return None


def latest_version(reader, ref: Optional[str]) -> tuple[Optional[str], Optional[object]]:
    """(label, variant record) of `ref`: NAME@vN as given, a bare NAME its latest version, as
    everywhere else; (ref, None) when the store has no such variant."""
    from opsdctl.errors import UserError

    if not ref:
        return ref, None
    if "@" in ref:
        try:
            return ref, reader.find_variant(ref)
        except UserError:
            return ref, None
    versions = reader.variants_named(ref)
    return (versions[-1].label, versions[-1]) if versions else (ref, None)


def known_layout(cfg, reader):
    """The worker's GPU layout as status, compare and advise know it without probing a GPU:
    the config's device list, or for `devices = "all"` what the worker saved with its plan."""
    from opsdctl.plan.slots import configured_layout

    plan = load_plan(reader) if cfg.devices == "all" else None
    return configured_layout(cfg, (plan or {}).get("layout"))
