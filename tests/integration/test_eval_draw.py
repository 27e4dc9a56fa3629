"""A re-evaluation's draw reaches its eval stage through the real worker: the eval stage of a chain
with eval_draw 2 gets OPSD_EVAL_DRAW=2; a draw-0 chain's eval and every train stage get none, even
when the worker's own environment holds one. Real worker, real subprocess stages, real SQLite.
(Our evaluator honouring it: test_eval_e2e.py.)"""

from __future__ import annotations

import json
import sqlite3
import sys

from conftest import default_config

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
