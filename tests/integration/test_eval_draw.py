"""A re-evaluation's draw reaches its eval stage through the real worker: the eval stage of a chain
with eval_draw 2 gets OPSD_EVAL_DRAW=2; a draw-0 chain's eval and every train stage get none, even
when the worker's own environment holds one; and `requeue --reeval` with our evaluator samples
afresh. Real worker, real subprocess stages, real SQLite. (Our evaluator alone: test_eval_e2e.py.)"""

from __future__ import annotations

import json
import sqlite3
import sys

import pytest
from conftest import default_config
from fixtures_tiny import tiny_assets  # noqa: F401  (pytest fixture)

from eval import plan

DUMP = "import json, os, sys; json.dump(dict(os.environ), open(os.path.join(sys.argv[1], 'env.json'), 'w'))"
FINAL = "FINAL avg@4 accuracy: 50.00% (2/4 solutions correct on 1 problems)"


def test_only_a_re_evaluations_eval_stage_gets_its_draw(ws):
    dump = f"{sys.executable} -c {json.dumps(DUMP)} {{stage_dir}}"
    ws.write_config(default_config(train=f"{dump} && mkdir {{stage_dir}}/checkpoint-final",
                                   eval=f"{dump} && echo '{FINAL}'"))
    ws.cli("queue", "baseline", "--repeats", "2")
    with sqlite3.connect(ws.db) as con:  # what a re-evaluation's row holds (the store's column)
        con.execute("update chain set eval_draw = 2 where id = 2")
    ws.run("worker", "--drain", env={"OPSD_EVAL_DRAW": "7"})  # one left in the worker's shell
    assert ws.sql("select id, state from chain order by id") == [(1, "succeeded"), (2, "succeeded")]

    def env(chain: int, stage: str) -> dict:
        return json.loads((ws.runs / str(chain) / stage / "env.json").read_text())

    assert env(2, "eval")["OPSD_EVAL_DRAW"] == "2"
    assert "OPSD_EVAL_DRAW" not in env(1, "eval")
    assert "OPSD_EVAL_DRAW" not in env(1, "train") and "OPSD_EVAL_DRAW" not in env(2, "train")


@pytest.mark.slow
def test_requeue_reeval_draws_fresh_samples_with_our_evaluator(ws, tiny_assets, tmp_path):  # noqa: F811
    """End to end: a training scored in full by our evaluator (`python -m eval` on the tiny profile,
    a 2-problem benchmark), `requeue 1 --reeval`, the worker again: the re-eval is draw 1, sampled from
    draw_seed(seed, 1), on the same problems x k, every sample from another seed than the first eval's."""
    bench = tmp_path / "bench2.jsonl"
    bench.write_text("".join(line + "\n" for line in tiny_assets.bench_file.read_text().splitlines()[:2]))
    evaluator = (f"{sys.executable} -m eval --profile tiny --adapter base --gpus '' --benchmark {bench} "
                 "--output-dir {stage_dir}")
    ws.write_config(default_config(eval=evaluator))
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain", timeout=300)
    ws.cli("requeue", "1", "--reeval")
    ws.run("worker", "--drain", timeout=300)
    assert ws.sql("select id, state, eval_draw from chain order by id") == [(1, "succeeded", 0), (2, "succeeded", 1)]

    def outputs(chain: int) -> tuple[dict, dict]:
        d = ws.runs / str(chain) / "eval"
        recs = [json.loads(line) for line in (d / "samples.jsonl").read_text().splitlines()]
        return json.loads((d / "settings.json").read_text()), {(r["id"], r["sample"]): r["seed"] for r in recs}

    (first, first_seeds), (again, again_seeds) = outputs(1), outputs(2)
    assert (first["draw"], again["draw"]) == (0, 1) and again["seed"] == plan.draw_seed(first["seed"], 1)
    assert set(again_seeds) == set(first_seeds) and len(first_seeds) == 2 * first["k"]
    assert all(again_seeds[key] != first_seeds[key] for key in first_seeds)
    # compare pools the two evals of one training into one run: the mean of two equal-sized draws
    scores = [r["score"] for r in sorted(ws.cli_json("show", "baseline")["runs"], key=lambda r: r["chain_id"])]
    baseline = ws.cli_json("compare")["baseline"]
    assert baseline["n"] == 1 and baseline["runs"] == [pytest.approx(sum(scores) / 2, abs=0.01)], (baseline, scores)
