"""The JSON documents that `opsdctl serve` shows as well as the CLI: one builder for each, called
by the command's `--json` and by the dashboard's `?format=json`, so the two can never differ."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

LOG_TAIL_BYTES = 64 * 1024  # a log's tail is read from its end: a 10 GB log costs the same


def chain_minutes(cfg, reader) -> Optional[float]:
    """Minutes of one train -> eval chain of the baseline's recipe, for "do the runs needed fit":
    the planner's high-quantile estimate from the store's history (the figure admission uses),
    falling back to [planner] train_minutes/eval_minutes or the profile's defaults."""
    from opsdctl.plan.durations import estimator_for

    hparams = {}
    if cfg.baseline_variant:
        versions = reader.variants_named(cfg.baseline_variant.split("@")[0])
        hparams = dict(versions[-1].hparams) if versions else {}
    train, evaluate = estimator_for(cfg, reader).chain(cfg.profile, hparams)
    return (train.high_s + evaluate.high_s) / 60.0


def compare_report(cfg, reader, variants: Optional[Sequence[str]] = None, baseline: Optional[str] = None,
                   family: Optional[str] = None, pool_code: bool = False) -> dict:
    """`opsdctl compare --json`."""
    from opsdctl.plan.report import compare_doc

    return compare_doc(cfg, reader, variants, baseline, chain_minutes=chain_minutes(cfg, reader), pool_code=pool_code,
                       family=family)


def chain_doc(store, chain_id: int, lines: int = 40) -> dict:
    """`opsdctl chain ID --json`: the chain as `status` lists it (stages, progress), its run as
    `show` lists it (score, per-problem counts, training curve, recipe check, code), and the
    last `lines` lines of its current stage's log."""
    from opsdctl.cli.status import chain_view
    from opsdctl.stats.scores import run_views
    from opsdctl.store.engine import get_chain
    from opsdctl.store.models import Variant

    with store.read() as s:
        chain = get_chain(s, chain_id)
        variant = s.get(Variant, chain.variant_id)
        run = run_views(store, s, [chain])[0]
    doc = chain_view(store.reader(), chain, variant)
    stage = next((st for st in reversed(doc.get("stages", [])) if st["name"] == chain.stage), None)
    doc["run"] = run
    doc["log_tail"] = None if stage is None else {"stage": stage["name"], "path": stage["log"],
                                                   "lines": log_tail(stage["log"], lines)}
    return doc


def log_tail(path: Optional[str], lines: int) -> list[str]:
    """The last `lines` lines of a log ([] when there is none yet)."""
    if not path or lines <= 0:
        return []
    try:
        with open(Path(path), "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - LOG_TAIL_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]
