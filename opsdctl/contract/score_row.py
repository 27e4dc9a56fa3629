"""An evaluation result as the store's Score row (the worker's and recovery's salvage alike)."""

from __future__ import annotations

from typing import Optional

from opsdctl.contract.results import EvalResult
from opsdctl.store.models import Score


def score_row(chain_id: int, result: EvalResult, stage_seconds: Optional[float]) -> Score:
    return Score(
        chain_id=chain_id,
        k=result.k,
        avg_at_k=round(result.avg_at_k, 6),
        n_problems=result.n_problems,
        n_correct=result.n_correct,
        n_samples=result.n_samples,
        problems=result.problems,
        partial=result.partial,
        seconds=result.seconds if result.seconds is not None else (round(stage_seconds, 3) if stage_seconds else None),
        source=result.source,
    )
