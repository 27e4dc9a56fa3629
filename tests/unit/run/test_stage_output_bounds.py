"""The stage-output parsers are bounded in process: a deeply nested JSON file is refused without
recursion, and the log parsers stay linear on very long lines (the end-to-end cases:
tests/integration/test_stage_output_bounds.py)."""

from __future__ import annotations

import time

import pytest

from opsdctl.run import stage_json
from opsdctl.run.results import ResultError, parse_result_json, summarize_log, trainer_bar


def test_nesting_is_refused_without_recursion():
    for doc in ("[" * 200000 + "]" * 200000, '{"a":' * 5000 + "1" + "}" * 5000, "[" * 40 + "]" * 40):
        with pytest.raises(stage_json.StageJsonError, match="nested deeper than"):
            stage_json.loads(doc, "result.json")
        with pytest.raises(ResultError, match="nested deeper than"):
            parse_result_json(doc)
    assert stage_json.loads("[" * 30 + "]" * 30, "x") is not None  # within the bound


def test_log_parsers_are_linear_on_long_lines():
    line = "x" * 200000 + ": 5%| 1/2 ["
    t0 = time.monotonic()
    assert trainer_bar(line) is None  # not a bar: too long to be one
    summarize_log((line + "\n") * 20)
    assert time.monotonic() - t0 < 2.0
