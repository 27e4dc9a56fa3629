"""Scores and progress that cannot be wrong.

An impossible FINAL line or result.json fails its chain with the line quoted; training steps
come from the Trainer's bar or an explicit step field, never from counting loss lines. The
end-to-end tests drive the worker in a real subprocess with stand-in `train_capped.sh` /
`dev_eval.sh` scripts printing the domain.md log formats.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from conftest import FAKE_TRAIN
from opsdctl.run import results, score_checks

LINE = "FINAL avg@12 accuracy: {} ({}/{} solutions correct on {} problems)"


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
    line = LINE.format(pct, c, s, n)
    with pytest.raises(results.ResultError) as exc:
        results.parse_final_line(f"noise\r{line}\nmore noise\n")
    assert needle in str(exc.value) and repr(line) in str(exc.value)


def test_possible_final_lines_pass_whatever_their_rounding():
    for pct in ("52.78%", "52.8%", "53%", "52.777778%"):
        r = results.parse_final_line(LINE.format(pct, 190, 360, 30))
        assert r.n_correct == 190 and r.avg_at_k == float(pct[:-1])
    assert results.parse_final_line(LINE.format("100.00%", 360, 360, 30)).avg_at_k == 100.0


def test_a_final_line_with_counts_beyond_64_bits_is_refused_not_a_crash():
    with pytest.raises(results.ResultError, match="too large"):
        results.parse_final_line(LINE.format("52.78%", "1" * 5000, 360, 30))


def _result(**over):
    doc = {"schema": 1, "k": 2, "avg_at_k": 0.75, "n_problems": 2,
           "problems": [{"id": "a", "correct": 2, "samples": 2}, {"id": "b", "correct": 1, "samples": 2}]}
    doc.update(over)
    return json.dumps(doc)


@pytest.mark.parametrize("over, needle", [
    ({"avg_at_k": 0.12}, "disagrees with the per-problem counts"),
    ({"n_correct": 4}, "n_correct = 4 but the problems sum to 3"),
    ({"n_samples": 5}, "n_samples = 5"),
    ({"problems": [{"id": "a", "correct": 3, "samples": 2}, {"id": "b", "correct": 1, "samples": 2}]}, "correct = 3"),
    ({"problems": [{"id": "a", "correct": -1, "samples": 2}, {"id": "b", "correct": 1, "samples": 2}]}, "correct = -1"),
])
def test_result_json_counts_must_agree(over, needle):
    with pytest.raises(results.ResultError) as exc:
        results.parse_result_json(_result(**over))
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


# --- end to end: a real worker, stand-in user scripts ---------------------------------------


def _user_scripts(ws, train_env: str = ""):
    """train_capped.sh (FAKE_* behaviour per seed) and dev_eval.sh, which prints lines/<seed>.txt
    and copies lines/<seed>.json to result.json when there is one."""
    workspace = ws.root / "workspace"
    (workspace / "lines").mkdir(parents=True)
    (workspace / "train_capped.sh").write_text(textwrap.dedent(f"""\
        #!/bin/bash
        set -euo pipefail
        export FAKE_CHECKPOINT="$OUT_DIR/capped_seed$SEED/checkpoint-100" FAKE_NO_FILES=1
        {train_env}
        exec {sys.executable} {FAKE_TRAIN}
    """))
    (workspace / "dev_eval.sh").write_text(textwrap.dedent("""\
        #!/bin/bash
        set -euo pipefail
        here="$(dirname "$0")"
        echo "Processed prompts: 100%|##########| 84/84 [00:01<00:00, 1.00it/s]"
        if [ -f "$here/lines/$2.json" ]; then cp "$here/lines/$2.json" "$OPSDCTL_STAGE_DIR/result.json"; fi
        cat "$here/lines/$2.txt"
    """))
    ws.write_config(
        train=f"SEED={{seed}} OUT_DIR={{stage_dir}} bash {workspace / 'train_capped.sh'}",
        eval=f"bash {workspace / 'dev_eval.sh'} {{checkpoint}} {{seed}}",
        checkpoint="{stage_dir}/capped_seed{seed}/checkpoint-100",
    )
    return workspace / "lines"


def test_impossible_scores_fail_their_chains_with_the_line_quoted(ws):
    lines = _user_scripts(ws)
    bad = {0: LINE.format("12.00%", 190, 360, 30), 1: LINE.format("112.00%", 403, 360, 30),
           2: LINE.format("100.00%", 361, 360, 30), 3: LINE.format("52.78%", 190, 360, 30)}
    for seed, line in bad.items():
        (lines / f"{seed}.txt").write_text(f"{line}\n")
    # seed 4: a result.json whose avg_at_k disagrees with its counts (the FINAL line is fine)
    (lines / "4.txt").write_text(LINE.format("50.00%", 2, 4, 2) + "\n")
    (lines / "4.json").write_text(_result(avg_at_k=0.12))
    ws.cli("queue", "baseline", "--repeats", "5")
    ws.run("worker", "--drain")
    chains = ws.chains()
    for seed in (0, 1, 2):
        c = chains[seed + 1]
        assert c["state"] == "failed", c
        assert "impossible FINAL line" in c["reason"] and repr(bad[seed]) in c["reason"], c["reason"]
    assert chains[4]["state"] == "succeeded" and chains[4]["score"] == pytest.approx(52.78)
    assert chains[5]["state"] == "failed" and "disagrees with the per-problem counts" in chains[5]["reason"]
    assert ws.sql("select chain_id from score") == [(4,)]  # nothing impossible reached the store


def test_status_and_show_steps_with_logging_steps_10_and_a_flood(ws):
    """logging_steps = 10: one dict line per 10 steps; with the bar the step is right, without
    it there is no step (never "step 3/100" at step 32); a flood of loss lines is no step either."""
    lines = _user_scripts(ws, train_env=textwrap.dedent("""\
        export FAKE_STEPS=32 FAKE_LOGGING_STEPS=10 FAKE_STEP_SECONDS=0.02
        case "$SEED" in
          0) export FAKE_BAR=1 ;;
          2) export FAKE_FLOOD=3000 ;;
        esac"""))
    for seed in (0, 1, 2):
        (lines / f"{seed}.txt").write_text(LINE.format("52.78%", 190, 360, 30) + "\n")
    ws.cli("queue", "baseline", "--repeats", "3")
    ws.run("worker", "--drain")
    rows = {cid: (steps, step_s, json.loads(prog) if prog else None) for cid, steps, step_s, prog in ws.sql(
        "select t.chain_id, t.steps, t.step_seconds, s.progress from train_stats t "
        "join stage s on s.chain_id = t.chain_id and s.name = 'train'")}
    steps, step_s, progress = rows[1]
    assert steps == 32 and step_s == pytest.approx(0.64 / 32) and progress["text"] == "step 32/32"
    for cid in (2, 3):  # no bar: no step count, the Trainer's own steps per second
        steps, step_s, progress = rows[cid]
        assert steps is None and progress is None, rows[cid]
        assert step_s == pytest.approx(1 / round(32 / 0.64, 3))
    show = ws.cli_json("show", "baseline")
    assert sorted(str(r["train"]["steps"]) for r in show["runs"]) == ["32", "None", "None"]
