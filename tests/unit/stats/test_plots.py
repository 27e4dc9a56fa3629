"""opsdctl.stats.plots: the compare PNG is written and is a real PNG, for every kind of report."""

import json
import struct
import sys

import numpy as np
import pytest

from opsdctl.stats.compare import Reference, RunRecord, build_report
from opsdctl.stats.plots import plot_compare

REF = Reference(mean=54.22, sd=1.48, n=5)


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _realistic():
    rng = np.random.default_rng(5)
    runs = [RunRecord("baseline", i, float(y), 12, 30, None, None, False) for i, y in enumerate(rng.normal(54.22, 1.48, 5))]
    for j, (name, mu, n) in enumerate([("token-clip", 58.5, 3), ("cosine-lr", 55.0, 2), ("drop-easy-math", 52.0, 1)]):
        runs += [RunRecord(name, 10 * (j + 1) + i, float(y), 12, 30, None, None, False)
                 for i, y in enumerate(rng.normal(mu, 1.48, n))]
    runs.append(RunRecord("left-pad", 99, 47.0, 4, 15, None, None, True))  # partial: not plotted
    return build_report(runs, baseline="baseline", reference=REF)


@pytest.mark.parametrize(
    "report",
    [
        pytest.param(_realistic(), id="realistic"),
        pytest.param(build_report([RunRecord("a", 1, 57.0, 12, 30, None, None, False)], baseline="baseline",
                                  reference=REF), id="reference-baseline"),
        pytest.param(build_report([RunRecord("b", 1, 54.0, 12, 30, None, None, False),
                                   RunRecord("a", 2, 57.0, 12, 30, None, None, False)], baseline="b",
                                  reference=None), id="no-noise-estimate"),
        pytest.param(build_report([], baseline="baseline", reference=REF), id="empty"),
    ],
)
def test_plot_writes_a_png(tmp_path, report):
    out = plot_compare(report, tmp_path / "cmp.png")
    assert json.loads(json.dumps(report.to_json()))  # and the report prints as plain JSON
    w, h = _png_size(out)
    assert w >= 600 and 400 <= h <= 1000
    assert out.stat().st_size > 5000


def test_many_candidates_stay_a_readable_size(tmp_path):
    runs = [RunRecord("baseline", i, 54.0 + i % 3, 12, 30, None, None, False) for i in range(5)]
    runs += [RunRecord(f"candidate-number-{j}", 10 + j, 52.0 + j, 12, 30, None, None, False) for j in range(12)]
    w, _ = _png_size(plot_compare(build_report(runs, baseline="baseline", reference=REF), tmp_path / "m.png"))
    assert w <= 11 * 130 + 1


def test_plot_leaves_no_pyplot_state(tmp_path):
    plot_compare(_realistic(), tmp_path / "p.png")
    assert "matplotlib.pyplot" not in sys.modules or not __import__("matplotlib.pyplot").pyplot.get_fignums()
