"""Is a reported score possible? Pure checks of an evaluation's numbers against each other.

A FINAL line or a result.json that cannot be true (above 100%, more correct than sampled, a
percentage that disagrees with its own counts, as in `12.00% (190/360 ...)`) must fail the
chain, not be averaged into compare's verdicts. Each check returns None when the numbers agree,
else one line saying what disagrees; the caller quotes the source.
"""

from __future__ import annotations

from typing import Optional, Sequence

# result.json avg_at_k may be rounded (the stage contract's example in DEVELOPERS.md writes 4 decimals: 0.5278 for
# 190/360); a fraction further than this from its own counts disagrees with them.
AVG_TOLERANCE = 1e-4


def final_line_problem(k: int, pct_text: str, correct: int, samples: int, n_problems: int) -> Optional[str]:
    """`FINAL avg@k accuracy: P% (correct/samples solutions correct on n problems)`."""
    try:
        pct = float(pct_text)
    except ValueError:
        return f"{pct_text}% is not a number"
    if k < 1:
        return f"avg@{k}: k must be at least 1"
    if n_problems < 1 or samples < 1:
        return f"{samples} solutions on {n_problems} problems: nothing was evaluated"
    if pct > 100.0:
        return f"{pct_text}% is above 100%"
    if correct > samples:
        return f"{correct} correct out of {samples} solutions is more than all of them"
    # The percentage is printed rounded to its own decimals: allow half a unit of the last one.
    decimals = len(pct_text.partition(".")[2])
    tolerance = 0.5 * 10.0 ** -decimals + 1e-9
    implied = 100.0 * correct / samples
    if abs(pct - implied) > tolerance:
        return f"{pct_text}% disagrees with its counts: {correct}/{samples} is {implied:.2f}%"
    return None


def counts_problem(avg_fraction: float, problems: Sequence[dict]) -> Optional[str]:
    """result.json: avg_at_k must be the mean over problems of correct / samples (problems
    without samples count as 0, as our evaluator computes it)."""
    if not problems:
        return None
    implied = sum(p["correct"] / p["samples"] if p["samples"] else 0.0 for p in problems) / len(problems)
    if abs(avg_fraction - implied) > AVG_TOLERANCE:
        return (f"avg_at_k = {avg_fraction:g} disagrees with the per-problem counts, whose mean is "
                f"{implied:.6f}")
    return None
