"""The dashboard's templates and SVG without a server or a browser: what compare's page makes of
the forecast and the next actions a report may hold, and where an interval bar lands."""

from __future__ import annotations

import re

from opsdctl.cli.web import svg
from opsdctl.cli.web.app import Pages


def _render(name: str, doc: dict) -> str:
    p = Pages(None, None, "sqlite:///runs.db")
    return p.env.get_template(f"{name}.html").render(doc=doc, **getattr(p, f"{name}_view")(doc))


ENTRY = {"name": "a", "variants": ["a"], "n": 3, "mean": 55.0, "delta": 0.8, "ci_low": -1.0, "ci_high": 2.5,
         "p_beat": 0.8, "verdict": "undecided", "runs_needed": 2, "partial": False}


def test_compare_page_renders_forecast_and_next_actions_when_the_report_has_them():
    doc = {"baseline": {"name": "baseline", "mean": 54.2, "n": 5, "source": "runs"}, "noise": {"s": 1.4, "nu": 4},
           "variants": [{**ENTRY, "forecast": {"mean": 55.1, "low80": 53.9, "high80": 56.3, "p_best": 0.6}},
                        {**ENTRY, "name": "b", "variants": ["b"], "forecast": {"mean": None}},
                        {**ENTRY, "name": "screen", "partial": True, "note": "15 x 4"}],
           "advice": [{"action": "repeat", "text": "repeat a: +0.4 points for 40 min"}]}
    html = _render("compare", doc)
    assert "55.10 <span class=\"note\">[53.90, 56.30]</span>" in html and "P(best) 0.60" in html
    assert re.search(r'<ol id="advice"><li>repeat a: \+0.4 points for 40 min</li></ol>', html)
    assert html.index("Partial screens") < html.index("screen</td>")  # a partial run is listed apart
    # without them (the report of today's main): no column content, no section
    plain = _render("compare", {**doc, "variants": [ENTRY], "advice": []})
    assert "Next actions" not in plain and 'class="forecast"></td>' in plain


def test_interval_bar_sits_on_the_shared_axis():
    lo, hi = svg.axis_range([-2.0, 6.0])  # padded by 10% of the span either side
    assert (lo, hi) == (-2.8, 6.8)
    bar = svg.interval_bar(-2.0, 6.0, 2.0, lo, hi, width=960)
    zero, start, width, tick = (float(x) for x in re.search(
        r'<line x1="([\d.]+)".*<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)".*<line x1="([\d.]+)"', bar).groups())
    assert (zero, start, width, tick) == (280.0, 80.0, 800.0, 480.0)  # 0, -2..6 and 2 at 100 px per point


def test_text_from_the_store_is_escaped_in_svg():
    strip = svg.problem_strip([{"id": "<b>1</b>", "correct": 3, "samples": 4}])
    assert "<b>" not in strip and "&lt;b&gt;1&lt;/b&gt;: 3/4" in strip


def test_compare_page_leads_with_the_answer_in_compares_order():
    """The page follows `opsdctl compare`: what to submit now, what to run next, the table, then
    the notes (the next actions in full, the noise)."""
    top = {"action": "repeat", "variant": "a", "text": "one more run of a: +0.40 expected official points, 40 min"}
    doc = {"baseline": {"name": "baseline", "mean": 54.2, "n": 5, "source": "runs"}, "noise": {"s": 1.4, "nu": 4},
           "variants": [{**ENTRY, "forecast": {"mean": 55.1, "low80": 53.9, "high80": 56.3, "p_best": 0.6}}],
           "advice": [top], "run_next": top, "notes": ["a note"],
           "submit": {"leader": "a", "variant": "a", "verdict": "undecided", "rule": "r",
                      "forecast": {"mean": 55.1, "low80": 53.9, "high80": 56.3, "p_best": 0.6}}}
    html = _render("compare", doc)
    at = [html.index(x) for x in ('id="submit"', 'id="run-next"', 'id="compare"', 'id="advice"', "<h2>Noise</h2>",
                                  "a note")]
    assert at == sorted(at)
    assert 'Submit now:</b> <a href="/variant/a">a</a>, forecast 55.10' in html and "one more run of a" in html
    released = _render("compare", {**doc, "submit": {**doc["submit"], "variant": None, "leader": "baseline"},
                                   "run_next": None, "advice": []})
    assert "the released recipe (baseline)" in released and "no ranking yet" in released
