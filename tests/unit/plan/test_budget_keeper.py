"""An unknown budget is never "unlimited": a countdown that cannot be read is `unknown`, not a
crash, and the worker's keeper counts down from the last deadline it read."""

from __future__ import annotations

import json

import pytest
from support.countdown import BAD_VALUES

from opsdctl.config import BudgetConfig
from opsdctl.plan import budget
from opsdctl.plan.budget_keeper import BudgetKeeper, hold_reason


@pytest.mark.parametrize("text", BAD_VALUES)
def test_a_bad_countdown_is_unknown_not_a_crash(tmp_path, text):
    f = tmp_path / "remaining_secs"
    f.write_bytes(text.encode("latin-1"))
    view = budget.budget_now(BudgetConfig(remaining_file=f), None)
    assert view.seconds_left is None and view.usable_seconds is None and view.error
    assert view.text().startswith("unknown (") and json.dumps(view.to_json())
    assert "no chain starts" in hold_reason(view)


def test_the_keeper_counts_down_from_the_last_deadline_it_read(tmp_path):
    f = tmp_path / "remaining_secs"
    now = [1_000_000.0]
    keeper = BudgetKeeper(BudgetConfig(remaining_file=f), None, clock=lambda: now[0])
    assert keeper.view().seconds_left is None and hold_reason(keeper.view())  # never read: hold
    f.write_text("3600\n")
    import os

    os.utime(f, (now[0], now[0]))
    assert keeper.view().seconds_left == pytest.approx(3600)
    f.write_text("")  # being rewritten
    now[0] += 600
    view = keeper.view()
    assert view.kept and view.seconds_left == pytest.approx(3000) and hold_reason(view) is None
    assert "from the last deadline read" in view.text() and "is empty" in view.text()
