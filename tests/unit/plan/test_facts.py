"""The planner's Facts: the protocol declares every member the gate reads, and each Facts the
code hands a gate (the store's, the simulator's, the store-less one) has them all, so the gate
calls them without probing."""

from __future__ import annotations

import ast
import inspect

from conftest import REPO

from opsdctl.plan import facts, planner, store_facts
from opsdctl.sim.session import SessionFacts


def declared() -> set[str]:
    return {n for n, v in vars(facts.Facts).items() if callable(v) and not n.startswith("_")}


def read_by_the_gate() -> set[str]:
    tree = ast.parse((REPO / "opsdctl" / "plan" / "planner.py").read_text())
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute)
            and n.value.attr == "facts"}


def test_the_protocol_declares_everything_the_gate_reads():
    assert read_by_the_gate() <= declared(), read_by_the_gate() - declared()
    assert "getattr(self.facts" not in inspect.getsource(planner)


def test_every_facts_has_every_member():
    for cls in (facts.NoFacts, store_facts.StoreFacts, SessionFacts):
        missing = {n for n in declared() if not callable(getattr(cls, n, None))}
        assert not missing, f"{cls.__name__} lacks {sorted(missing)}"


def test_no_facts_reads_nothing_and_writes_nothing():
    f = facts.NoFacts("baseline")
    assert (f.runs(), f.samples(), f.candidates([1]), f.dropped(), f.reeval_targets([])) == ([], [], {}, {}, {})
    assert f.baseline_label() == "baseline" and f.latest_training() is None
    assert f.queue_repeat("a", "why") is None and f.queue_reeval(1, "why") is None and f.save_plan({}) is None
