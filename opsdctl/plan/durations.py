"""How long will a stage take? Estimates from the store's history, with honest fallbacks.

Pure functions over plain samples, plus one store query (`history`).

cost_key: the facts that change a stage's cost, as one string. A stage's duration depends on
the fixed setting (the profile: model, data, benchmark, steps, evaluation protocol) and, for
training, on the recipe knobs that change the work per step. Of the whitelisted knobs, only
`max_completion_length` changes it materially (the on-policy rollouts and the loss run over
that many tokens); learning rate, clip or teacher choices do not. The evaluation protocol is
frozen by the profile, so its key is the profile alone; a partial evaluation (`queue --partial
15x4`) does a fraction of that work and has its own key.

    train: "train|<profile>|mcl=<max_completion_length>"
    eval:  "eval|<profile>"      partial eval: "eval|<profile>|partial=15x4"

A stage run on GPUs also keys on how many ("...|gpus=1"): a 1-GPU train of the same recipe is
another cost from a 4-GPU one (opsdctl.plan.slots). A stage without GPUs (a CPU profile) has no
such part, so a store's history keeps its keys.

The rule (ESTIMATE_RULE, shown by `opsdctl durations`), over the succeeded stages with the
same cost_key:
- n >= QUANTILE_MIN_N (5): median, and high = the HIGH_Q (0.9) quantile x TAIL_FACTOR (1.05);
- 1 <= n < 5: median, and high = max x FEW_FACTOR (1.15): with few samples the 0.9 quantile is
  not estimable, so the largest seen plus a safety margin stands in for it;
- n = 0: the configured default ([planner] train_minutes / eval_minutes, else the profile's:
  19 and 27 min for qwen3-1.7b, the top of the observed ranges, on 4 GPUs) times the layout
  factor of the stage's GPU count (opsdctl.plan.layout_costs) for both median and high; if
  history with other knobs of the same stage, profile and GPU count has a larger max, high is
  at least that max x FEW_FACTOR (never estimate an unseen setting as cheaper than a seen one);
- n = 0 for a partial eval: median = the full eval's median x its share of the samples
  (problems x k over the full protocol's), high = the full eval's high (admission stays safe
  until the partial setting has history of its own).
An eval-only chain has no train stage (0 s). The admission check uses `high`; timelines use
`median`. History is the latest HISTORY_MAX_STAGES (4,000) succeeded stages, so reading it stays
cheap in a large store.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Optional, Sequence

from opsdctl.plan.layout_costs import factor

HIGH_Q = 0.90
QUANTILE_MIN_N = 5
TAIL_FACTOR = 1.05
FEW_FACTOR = 1.15
COST_KNOBS = {"train": ("max_completion_length",), "eval": ()}
HISTORY_MAX_STAGES = 4000  # estimates read the latest this many succeeded stages (about 2,000 chains)

ESTIMATE_RULE = (
    f"n >= {QUANTILE_MIN_N}: high = p{int(HIGH_Q * 100)} x {TAIL_FACTOR}; "
    f"1 <= n < {QUANTILE_MIN_N}: high = max x {FEW_FACTOR}; n = 0: configured/profile default x the layout "
    f"factor of its GPU count "
    f"(at least max of other-knob history x {FEW_FACTOR}), a partial eval: the full eval's median x "
    f"its share of the samples, the full eval's high; median for timelines"
)


def cost_key(stage: str, profile: str, hparams: Optional[Mapping] = None, partial: Optional[tuple] = None,
             gpus: int = 0) -> str:
    """The cost key of a stage of a recipe (see the module docstring); `partial`: (problems, k)
    of a partial evaluation, None for the full protocol; `gpus`: how many GPUs it runs on."""
    parts = [stage, profile]
    for knob in COST_KNOBS.get(stage, ()):
        value = (hparams or {}).get(knob)
        parts.append(f"{'mcl' if knob == 'max_completion_length' else knob}={value}")
    if stage == "eval" and partial is not None:
        parts.append(f"partial={partial[0]}x{partial[1]}")
    if gpus:
        parts.append(f"gpus={gpus}")
    return "|".join(parts)


def gpus_of_text(text: Optional[str]) -> int:
    """How many GPUs a stage row's `gpus` text names ("0,1" -> 2, "" -> 0)."""
    return len([g for g in (text or "").split(",") if g.strip()])


def _partial_of_key(key: str) -> Optional[tuple[int, int]]:
    for part in key.split("|")[2:]:
        if part.startswith("partial="):
            n, k = part.removeprefix("partial=").split("x")
            return int(n), int(k)
    return None


def _gpus_of_key(key: str) -> int:
    last = key.rsplit("|", 1)[-1]
    return int(last.removeprefix("gpus=")) if last.startswith("gpus=") else 0


@dataclass(frozen=True)
class Sample:
    stage: str
    key: str  # cost_key
    seconds: float  # actual
    estimate_seconds: Optional[float] = None  # what admission assumed when it started (high)
    chain_id: Optional[int] = None


@dataclass(frozen=True)
class Estimate:
    stage: str
    key: str
    n: int
    median_s: float
    high_s: float
    source: str  # "history" | "default" | "default+other-knobs"

    def to_json(self) -> dict:
        return {"stage": self.stage, "cost_key": self.key, "n": self.n, "median_s": round(self.median_s, 1),
                "high_s": round(self.high_s, 1), "source": self.source}


def quantile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default, 'linear')."""
    s = sorted(float(x) for x in xs)
    if not s:
        raise ValueError("quantile of no samples")
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def estimate_from_samples(
    stage: str, key: str, same: Sequence[float], default_s: float, other: Sequence[float] = ()
) -> Estimate:
    """The rule of the module docstring. `same`: seconds of succeeded stages with this key;
    `other`: the same stage and profile with other knob values."""
    n = len(same)
    if n >= QUANTILE_MIN_N:
        return Estimate(stage, key, n, statistics.median(same), quantile(same, HIGH_Q) * TAIL_FACTOR, "history")
    if n >= 1:
        return Estimate(stage, key, n, statistics.median(same), max(same) * FEW_FACTOR, "history")
    high, source = float(default_s), "default"
    if other and max(other) * FEW_FACTOR > high:
        high, source = max(other) * FEW_FACTOR, "default+other-knobs"
    return Estimate(stage, key, 0, float(default_s), high, source)


class Estimator:
    """Estimates for one history snapshot (cheap to build; rebuild when history grows).
    Each key's estimate is computed once: status and the planner ask for the same few keys
    over and over, and a store may hold tens of thousands of stages."""

    def __init__(self, samples: Iterable[Sample], defaults_s: Mapping[str, float]):
        self.by_key: dict[str, list[float]] = {}
        for s in samples:
            self.by_key.setdefault(s.key, []).append(s.seconds)
        self.defaults_s = dict(defaults_s)
        self._max = {k: max(xs) for k, xs in self.by_key.items()}
        self._memo: dict[str, Estimate] = {}

    def stage(self, stage: str, profile: str, hparams: Optional[Mapping] = None,
              partial: Optional[tuple] = None, gpus: int = 0) -> Estimate:
        key = cost_key(stage, profile, hparams, partial, gpus)
        got = self._memo.get(key)
        if got is None:
            same = self.by_key.get(key, [])
            if partial is not None and stage == "eval" and not same:
                got = _scaled_partial(key, self.stage("eval", profile, hparams, gpus=gpus), partial, profile)
            else:
                # only the largest of the other knob values matters (estimate_from_samples);
                # partial evals are cheaper by design and never stand in for a full one
                sp = _stage_profile(key)
                other = [m for k, m in self._max.items()
                         if k != key and _stage_profile(k) == sp and _partial_of_key(k) is None]
                got = estimate_from_samples(stage, key, same, self.defaults_s[stage] * factor(stage, gpus), other)
                if not same and gpus and factor(stage, gpus) != 1.0:
                    got = replace(got, source=f"{got.source} x layout {factor(stage, gpus):g}")
            self._memo[key] = got
        return got

    def chain(self, profile: str, hparams: Optional[Mapping] = None, partial: Optional[tuple] = None,
              eval_only: bool = False, gpus: tuple[int, int] = (0, 0)) -> tuple[Estimate, Estimate]:
        """(train, eval) of a chain whose stages run on `gpus` (train's, eval's) GPUs; an eval-only
        chain's train is 0 s."""
        train = (Estimate("train", "none", 0, 0.0, 0.0, "eval-only: no train stage") if eval_only
                 else self.stage("train", profile, hparams, gpus=gpus[0]))
        return train, self.stage("eval", profile, hparams, partial, gpus=gpus[1])

    def of_chain(self, chain, hparams: Optional[Mapping] = None, gpus: tuple[int, int] = (0, 0)) -> tuple[Estimate, Estimate]:
        """(train, eval) of a store chain row or a ChainInfo (anything with profile, eval_problems,
        eval_k, eval_only) on `gpus` (train's, eval's)."""
        p = getattr(chain, "eval_problems", None), getattr(chain, "eval_k", None)
        return self.chain(chain.profile, hparams if hparams is not None else getattr(chain, "hparams", None),
                          None if p == (None, None) else p, bool(getattr(chain, "eval_only", False)), gpus)


def _scaled_partial(key: str, full: Estimate, partial: tuple, profile: str) -> Estimate:
    """A partial eval with no history of its own: the full eval's median scaled by its share of
    the samples; the full eval's high (see the module docstring)."""
    from opsdctl.recipes.partial import EvalSetting
    from opsdctl.recipes.profiles import PROFILES

    prof = PROFILES.get(profile)
    share = 1.0
    if prof is not None:
        n, k = EvalSetting().resolved(prof)
        share = min(1.0, (partial[0] * partial[1]) / float(n * k))
    return Estimate("eval", key, 0, full.median_s * share, full.high_s, f"{full.source} x {share:.2f} samples")


def _stage_profile(key: str) -> str:
    """The part of a key other knob values share: stage, profile and GPU count."""
    return "|".join(key.split("|")[:2]) + f"|gpus={_gpus_of_key(key)}"


def default_seconds(cfg) -> dict[str, float]:
    """[planner] train_minutes / eval_minutes, else the profile's fallback durations."""
    from opsdctl.recipes.profiles import get_profile

    prof = get_profile(cfg.profile)
    sec = cfg.section("planner") if hasattr(cfg, "section") else {}
    train = sec.get("train_minutes") or prof.train_minutes
    evaluate = sec.get("eval_minutes") or prof.eval_minutes
    return {"train": float(train) * 60.0, "eval": float(evaluate) * 60.0}


# --- the one store query ------------------------------------------------------------------


def history(reader, limit: int = HISTORY_MAX_STAGES) -> list[Sample]:
    """The latest `limit` succeeded stages with their actual seconds, keyed by cost_key (oldest
    first); `reader`: opsdctl.store.reader (`open_reader(store)` for a Store).

    One narrow query of plain columns, and each variant's knobs decoded once. The cap keeps
    status and the worker's refresh flat as a store grows (10,000 chains are 20,000 stages);
    2,000 chains' worth of recent stages is far more than an estimate needs, and recent
    durations are the ones that reflect the code as it is."""
    from opsdctl.store import queries

    with reader.snapshot() as r:
        rows = r.tuples(queries.DURATION_HISTORY, limit=limit)[::-1]
        hparams = dict(r.tuples(queries.VARIANT_HPARAMS))
    keys: dict[tuple, str] = {}
    out = []
    for name, secs, est, cid, profile, vid, ep, ek, gpus_text in rows:
        part = None if (ep, ek) == (None, None) else (ep, ek)
        n_gpus = gpus_of_text(gpus_text)
        key = keys.get((name, profile, vid, part, n_gpus))
        if key is None:
            key = keys[(name, profile, vid, part, n_gpus)] = cost_key(name, profile, hparams.get(vid) or {}, part,
                                                                     n_gpus)
        out.append(Sample(name, key, float(secs), est, cid))
    return out


def durations_doc(cfg, reader, recent: int = 20) -> dict:
    """`opsdctl durations --json`: the estimates per cost key, and estimate vs actual."""
    samples = history(reader)
    est = Estimator(samples, default_seconds(cfg))
    keys = sorted({s.key for s in samples})
    rows = []
    for key in keys:
        stage, profile = key.split("|")[:2]
        same = est.by_key[key]
        other = [x for k, xs in est.by_key.items()
                 if k != key and _stage_profile(k) == _stage_profile(key) and _partial_of_key(k) is None for x in xs]
        e = estimate_from_samples(stage, key, same, est.defaults_s[stage], other)
        rows.append({**e.to_json(), "min_s": round(min(same), 1), "max_s": round(max(same), 1)})
    checked = [s for s in samples if s.estimate_seconds]
    errors = [s.seconds - s.estimate_seconds for s in checked]
    return {
        "rule": ESTIMATE_RULE,
        "defaults_s": est.defaults_s,
        "estimates": rows,
        "accuracy": {
            "stages_with_estimate": len(checked),
            "over_estimate": sum(1 for e in errors if e > 0),  # ran longer than admission assumed
            "mean_error_s": round(statistics.mean(errors), 1) if errors else None,
            "mean_abs_pct": round(100 * statistics.mean(abs(s.seconds / s.estimate_seconds - 1) for s in checked), 1)
            if checked else None,
        },
        "recent": [
            {"chain_id": s.chain_id, "stage": s.stage, "cost_key": s.key, "estimate_s": s.estimate_seconds,
             "actual_s": round(s.seconds, 1),
             "error_s": None if not s.estimate_seconds else round(s.seconds - s.estimate_seconds, 1)}
            for s in samples[-recent:]
        ],
    }
