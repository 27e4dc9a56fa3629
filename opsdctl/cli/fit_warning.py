"""`opsdctl queue`'s warning for chains that cannot fit in the time left.

The chain is queued anyway (the budget may grow: a remaining file can be topped up, a deadline
moved); the warning uses the same projected timeline as `opsdctl status`, so a chain that would
fit alone but not behind the chains already queued is named too.
"""

from __future__ import annotations

from typing import Sequence



def unfit_warnings(cfg, reader, chain_ids: Sequence[int]) -> list[str]:
    """One line per newly queued chain that the projected timeline says will not fit."""
    from opsdctl.plan.planner_status import planner_status
    from opsdctl.plan.read_context import read_context

    ctx = read_context(cfg, reader)
    if ctx.budget.usable_seconds is None:
        return []  # no budget: everything fits
    wanted = set(chain_ids)
    out = []
    for e in planner_status(ctx)["timeline"]:
        if e["chain_id"] in wanted and not e["fits"]:
            why = (e.get("reason") or "").removeprefix("will not fit: ")
            out.append(f"chain {e['chain_id']} {e['variant']} cannot fit in the time left ({why}); "
                       "queued anyway: it runs if the budget grows")
    return out
