"""`requeue CHAIN --reeval`: a scored checkpoint evaluated again with fresh samples (the next draw),
pooled by compare with its first eval as one run of that training. Real subprocess stages, SQLite;
the eval command is `python -m eval` (the form of our evaluator) run by a shim over the emulator."""

from __future__ import annotations

import shutil
import sys

from conftest import FAKE_EVAL, default_config

PY = sys.executable


def our_evaluator_shim(ws) -> str:
    """`python -m eval` in the workspace runs the emulator, which honours OPSD_EVAL_DRAW as ours
    does; returns that eval command."""
    shim = ws.root / "eval"
    shim.mkdir()
    (shim / "__main__.py").write_text(
        f"import runpy, sys\nsys.argv[0] = {str(FAKE_EVAL)!r}\nrunpy.run_path({str(FAKE_EVAL)!r}, run_name='__main__')\n")
    return f"{PY} -m eval {{checkpoint}} --output-dir {{stage_dir}}"


def _our_evaluator(ws) -> None:
    ws.write_config(default_config(eval=our_evaluator_shim(ws)))


def test_reeval_draws_fresh_samples_and_compare_pools_them_as_one_run(ws):
    _our_evaluator(ws)
    ws.cli("queue", "token-clip", "--seed", "5")
    ws.run("worker", "--drain")
    first = ws.cli_json("compare")
    (tc,) = [e for e in first["variants"] if e["name"] == "token-clip"]
    assert tc["n"] == 1 and tc["k"] == 4

    new = ws.cli_json("requeue", "1", "--reeval")
    assert new["eval_only"] and new["eval_draw"] == 1 and new["seed"] == 5 and new["partial"] is None
    assert "fresh samples (draw 2" in ws.cli("requeue", "1", "--reeval").stdout  # queued behind it
    assert [ws.chains()[i]["eval_draw"] for i in (1, 2, 3)] == [0, 1, 2]
    assert "(re-eval, draw 1)" in ws.cli("status").stdout
    ws.run("worker", "--drain")
    chains = ws.chains()
    assert [chains[i]["state"] for i in (2, 3)] == ["succeeded", "succeeded"]
    assert ws.sql("select eval_draw from chain order by id") == [(0,), (1,), (2,)]
    assert ws.sql("select count(*) from stage where name = 'train'") == [(1,)]  # nothing trained again

    counts = [[p["correct"] for p in r["problems"]] for r in
              (ws.cli_json("show", "token-clip")["runs"][i] for i in range(3))]
    assert counts[0] != counts[1] != counts[2]  # each draw is other samples
    report = ws.cli_json("compare")
    (tc,) = [e for e in report["variants"] if e["name"] == "token-clip"]
    assert tc["n"] == 1 and tc["chain_ids"] == [1]  # one training, one run ...
    pooled = [sum(c) for c in zip(*counts)]
    assert abs(tc["runs"][0] - 100.0 * sum(pooled) / (len(pooled) * 12)) < 1e-6  # ... of avg@12 over the three

    # the same samples again stay refused, with the way to fresh ones
    proc = ws.cli("requeue", "1", "--eval-only", check=False)
    assert proc.returncode == 2 and "requeue 1 --reeval" in proc.stderr


def test_reeval_refusals_say_why_in_one_line_and_write_nothing(ws):
    _our_evaluator(ws)
    ws.cli("queue", "token-clip")
    ws.run("worker", "--drain")
    ws.write_config()  # from here on, the emulator as a user's own eval script
    ws.cli("queue", "token-clip")
    ws.run("worker", "--drain")
    before = ws.sql("select count(*) from chain")
    proc = ws.cli("requeue", "2", "--reeval", check=False)
    assert proc.returncode == 2 and "your own command" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    for extra in (("--eval-only",), ("--partial", "3x2"), ("--current-commands",)):
        proc = ws.cli("requeue", "1", "--reeval", *extra, check=False)
        assert proc.returncode == 2 and "drop --eval-only" in proc.stderr, extra
    shutil.rmtree(ws.runs / "1" / "train" / "checkpoint-final")
    proc = ws.cli("requeue", "1", "--reeval", check=False)
    assert proc.returncode == 2 and "is gone" in proc.stderr
    assert ws.sql("select count(*) from chain") == before


def test_the_worker_facts_offer_and_queue_re_evals_of_our_evaluators_checkpoints_only(ws):
    """What auto-repeat reads and writes (plan.store_facts.StoreFacts): the trainings it may re-evaluate and
    the re-eval chain, marked as auto-repeat's, that the worker then runs like any chain."""
    from opsdctl.config import load_config
    from opsdctl.plan.gate import AUTO_REPEAT_REASON
    from opsdctl.plan.store_facts import StoreFacts
    from opsdctl.plan.reeval import Target
    from opsdctl.store.engine import open_store

    _our_evaluator(ws)
    ws.cli("queue", "token-clip", "--repeats", "2")
    ws.run("worker", "--drain")
    ws.write_config()  # a user's own eval script from here on: its chains cannot be re-evaluated
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain")
    cfg = load_config(ws.root / "opsdctl.toml")
    facts = StoreFacts(cfg, open_store(cfg.db))
    assert facts.reeval_targets(facts.runs()) == {"token-clip": Target("token-clip", 2, 1)}  # the latest of two
    info = facts.queue_reeval(2, "advise: re-evaluate")
    assert info.eval_only and info.auto and info.variant == "token-clip"
    assert ws.sql("select eval_draw, trained_by, reason from chain where id = ?", info.chain_id) == [
        (1, 2, f"{AUTO_REPEAT_REASON}advise: re-evaluate")]
    assert facts.queue_reeval(3, "advise") is None  # the baseline's: a user's script
    assert facts.latest_training().chain_id == 3  # what a repeat is priced like when nothing is queued
    ws.run("worker", "--drain")
    assert facts.reeval_targets(facts.runs()) == {"token-clip": Target("token-clip", 1, 1)}  # now the one with fewer
    (tc,) = [e for e in ws.cli_json("compare")["variants"] if e["name"] == "token-clip"]
    assert tc["n"] == 2 and tc["chain_ids"] == [1, 2]


def test_the_store_gate_counts_a_running_chain_as_an_observation_on_its_way(ws):
    """The worker's gate over the store (StoreFacts.running): once token-clip's first chain is
    claimed, a free slot takes cosine's first run, not token-clip's queued second chain."""
    from opsdctl.config import load_config
    from opsdctl.daemon.worker import StoreQueue
    from opsdctl.plan.planner import make_planner_gate, with_overrides
    from opsdctl.store.engine import open_store

    ws.cli("queue", "token-clip", "--repeats", "2")
    ws.cli("queue", "cosine")
    cfg = with_overrides(load_config(ws.root / "opsdctl.toml"), policy_name="adaptive")
    store = open_store(cfg.db)
    gate, queue = make_planner_gate(cfg, store=store), StoreQueue(store)

    def order():
        return [(c.chain_id, c.variant) for c in gate.order(queue.queued(), dry_run=True)]

    assert order()[0] == (1, "token-clip")  # nothing runs: the queue's first run first
    assert queue.claim(1)
    assert order() == [(3, "cosine"), (2, "token-clip")]  # token-clip's first run is on its way
