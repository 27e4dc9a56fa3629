"""compare's training columns: per candidate, the mean of its runs' training statistics.

The compare report names the chains behind each entry (`chain_ids`); this reads their
train_stats rows (loss, KL, fraction clipped, the user's `[stages.train.metrics]`, step time)
and their stages' NVML figures (peak GPU memory, mean utilisation), and averages over the runs
that have them, so a researcher sees beside the score what the method did to training.
"""

from __future__ import annotations

from typing import Iterable, Optional

from opsdctl.store import queries

COLUMNS = ("final_loss", "mean_kl", "frac_clipped", "step_seconds")  # queries.TRAIN_STATS reads them in this order


def _mean(xs: Iterable[Optional[float]]) -> Optional[float]:
    vals = [float(x) for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def _row(name: str, stats: list, stages: list) -> dict:
    """{"name", "runs" (with statistics), each COLUMNS mean, "metrics": {name: mean},
    "gpu_peak_mib" (max over the train stages), "gpu_util_pct" (mean)}; `stats`: dicts of
    COLUMNS + "metrics"; `stages`: (peak MiB, utilisation %) of the train stages."""
    row: dict = {"name": name, "runs": len(stats)}
    for col in COLUMNS:
        row[col] = _mean(ts.get(col) for ts in stats)
    names = sorted({n for ts in stats for n in (ts.get("metrics") or {})})
    row["metrics"] = {n: _mean((ts.get("metrics") or {}).get(n, {}).get("mean") for ts in stats) for n in names}
    peaks = [p for p, _ in stages if p is not None]
    row["gpu_peak_mib"] = max(peaks) if peaks else None
    row["gpu_util_pct"] = _mean(u for _, u in stages)
    return row


def _lookups(reader, chain_ids: set[int]):
    """(trainer of each chain, its train statistics, its train stages' GPU figures): three narrow
    queries for the whole report (one query per run made compare take 27 s at 10,000 chains;
    the per-step curves are never read here)."""
    with reader.snapshot() as r:
        trainer = dict(r.tuples(queries.TRAINED_BY, yes=True))
        wanted = {trainer.get(c, c) for c in chain_ids}
        stats = {}
        for cid, *vals, metrics in r.tuples(queries.TRAIN_STATS):
            if cid in wanted:
                stats[cid] = {**dict(zip(COLUMNS, vals)), "metrics": metrics}
        stages: dict[int, list] = {}
        for cid, peak, util in r.tuples(queries.TRAIN_STAGE_GPU):
            if cid in wanted:
                stages.setdefault(cid, []).append((peak, util))
    return trainer, stats, stages


def training_rows(reader, report) -> list[dict]:
    """One row per entry of a compare report (opsdctl.stats.report.Report; the baseline first),
    from the chains it lists (an eval-only run's training is its trainer's). Rows are what
    `compare --json` prints under `training`."""
    base = report.baseline
    entries = ([(base, False)] if base.chain_ids else []) + [
        (e, e.partial) for e in report.entries if getattr(e, "chain_ids", None)]
    if not entries:
        return []
    trainer, stats, stages = _lookups(reader, {c for e, _ in entries for c in e.chain_ids})
    rows = []
    for e, part in entries:
        tids = [trainer.get(c, c) for c in e.chain_ids]
        rows.append({**_row(e.name, [stats[t] for t in tids if t in stats],
                            [st for t in tids for st in stages.get(t, [])]), "partial": part})
    return rows
