"""Would the submission's own family make better 80% intervals than the forecast's? Measured on rows.

    python benchmarks/worlds.py --split tune --sessions 250 --adaptive 40 --rows /tmp/rows_tune.json
    python benchmarks/family_intervals.py --rows /tmp/rows_tune.json            # Student's t
    python benchmarks/family_intervals.py --rows /tmp/rows_tune.json --normal   # a normal per node

opsdctl.stats.bet's exact model carried to the official scale: the baseline's official mean B
(the published mean's prior, s^2 / 5), the setup offset o (its sd as compare widens it), the
family's mean and each candidate's deviation (mu_sd, the tau grid) jointly normal per tau node;
the local runs observe B + o (+ mu + u_c); each arm's official 5-run mean is B (+ mu + u_c) plus
s^2 / 5. Nodes weighed by the local runs' likelihood and the half-Cauchy prior; the 10% and 90%
points of the mixture (Student's t on the noise's dof unless --normal). Per cell: the share of
arms and of the submitted arm (the rows' own pick) covered, against the forecast's intervals on
the same sessions, with worlds.py's coverage goals.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from worlds import COVER_ARMS, COVER_SUBMITTED, PUBLISHED  # noqa: E402

from opsdctl.stats import bet, inference  # noqa: E402


def intervals(row: dict, t_dof: bool = True) -> dict[str, tuple[float, float]]:
    """Each arm's 80% interval for its official 5-run mean under the joint model (module doc)."""
    from scipy.special import ndtr, stdtr

    s2, nu = row["s2"], row["nu"]
    base = next(a for a in row["arms"] if a["name"] == "baseline")
    c = [a for a in row["arms"] if a["name"] != "baseline" and a.get("local") is not None]
    k, nb = len(c), base["n"] or 0
    osd = inference.DEFAULT_OFFSET_SD
    if nb:
        osd = float(inference.offset_sd_seen(base["local"] - PUBLISHED, s2 * (1.0 / nb + 1.0 / 5), osd))
    dim = 3 + k  # z = (B, o, mu, u_1..k)
    h, y, r = [], [], []
    if nb:
        h.append(np.r_[1.0, 1.0, 0.0, np.zeros(k)])
        y.append(base["local"])
        r.append(s2 / nb)
    for j, a in enumerate(c):
        h.append(np.r_[1.0, 1.0, 1.0, np.eye(k)[j]])
        y.append(a["local"])
        r.append(s2 / a["n"])
    h, y, r = np.array(h), np.array(y), np.array(r)
    targets = np.zeros((1 + k, dim))
    targets[:, 0] = 1.0
    targets[1:, 2] = 1.0
    targets[1:, 3:] = np.eye(k)
    m0 = np.r_[PUBLISHED, np.zeros(dim - 1)]
    taus = bet.tau_nodes()
    logw, means, sds = [], [], []
    for tau in taus:
        p0 = np.diag([s2 / 5, osd**2, bet.MU_SD**2] + [tau**2] * k)
        s = h @ p0 @ h.T + np.diag(r)
        gain = np.linalg.solve(s, h @ p0).T
        resid = y - h @ m0
        m, p = m0 + gain @ resid, p0 - gain @ h @ p0
        logw.append(-0.5 * resid @ np.linalg.solve(s, resid) - 0.5 * np.linalg.slogdet(s)[1]
                    - np.log1p((tau / bet.TAU_SCALE) ** 2))
        means.append(targets @ m)
        sds.append(np.sqrt(np.diag(targets @ p @ targets.T) + s2 / 5))
    w = np.exp(np.array(logw) - max(logw))
    w /= w.sum()
    means, sds = np.array(means), np.array(sds)
    cdf = (lambda z: stdtr(nu, z)) if t_dof and nu else ndtr

    def quantile(q: float, i: int) -> float:
        lo, hi = means[:, i].min() - 10 * sds[:, i].max(), means[:, i].max() + 10 * sds[:, i].max()
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if w @ cdf((mid - means[:, i]) / sds[:, i]) < q else (lo, mid)
        return 0.5 * (lo + hi)

    names = ["baseline"] + [a["name"] for a in c]
    return {n: (quantile(0.1, i), quantile(0.9, i)) for i, n in enumerate(names)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=Path, required=True, help="worlds.py --rows output")
    ap.add_argument("--normal", action="store_true", help="a normal per node instead of Student's t")
    args = ap.parse_args(argv)
    results = json.loads(args.rows.read_text())
    print("| cell | family: arms | submitted | forecast: arms | submitted |")
    print("|---|---|---|---|---|")
    met = {"family": 0, "forecast": 0}
    for key, rows in results.items():
        hits = {"family": ([], []), "forecast": ([], [])}
        for row in rows:
            iv = intervals(row, not args.normal)
            for a in row["arms"]:
                if a["name"] not in iv:
                    continue
                sub = a["name"] == row["picks"]["bet"]
                for kind, (lo, hi) in (("family", iv[a["name"]]), ("forecast", (a["low80"], a["high80"]))):
                    hit = lo <= a["official"] <= hi
                    hits[kind][0].append(hit)
                    if sub:
                        hits[kind][1].append(hit)
        cells = []
        for kind, (arms, sub) in hits.items():
            ca, cs = float(np.mean(arms)), (float(np.mean(sub)) if sub else None)
            met[kind] += COVER_ARMS[0] <= ca <= COVER_ARMS[1] and (cs is None or cs >= COVER_SUBMITTED)
            cells.append(f"{100 * ca:.1f}% | " + ("-" if cs is None else f"{100 * cs:.1f}%"))
        print(f"| {key} | {cells[0]} | {cells[1]} |", flush=True)
    print(f"\nBoth coverage goals met: the family's intervals in {met['family']} of {len(results)} cells, "
          f"the forecast's in {met['forecast']}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
