"""The sessions of benchmarks/decision.py under the adaptive policy as it stood before `advise`
(commit 90d2cd5: chains allocated to settle the most verdicts) with that day's P(beat) export rule.

    python benchmarks/decision_today.py [--sessions 1000]    # ~2 min on 2 cores

The same seeds, the same idea draws, sd and offsets as decision.py; the policy's code comes from
`git archive 90d2cd5` into a temporary directory (its simulator kept the final report only in a
local variable: one line is added to keep it). Writes benchmarks/results/decision_today.json,
which decision.py (run after it, same sessions) sets beside its own figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path
from types import SimpleNamespace

import numpy as np

REPO = Path(__file__).resolve().parent.parent
TODAY = "90d2cd5"
sys.path.insert(0, str(REPO / "benchmarks"))
import decision  # noqa: E402  (the draws and the rules)


def _typed(doc: dict) -> SimpleNamespace:
    """That commit's report was a dict; the rules read the typed report's attributes."""
    full = tuple(SimpleNamespace(**e) for e in doc["variants"] if not e.get("partial") and e.get("n"))
    return SimpleNamespace(full=full, baseline=SimpleNamespace(**doc["baseline"]))


def one(i: int, seed: int = 0) -> dict:
    from opsdctl.plan.simulate import BASELINE, World, simulate_session

    rng = np.random.default_rng([seed, i])
    sigma, offset = decision.SIGMAS[i % 2], decision.OFFSETS[(i // 2) % 3]
    effects = decision.draw_effects(rng)
    w = World.make()
    w = World(w.logits, max(0.0, sigma**2 - w.v_eval), w.v_eval)
    res = simulate_session("adaptive", seed * 1_000_003 + i, effects=effects, world=w, offset=offset)
    true = {BASELINE: 0.0, **{n: e for n, (_, e) in res.verdicts.items()}}
    rep = _typed(res.report)
    picks = {"P(beat)": decision._pbeat_rule(rep), "local mean": decision._local_mean_rule(rep)}
    return {"tried": len(true) - 1, "chains": res.succeeded, **decision.scored(picks, true, max(true.values()), effects)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    if subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{TODAY}^{{commit}}"], capture_output=True).returncode:
        print(f"decision_today.py: commit {TODAY} (the policy this benchmark replays) is not in {REPO}: "
              "a shallow clone or no git history; `git fetch --unshallow` brings it", file=sys.stderr)
        return 2
    t0 = time.time()
    with tempfile.TemporaryDirectory() as src:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", TODAY, "opsdctl"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", src], input=archive.stdout, check=True)
        sim = Path(src) / "opsdctl" / "plan" / "simulate.py"
        text = sim.read_text()
        keep = "    rep = build_report(s.runs, baseline=BASELINE, reference=REFERENCE)\n"
        assert keep in text
        sim.write_text(text.replace(keep, keep + "    res.report = rep\n"))
        sys.path.insert(0, src)
        for name in [m for m in sys.modules if m == "opsdctl" or m.startswith("opsdctl.")]:
            del sys.modules[name]
        with Pool(2) as pool:
            rows = pool.map(one, range(args.sessions))
    rules = {r: decision.rule_figures(rows, r) for r in ("P(beat)", "local mean")}
    doc = {"command": "python benchmarks/decision_today.py" + ("" if args.sessions == 1000 else f" --sessions {args.sessions}"),
           "policy_commit": TODAY, "seed": 0, "seconds": round(time.time() - t0, 1), "sessions": args.sessions,
           "chains_per_session": round(float(np.mean([x["chains"] for x in rows])), 2),
           "ideas_tried_per_session": round(float(np.mean([x["tried"] for x in rows])), 2), "rules": rules}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decision_today.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
