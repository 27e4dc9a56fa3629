"""Compare reports over realistic inputs, for the test that the typed report prints exactly the
`compare --json` document it replaced (tests/unit/stats/report_golden.json holds that document,
written once by the dict-building build_report: `python -m tests.support.report_cases`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from opsdctl.config import Reference
from opsdctl.stats.compare import RunRecord

GOLDEN = Path(__file__).resolve().parents[1] / "unit" / "stats" / "report_golden.json"
REF = Reference(54.22, 1.48, 5)


def _run(rng, variant, chain_id, mean, *, k=12, n=30, counts=True, partial=False, ids=None, kind="recipe",
         candidate=None, code="c0ffee"):
    p = np.clip(mean / 100.0 + rng.normal(0.0, 0.25, n), 0.0, 1.0)
    c = rng.binomial(k, p)
    score = 100.0 * c.sum() / (n * k)
    return RunRecord(variant, chain_id, float(score), k, n, tuple(int(x) for x in c) if counts else None,
                     ids if ids is not None else tuple(f"2024-{i}" for i in range(n)), partial,
                     candidate=candidate, code=code, train_id=chain_id, kind=kind)


def synthetic_runs(seed: int = 7) -> list[RunRecord]:
    """A session's store: baseline and four candidates with 1-4 full runs each, one without
    per-problem counts, an outside checkpoint, partial screens with and without the baseline's."""
    rng = np.random.default_rng(seed)
    runs, cid = [], 0

    def add(variant, mean, times=1, **kw):
        nonlocal cid
        for _ in range(times):
            cid += 1
            runs.append(_run(rng, variant, cid, mean, **kw))

    add("baseline", 54.0, 3)
    add("token-clip", 57.5, 4)
    add("cosine", 53.0, 2)
    add("left-pad", 50.0, 3)
    add("long-trace", 55.0, 1, counts=False)
    add("ckpt", 52.0, 1, kind="checkpoint")
    sub = tuple(f"2024-{i}" for i in range(15))
    add("baseline", 54.0, 2, k=4, n=15, partial=True, ids=sub)
    add("cosine", 55.0, 1, k=4, n=15, partial=True, ids=sub)
    add("token-clip", 58.0, 1, k=4, n=10, partial=True, ids=sub[:10])
    add("long-trace", 56.0, 1, k=4, n=15, partial=True, counts=False, ids=sub)
    return runs


def cases(store_runs: list[RunRecord] | None = None) -> dict[str, tuple[list[RunRecord], dict]]:
    """{case name: (runs, build_report keywords)}; `store_runs`: tests/store_fill.py's store read
    through opsdctl.stats.scores.candidate_runs, when the caller has one."""
    syn = synthetic_runs()
    no_base = [r for r in syn if r.variant != "baseline"]
    singles = [r for r in syn if r.chain_id in (1, 4, 8)]
    out = {
        "session": (syn, dict(baseline="baseline", reference=REF, chain_minutes=42.0, minutes_left=200.0)),
        "shown_family": (syn, dict(baseline="baseline", reference=REF, variants=["baseline", "cosine", "idea"],
                                   family=["cosine", "token-clip"], chain_minutes=42.0, minutes_left=30.0)),
        "reference_only": (no_base, dict(baseline="baseline", reference=REF, chain_minutes=42.0, minutes_left=500.0)),
        "no_prior": (syn, dict(baseline="baseline", reference=Reference(54.22, 1.48, 5, prior=False, offset_sd=2.0))),
        "no_baseline": (no_base, dict(baseline=None, reference=None)),
        "single_runs": (singles, dict(baseline="baseline", reference=None)),
        "empty": ([], dict(baseline="baseline", reference=REF)),
    }
    if store_runs is not None:
        out["store_fill"] = (store_runs, dict(baseline="baseline", reference=REF, chain_minutes=15.0,
                                              minutes_left=120.0))
    return out


def store_fill_runs(tmp_path) -> list[RunRecord]:
    """tests/store_fill.py's store, its scored runs as compare reads them."""
    from conftest import default_config
    from store_fill import fill_store

    from opsdctl.config import load_config
    from opsdctl.store.engine import open_store
    from opsdctl.store.open_read import open_reader
    from opsdctl.stats.scores import candidate_runs

    (tmp_path / "opsdctl.toml").write_text(default_config(budget="hours = 6"))
    cfg = load_config(tmp_path / "opsdctl.toml")
    fill_store(open_store(cfg.db))
    runs, _ = candidate_runs(open_reader(cfg.db), None, baseline="baseline")
    return runs


if __name__ == "__main__":  # rewrite the golden document (only when the --json document changes on purpose)
    import sys
    import tempfile

    sys.path.insert(0, str(GOLDEN.parents[2]))  # tests/: conftest, store_fill
    from opsdctl.stats.compare import build_report

    store = store_fill_runs(Path(tempfile.mkdtemp()))
    GOLDEN.write_text(json.dumps({name: build_report(r, **kw).to_json() for name, (r, kw) in cases(store).items()},
                                 indent=1) + "\n")
