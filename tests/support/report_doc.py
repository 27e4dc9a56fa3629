"""Typed compare reports from hand-written `compare --json`-shaped dicts, for the tests that feed
a consumer a situation (the policy, the futility rule, the export): keys left out take a blank
value (None, 0, False, empty)."""

from __future__ import annotations

import dataclasses

from opsdctl.stats import report as rp

_NESTED = {
    (rp.Report, "baseline"): rp.Baseline, (rp.Report, "noise"): rp.Noise, (rp.Report, "spending"): rp.ErrorSpending,
    (rp.Report, "screen"): rp.Screen, (rp.Report, "forecast_model"): rp.ForecastModel,
    (rp.Report, "budget"): rp.Budget, (rp.ErrorSpending, "looks"): rp.Looks, (rp.Noise, "prior_check"): rp.PriorCheck,
    (rp.Baseline, "reference"): rp.PublishedRef, (rp.Baseline, "reference_check"): rp.ReferenceCheck,
    (rp.PartialEntry, "vs_baseline"): rp.ScreenReading,
}
_BLANK = {"int": 0, "bool": False, "float": 0.0, "str": ""}


def _blank(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    t = str(f.type)
    if t.startswith("tuple"):
        return ()
    return _BLANK.get(t)


def make(cls, doc: dict | None):
    if doc is None:
        return None
    kw = {}
    for f in dataclasses.fields(cls):
        key = f.metadata.get("key", f.name)
        if key not in doc:
            kw[f.name] = _blank(f)
            continue
        v = doc[key]
        if f.name == "forecast" and isinstance(v, dict):
            v = rp.Forecast(**v)
        elif f.name == "entries":
            v = tuple(entry(e) for e in v)
        elif (cls, f.name) in _NESTED and isinstance(v, dict):
            v = make(_NESTED[cls, f.name], v)
        elif isinstance(v, list):
            v = tuple(rp.WouldBuy(**x) if isinstance(x, dict) and f.name == "local_runs_would_buy" else x for x in v)
        kw[f.name] = v
    return cls(**kw)


def entry(doc: dict):
    if doc.get("partial"):
        return make(rp.PartialEntry, doc)
    if "n" in doc and not doc["n"] and doc.get("note") == "no runs":
        return make(rp.MissingEntry, doc)
    return make(rp.Entry, doc)


def report(doc: dict) -> rp.Report:
    """A typed report from a partial document (missing parts blank)."""
    full = {"baseline": {}, "noise": {}, "alpha_spending": {"looks": {}}, "budget": {}, "variants": [], **doc}
    return make(rp.Report, full)
