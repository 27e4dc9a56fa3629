"""The time budget's sources: a countdown file read against its age, a deadline, hours."""

from __future__ import annotations

import os
import time

import pytest

from opsdctl.config import BudgetConfig
from opsdctl.plan import budget


# --- budget -------------------------------------------------------------------------------


def test_budget_sources(tmp_path):
    f = tmp_path / "remaining_secs"
    f.write_text("3600\n")
    past = time.time() - 600
    os.utime(f, (past, past))  # written 10 minutes ago: 50 minutes are left now
    b = budget.budget_now(BudgetConfig(remaining_file=f, margin_minutes=5), None)
    assert b.seconds_left == pytest.approx(3000, abs=5) and b.usable_seconds == pytest.approx(2700, abs=5)
    assert budget.budget_now(BudgetConfig(remaining_file=tmp_path / "nope"), None).error
    import datetime as dt

    deadline = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    b = budget.budget_now(BudgetConfig(deadline=deadline, margin_minutes=0), None)
    assert b.seconds_left == pytest.approx(3600, abs=5) and b.kind == "deadline"
    now = 1_000_000.0
    h = BudgetConfig(hours=6, margin_minutes=10)
    assert budget.budget_now(h, None, now=now).clock_started is False
    b = budget.budget_now(h, clock_start=now - 3600, now=now)
    assert b.seconds_left == 5 * 3600 and b.usable_seconds == 5 * 3600 - 600
    assert "inside the" in budget.budget_now(h, clock_start=now - 6 * 3600 + 60, now=now).text()
    assert budget.budget_now(BudgetConfig(), None).usable_seconds is None
    assert budget.fmt_duration(46 * 60) == "46m" and budget.fmt_duration(3 * 3600 + 120) == "3h02m"
