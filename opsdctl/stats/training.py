"""compare's training columns: per candidate, the mean of its runs' training statistics.

The compare report names the chains behind each entry (`chain_ids`); this reads their
train_stats rows (loss, KL, fraction clipped, the user's `[stages.train.metrics]`, step time)
and their stages' NVML figures (peak GPU memory, mean utilisation), and averages over the runs
that have them, so a researcher sees beside the score what the method did to training.
"""

from __future__ import annotations

from typing import Iterable, Optional

from opsdctl.store.engine import Store, stages_of, train_stats_of, trainer_of

COLUMNS = ("final_loss", "mean_kl", "frac_clipped", "step_seconds")


def _mean(xs: Iterable[Optional[float]]) -> Optional[float]:
    vals = [float(x) for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def training_row(store: Store, name: str, chain_ids: Iterable[int]) -> dict:
    """{"name", "runs" (with statistics), each COLUMNS mean, "metrics": {name: mean},
    "gpu_peak_mib" (max over the train stages), "gpu_util_pct" (mean)}."""
    stats, stages = [], []
    with store.read() as s:
        for cid in chain_ids:
            cid = trainer_of(s, cid)  # an eval-only run's training is its trainer's
            ts = train_stats_of(s, cid)
            if ts is not None:
                stats.append(ts)
            stages += [st for st in stages_of(s, cid) if st.name == "train"]
    row: dict = {"name": name, "runs": len(stats)}
    for col in COLUMNS:
        row[col] = _mean(getattr(ts, col) for ts in stats)
    names = sorted({n for ts in stats for n in (ts.metrics or {})})
    row["metrics"] = {n: _mean((ts.metrics or {}).get(n, {}).get("mean") for ts in stats) for n in names}
    peaks = [getattr(st, "gpu_peak_mib", None) for st in stages]
    peaks = [p for p in peaks if p is not None]
    row["gpu_peak_mib"] = max(peaks) if peaks else None
    row["gpu_util_pct"] = _mean(getattr(st, "gpu_util_pct", None) for st in stages)
    return row


def training_rows(store: Store, report: dict) -> list[dict]:
    """One row per entry of a compare report (the baseline first), from the chains it lists."""
    rows = []
    base = report.get("baseline") or {}
    if base.get("chain_ids"):
        rows.append({**training_row(store, base["name"], base["chain_ids"]), "partial": False})
    for e in report.get("variants", []):
        if e.get("chain_ids"):
            rows.append({**training_row(store, e["name"], e["chain_ids"]), "partial": bool(e.get("partial"))})
    return rows
