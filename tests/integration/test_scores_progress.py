"""Scores and progress that cannot be wrong.

An impossible FINAL line or result.json fails its chain with the line quoted; training steps
come from the Trainer's bar or an explicit step field, never from counting loss lines. The
end-to-end tests drive the worker in a real subprocess with stand-in `train_capped.sh` /
`dev_eval.sh` scripts printing the log formats of a research workspace.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from conftest import FAKE_TRAIN
from support.stage_output import FINAL_LINE, result_json


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
    bad = {0: FINAL_LINE.format("12.00%", 190, 360, 30), 1: FINAL_LINE.format("112.00%", 403, 360, 30),
           2: FINAL_LINE.format("100.00%", 361, 360, 30), 3: FINAL_LINE.format("52.78%", 190, 360, 30)}
    for seed, line in bad.items():
        (lines / f"{seed}.txt").write_text(f"{line}\n")
    # seed 4: a result.json whose avg_at_k disagrees with its counts (the FINAL line is fine)
    (lines / "4.txt").write_text(FINAL_LINE.format("50.00%", 2, 4, 2) + "\n")
    (lines / "4.json").write_text(result_json(avg_at_k=0.12))
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
        (lines / f"{seed}.txt").write_text(FINAL_LINE.format("52.78%", 190, 360, 30) + "\n")
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
