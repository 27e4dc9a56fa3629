"""Scores and progress that cannot be wrong, checked in process: an impossible FINAL line or
result.json is refused with the line quoted; training steps come from the Trainer's bar or an
explicit step field, never from counting loss lines."""

from __future__ import annotations

import json

import pytest
from support.stage_output import FINAL_LINE, result_json

from opsdctl.run import results, score_checks


# --- the checks, in-process -----------------------------------------------------------------


@pytest.mark.parametrize("pct, c, s, n, needle", [
    ("12.00%", 190, 360, 30, "disagrees with its counts: 190/360 is 52.78%"),
    ("112.00%", 403, 360, 30, "above 100%"),
    ("100.00%", 361, 360, 30, "more than all of them"),
    ("0.00%", 0, 0, 0, "nothing was evaluated"),
    ("52.7%", 190, 360, 30, "disagrees"),  # 52.78 rounds to 52.8 at one decimal
    ("1.2.3%", 190, 360, 30, "not a number"),
])
def test_impossible_final_lines_are_refused_with_the_line_quoted(pct, c, s, n, needle):
    line = FINAL_LINE.format(pct, c, s, n)
    with pytest.raises(results.ResultError) as exc:
        results.parse_final_line(f"noise\r{line}\nmore noise\n")
    assert needle in str(exc.value) and repr(line) in str(exc.value)


def test_possible_final_lines_pass_whatever_their_rounding():
    for pct in ("52.78%", "52.8%", "53%", "52.777778%"):
        r = results.parse_final_line(FINAL_LINE.format(pct, 190, 360, 30))
        assert r.n_correct == 190 and r.avg_at_k == float(pct[:-1])
    assert results.parse_final_line(FINAL_LINE.format("100.00%", 360, 360, 30)).avg_at_k == 100.0


def test_a_final_line_with_counts_beyond_64_bits_is_refused_not_a_crash():
    with pytest.raises(results.ResultError, match="too large"):
        results.parse_final_line(FINAL_LINE.format("52.78%", "1" * 5000, 360, 30))


@pytest.mark.parametrize("over, needle", [
    ({"avg_at_k": 0.12}, "disagrees with the per-problem counts"),
    ({"n_correct": 4}, "n_correct = 4 but the problems sum to 3"),
    ({"n_samples": 5}, "n_samples = 5"),
    ({"problems": [{"id": "a", "correct": 3, "samples": 2}, {"id": "b", "correct": 1, "samples": 2}]}, "correct = 3"),
    ({"problems": [{"id": "a", "correct": -1, "samples": 2}, {"id": "b", "correct": 1, "samples": 2}]}, "correct = -1"),
])
def test_result_json_counts_must_agree(over, needle):
    with pytest.raises(results.ResultError) as exc:
        results.parse_result_json(result_json(**over))
    assert needle in str(exc.value)


def test_result_json_rounded_to_four_decimals_passes():
    doc = {"schema": 1, "k": 12, "avg_at_k": 0.5278, "n_problems": 1, "n_correct": 190, "n_samples": 360,
           "problems": [{"id": "p", "correct": 190, "samples": 360}]}
    assert results.parse_result_json(json.dumps(doc)).avg_at_k == pytest.approx(52.78)
    assert score_checks.counts_problem(0.5278, doc["problems"]) is None


def test_impossible_look_counts_give_no_partial_score():
    rec = {"look_k": 4, "problems": [{"id": "a", "correct": 5, "samples": 4}]}
    assert results.partial_from_progress(rec) is None


def test_steps_come_from_the_bar_never_from_counting_dict_lines():
    lines = "".join(
        f"\r{s:3d}%|#| {s}/100 [00:{s:02d}<00:10, 1.00s/it]" + ("\n{'loss': -0.001, 'learning_rate': 5e-06, 'epoch': 0.1}\n" if s % 10 == 0 else "")
        for s in range(1, 33))
    adapter = results.LogProgress("train", max_steps=100)
    recs = adapter.feed(lines + "\n")
    assert results.progress_from_record(recs[-1]).text() == "step 32/100"
    summary = results.summarize_log(lines + "\n{'train_runtime': 64.0, 'train_steps_per_second': 0.5, 'train_loss': -0.001}\n")
    assert summary.steps == 32 and summary.step_seconds == pytest.approx(2.0)
    assert [p["step"] for p in summary.curve] == [10, 20, 30]
    # a flood of loss lines without a bar is no step at all
    flood = "{'loss': 0.0, 'epoch': 0.0}\n" * 5000
    assert results.LogProgress("train", max_steps=100).feed(flood) == []
    assert results.summarize_log(flood).steps is None
    # an explicit step field counts
    rec = results.LogProgress("train", max_steps=100).feed("{'loss': 0.1, 'step': 40, 'epoch': 0.1}\n")[-1]
    assert results.progress_from_record(rec).text() == "step 40/100"
