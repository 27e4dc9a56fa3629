"""benchmarks/bet_bound.py: its closed forms against direct quadrature in float64, its session
likelihood against the draws, and its linear programme and duality bound on worlds whose answer is
known."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO
from scipy import integrate, stats
from support.bench_import import bench_module


@pytest.fixture(scope="module")
def bb():
    return bench_module("bet_bound")


@pytest.mark.parametrize("comps", [
    "spike", "normal", "uniform", "mix",
])
def test_an_ideas_posterior_matches_direct_quadrature(bb, comps):
    fam = {"spike": (bb.Comp("spike", 1.0, -2.0),),
           "normal": (bb.Comp("normal", 1.0, -1.5, 1.0),),
           "uniform": (bb.Comp("uniform", 1.0, -5.0, -1.0 + 0.5),),
           "mix": bb.MIX}[comps]
    v = 1.48**2
    for e in (-9.0, -3.2, -0.7, 0.0, 2.5, 8.0):
        dens, mean, worse = (float(x) for x in bb.idea_terms(np.array(e), v, fam))
        # the same three numbers straight from the definition: point masses plus densities on the line
        z = w1 = w2 = 0.0
        for c in fam:
            if c.kind == "spike":
                lik = c.weight * stats.norm.pdf(e, c.a, math.sqrt(v))
                z, w1, w2 = z + lik, w1 + lik * c.a, w2 + lik * (c.a < -1.0)
                continue
            pdf = (lambda t, c=c: stats.norm.pdf(t, c.a, c.b)) if c.kind == "normal" else \
                (lambda t, c=c: float(c.a <= t <= c.b) / (c.b - c.a))
            lo, hi = (c.a - 12 * c.b, c.a + 12 * c.b) if c.kind == "normal" else (c.a, c.b)
            f = lambda t, k: c.weight * pdf(t) * stats.norm.pdf(e - t, 0.0, math.sqrt(v)) * t**k  # noqa: E731
            z += integrate.quad(f, lo, hi, args=(0,), points=[-1.0] if lo < -1 < hi else None, limit=200)[0]
            w1 += integrate.quad(f, lo, hi, args=(1,), limit=200)[0]
            w2 += integrate.quad(f, lo, min(hi, -1.0), args=(0,), limit=200)[0] if lo < -1.0 else 0.0
        assert dens == pytest.approx(math.log(z), abs=1e-7)
        assert mean == pytest.approx(w1 / z, abs=1e-6)
        assert worse == pytest.approx(w2 / z, abs=1e-6)


def test_the_session_likelihood_integrates_the_level_as_the_draws_do(bb):
    # one idea, one baseline run: the session's density is a bivariate normal in closed form
    world = bb.BoundWorld("n", (bb.Comp("normal", 1.0, -0.5, 1.2),), sd=1.3, offset=0.7)
    s = bb.Sessions(base=np.array([0.4, -1.0]), ideas=np.array([[1.1], [-2.0]]), ss=np.zeros(2), dof=0)
    ll, mean, _ = bb.world_terms(s, world, (1, 1, 1))
    vl = world.sd**2 / 5
    cov = np.array([[vl + world.sd**2, vl], [vl, vl + 1.2**2 + world.sd**2]])
    for i in range(2):
        x = np.array([s.base[i], s.ideas[i, 0]])
        expect = stats.multivariate_normal.logpdf(x, [world.offset, world.offset - 0.5], cov)
        assert ll[i] == pytest.approx(expect, abs=1e-9)
        # E[effect | x] for the jointly normal (level, effect)
        c = np.array([0.0, 1.2**2])
        assert mean[i, 0] == pytest.approx(-0.5 + c @ np.linalg.solve(cov, x - [world.offset, world.offset - 0.5]),
                                           abs=1e-9)


def test_one_harmless_world_needs_no_risk_and_the_bound_says_so(bb):
    rng = np.random.default_rng(0)
    worlds = (bb.BoundWorld("null", (bb.Comp("spike", 1.0, 0.0),)),)
    p = bb.pooled(worlds, (2, 3, 1), 200, rng)
    t, short, lam, mu = bb.solve(p, np.array([-0.15]))
    assert t == pytest.approx(0.0, abs=1e-9) and short == pytest.approx(0.0, abs=1e-9)


def test_the_duality_bound_sits_below_what_the_best_rule_achieves(bb):
    # a harmful world against one whose gain goal asks for risk: the bound is a lower bound on the
    # worst P(worse) of any rule meeting the gain goals, so below the multipliers' own rule's
    rng = np.random.default_rng(1)
    worlds = (bb.BoundWorld("harmful", (bb.Comp("normal", 1.0, -1.5, 1.0),)),
              bb.BoundWorld("mix", bb.MIX))
    layout = (2, 6, 1)
    bar = bb.bars(worlds, layout, 20_000, rng)
    t, short, lam, mu = bb.solve(bb.pooled(worlds, layout, 300, rng), bar)
    assert lam.sum() <= bb.SHORT_PRICE + 1e-6 and mu.sum() == pytest.approx(1.0, abs=1e-6)
    mu = mu / mu.sum()
    check = bb.pooled(worlds, layout, 600, rng)
    vals = bb.lagrange_value(check, lam, mu)
    lower = lam @ bar + vals.mean()
    worst = 0.0
    for w in worlds:
        s = bb.draw_sessions(w, layout, 3000, rng)
        gain, se, worse = bb.outcome(s, bb.lagrange_rule(s, worlds, layout, lam, mu))
        worst = max(worst, worse)
    assert lower <= worst + 4 * vals.std(ddof=1) / math.sqrt(vals.size) + 0.01


def test_the_benchmark_writes_its_document(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bet_bound.py"), "--layout", "2+6x1", "--sessions", "40", "--fresh", "30",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "bet_bound.json").read_text())
    run = doc["runs"][0]
    assert run["layout"] == "2+6x1" and len(run["worlds"]) == 9
    assert all(0.0 <= w["shipped"]["p_worse_1"] <= 1.0 for w in run["worlds"])
    assert "## 2+6x1: lower bound" in (tmp_path / "bet_bound.md").read_text()


def test_its_worlds_are_the_suites_tune_worlds(bb):
    # the bound's explicit families and benchmarks/worlds.py's draws describe the same nine worlds
    worlds = bench_module("worlds")
    assert [w.name for w in bb.TUNE_WORLDS] == [w.name for w in worlds.WORLDS]
    for mine, theirs in zip(bb.TUNE_WORLDS, worlds.WORLDS):
        assert (mine.sd, mine.offset) == (theirs.sd, theirs.offset)
        a = np.concatenate([mine.draw(np.random.default_rng(i), 6) for i in range(3000)])
        b = np.concatenate([theirs.effects(np.random.default_rng(10_000 + i), 6) for i in range(3000)])
        for q in (lambda x: x.mean(), lambda x: x.std(), lambda x: np.mean(x == 0.0), lambda x: np.mean(x < -1.0)):
            assert q(a) == pytest.approx(q(b), abs=0.06)
