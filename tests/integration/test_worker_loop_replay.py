"""The stand-in session replayed through the real worker: the researchers' own `train_capped.sh`
and a `dev_eval.sh` with fixed scores, a countdown file, `worker --policy adaptive --auto-repeat`.
The worker may not idle while a positive-value action fits, may not start a chain it queued
itself before a chain the user queued earlier, and `status` shows the order it follows."""

from __future__ import annotations

import re
import statistics
import sys
import textwrap
import threading
import time
from opsdctl.store.open_read import open_reader

from conftest import STAGES, default_config, stop_process, wait_for

# fixed scores per variant: solutions correct of 360, one per evaluation in turn
# (about 54.2%; true effects lr-1e5 +3 points, cosine 0, token-clip -2)
SCORES = {
    "baseline": [195, 197, 194, 196, 194, 196, 194, 197, 195, 195] * 3,
    "lr-1e5": [206, 205, 207, 205, 207, 206, 205, 207] * 4,
    "cosine": [196, 194, 197, 194, 196, 195] * 5,
    "token-clip": [188, 189, 187, 188, 187] * 6,
}
IDLE_MAX_S = 10.0


def _standin(ws, budget: str, planner: str) -> None:
    """The workspace: train_capped.sh (SEED, OUT_DIR), dev_eval.sh printing the variant's next
    fixed score as the FINAL line, the published reference, and four recipes."""
    scores = ws.root / "scores"
    scores.mkdir()
    for name, values in SCORES.items():
        (scores / name).write_text("".join(f"{v}\n" for v in values))
    eval_sh = ws.root / "dev_eval.sh"
    eval_sh.write_text(textwrap.dedent("""\
        #!/bin/bash
        # dev_eval.sh CHECKPOINT VARIANT: the variant's next fixed score (a counter file per variant)
        set -eu
        [ -d "$1" ] || { echo "no checkpoint at $1" >&2; exit 1; }
        n=$(cat "scores/$2.n" 2>/dev/null || echo 0)
        echo $((n + 1)) > "scores/$2.n"
        correct=$(sed -n "$((n + 1))p" "scores/$2")
        pct=$(awk -v c="$correct" 'BEGIN { printf "%.2f", c / 3.6 }')
        echo "FINAL avg@12 accuracy: ${pct}% (${correct}/360 solutions correct on 30 problems)"
    """))
    text = default_config(
        train=f"SEED={{seed}} OUT_DIR={{stage_dir}} bash {STAGES / 'train_capped.sh'}",
        eval=f"bash {eval_sh} {{checkpoint}} {{variant}}",
        checkpoint="{stage_dir}/capped_seed{seed}/checkpoint-100",
        budget=budget,
    )
    text = text.replace("[stages.eval]\n", 'recipe_env_path = "submission/recipe.env"\n\n[stages.eval]\n')
    text = text.replace('variant = "baseline"\n', 'variant = "baseline"\nreference = { mean = 54.22, sd = 1.48, n = 5 }\n')
    ws.write_config(text + "\n[planner]\n" + planner + "train_minutes = 0.01\neval_minutes = 0.01\n")
    ws.recipe("lr-1e5", 'name = "lr-1e5"\nextends = "baseline"\n[hparams]\nlearning_rate = 1e-5\n')
    ws.env = {"STANDIN_SLEEP": "0.3"}


def _queue_user_chains(ws) -> None:
    for name in ("baseline", "lr-1e5", "cosine", "token-clip", "baseline"):
        ws.cli("queue", name)


def _chain_rows(ws):
    return ws.sql("select id, state, reason, started_at, finished_at from chain order by id")


def _ts(text):
    import datetime as dt

    return dt.datetime.fromisoformat(str(text)).replace(tzinfo=dt.timezone.utc).timestamp()


def test_standin_session_no_idle_user_queue_first(ws):
    budget_s = 30.0
    timer = ws.root / ".timer"
    timer.mkdir()
    (timer / "remaining_secs").write_text(f"{int(budget_s)}\n")
    _standin(ws, 'remaining_file = ".timer/remaining_secs"\nmargin_minutes = 0',
             'policy = "adaptive"\nauto_repeat = true\n')
    _queue_user_chains(ws)
    status_before = ws.status()
    t0 = time.time()
    done = threading.Event()

    def countdown():  # the workspace's real countdown, one integer a write
        while not done.is_set():
            left = max(0, int(budget_s - (time.time() - t0)))
            (timer / "remaining_secs.tmp").write_text(f"{left}\n")
            (timer / "remaining_secs.tmp").replace(timer / "remaining_secs")
            time.sleep(0.2)

    th = threading.Thread(target=countdown, daemon=True)
    th.start()
    proc = ws.popen("worker")
    try:
        time.sleep(budget_s + 2.0)
    finally:
        stop_process(proc)
        done.set()
        th.join()
    log = proc.stdout.read() if proc.stdout else ""
    rows = _chain_rows(ws)
    started = sorted((r for r in rows if r[3] is not None), key=lambda r: _ts(r[3]))
    assert len(started) >= 8, (rows, log)

    # the user's queue first: no auto-repeat chain started before a chain the user queued earlier
    auto_ids = {int(m) for m in re.findall(r"auto-repeat: queued chain (\d+)", log)}
    user_ids = {r[0] for r in rows} - auto_ids
    order = [r[0] for r in started]
    for i, cid in enumerate(order):
        if cid not in user_ids:
            earlier_users = {u for u in user_ids if u < cid and any(r[0] == u and r[3] for r in rows)}
            assert earlier_users <= set(order[:i]), (order, user_ids)
    assert auto_ids & set(order), log  # auto-repeat did queue chains after them

    # status named the chain the worker started first, and auto-repeat after the user's queue
    queued = [c["chain_id"] for c in status_before["chains"] if c["state"] == "queued"]
    assert order[0] == queued[0] and set(order[:len(queued)]) == set(queued), (queued, order)
    assert status_before["planner"]["auto_repeat_next"]["at"] == "after the queued chains"

    # no idle spell over 10 s while a chain fits: between chains, and at the end
    ends = [_ts(r[4]) for r in started if r[4] is not None]
    for (a, b) in zip(started, started[1:]):
        if a[4] is not None:
            assert _ts(b[3]) - _ts(a[4]) <= IDLE_MAX_S, (a, b)
    chain_s = statistics.median(b - a for a, b in ((_ts(r[3]), _ts(r[4])) for r in started if r[4] is not None))
    tail_left = budget_s - (max(ends) - t0)
    if tail_left > IDLE_MAX_S + 2 * chain_s:  # the worker idled with chains' time left: nothing of value fitted
        assert not _next_fits(ws, chain_s, tail_left - IDLE_MAX_S), log


def _next_fits(ws, chain_s: float, left_s: float) -> list[str]:
    """The actions the worker can take that `opsdctl advise` (compare's `Next:` line) ranks above
    `stop` and that fit in left_s (the positive-value actions users see)."""
    from opsdctl.config import load_config
    from opsdctl.plan import advise
    from opsdctl.stats.compare import build_report
    from opsdctl.stats.scores import run_records
    from opsdctl.store.engine import open_store

    cfg = load_config(ws.root / "opsdctl.toml")
    store = open_store(f"sqlite:///{ws.db}")
    rep = build_report(run_records(open_reader(store), baseline="baseline"), baseline="baseline", reference=cfg.reference)
    out = []
    for a in advise.from_report(rep, advise.Costs(chain_s, chain_s, chain_s), left_s):
        if a.action == advise.Action.STOP:
            break
        if a.action in (advise.Action.REPEAT, advise.Action.BASELINE):
            out.append(a.variant)
    return out


def test_status_order_is_the_order_the_worker_starts(ws):
    """Step by step (one chain per worker run, the same Worker class and loop): before each
    start, `status` names the chain the worker starts next (a queued chain, or the variant
    auto-repeat inserts after the queue)."""
    import os

    from opsdctl.config import load_config
    from opsdctl.daemon.worker import Worker
    from opsdctl.store.engine import open_store

    _standin(ws, "", 'policy = "adaptive"\nauto_repeat = true\n')
    _queue_user_chains(ws)
    for _ in range(8):
        st = ws.status()
        queued = [c for c in st["chains"] if c["state"] == "queued"]
        plan = st["planner"]
        auto = plan["auto_repeat_next"]
        before = {r[0] for r in _chain_rows(ws)}
        cwd = os.getcwd()
        os.chdir(ws.root)
        try:
            cfg = load_config(ws.root / "opsdctl.toml")
            ran = Worker(cfg, open_store(cfg.db), drain=True, report=lambda m: None, max_chains=1).run()
        finally:
            os.chdir(cwd)
        rows = _chain_rows(ws)
        last = max((r for r in rows if r[3] is not None), key=lambda r: (_ts(r[3]), r[0]))
        if not queued and auto is None:
            assert ran == 0  # nothing planned: nothing started
            break
        if queued:
            assert last[0] == queued[0]["chain_id"], (queued, last)
        else:
            assert last[0] not in before and auto["variant"], (auto, last)
    assert len(_chain_rows(ws)) - 5 >= 2  # auto-repeat chains ran after the user's five, where status said
