"""Several chains at once on the local GPUs (gpus_per_chain, [stages.<name>] gpus), with four
fake GPUs behind the NVML stand-in: each chain on its own GPUs, at the same time; a stage of its
own GPU count; cancel, SIGTERM, crash recovery and pre-started evals per chain."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import sys
import time

from conftest import FAKE_EVAL, FAKE_TRAIN, default_config, pid_alive, stop_process, wait_for
from support.gpus import h100, write_gpus

PY = sys.executable
TRAIN = (f"echo CVD=$CUDA_VISIBLE_DEVICES GPUS={{gpus}} N={{num_gpus}} && sleep $TRAIN_S && "
         f"{PY} {FAKE_TRAIN} --seed {{seed}} --output-dir {{stage_dir}}")
EVAL = (f"echo CVD=$CUDA_VISIBLE_DEVICES GPUS={{gpus}} N={{num_gpus}} && sleep $EVAL_S && "
        f"{PY} {FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}}")


def _slots(ws, tmp_path, per_chain=None, eval_gpus=None, prestart=False, train=TRAIN, evaluate=EVAL,
           snapshot=False):
    path = tmp_path / "gpus.json"
    write_gpus(path, [h100(i) for i in range(4)])
    extra = f"gpus_per_chain = {per_chain}" if per_chain else ""
    text = default_config(train=train, eval=evaluate, extra=extra, snapshot=snapshot)
    text = text.replace("[gpus]\ndevices = []", "[gpus]\ndevices = [0, 1, 2, 3]\nmin_free_mib = 1000")
    own = (f"gpus = {eval_gpus}\n" if eval_gpus else "") + ("prestart = true\n" if prestart else "")
    text = text.replace("[stages.eval]\n", f"[stages.eval]\n{own}")
    ws.write_config(text)
    ws.env.update({"OPSDCTL_GPU_PROBE": f"fake:{path}", "TRAIN_S": "2", "EVAL_S": "2"})


def _times(ws, chain_id: int, name: str) -> tuple[float, float]:
    """When the stage's process ran: its row's start, plus the seconds until its process exited
    (the row's finished_at comes after its output is read, once its GPUs went back)."""
    start, seconds = ws.sql("select started_at, seconds from stage where chain_id = ? and name = ?", chain_id, name)[0]
    t0 = dt.datetime.fromisoformat(start).replace(tzinfo=dt.timezone.utc).timestamp()
    return t0, t0 + seconds


def _visible(ws, chain_id: int, stage: str) -> str:
    return re.search(r"CVD=(\S*) GPUS=(\S*) N=(\d+)", (ws.runs / str(chain_id) / f"{stage}.log").read_text()).group(0)


def _drain(ws, **env) -> float:
    t0 = time.monotonic()
    res = ws.run("worker", "--drain", env=env, timeout=300)
    return time.monotonic() - t0, res.stdout


def test_four_one_gpu_chains_run_at_once_each_on_its_own_gpu(ws, tmp_path):
    _slots(ws, tmp_path, per_chain=1)
    ws.cli("queue", "baseline")
    one, _ = _drain(ws)
    assert ws.state(1) == "succeeded"
    for _ in range(4):
        ws.cli("queue", "baseline")
    four, out = _drain(ws)
    chains = [2, 3, 4, 5]
    assert [ws.state(c) for c in chains] == ["succeeded"] * 4, out
    assert "up to 4 chains at once in 4 slot(s) of 1 GPU(s): 0, 1, 2, 3" in out
    trains = {c: _times(ws, c, "train") for c in chains}
    assert max(s for s, _ in trains.values()) < min(e for _, e in trains.values()), trains  # all at once
    seen = {c: _visible(ws, c, "train") for c in chains}
    assert sorted(seen.values()) == [f"CVD={g} GPUS={g} N=1" for g in range(4)], seen
    assert all(_visible(ws, c, "eval") == seen[c] for c in chains)  # each chain kept its GPU
    assert sorted(r[0] for r in ws.sql("select gpus from stage where chain_id > 1 and name = 'train'")) == ["0", "1", "2", "3"]
    assert four < 1.5 * one, (one, four)  # one at a time would take about 4x


def test_evals_one_per_gpu_while_the_next_train_waits_for_its_four(ws, tmp_path):
    _slots(ws, tmp_path, eval_gpus=1)
    for _ in range(5):
        ws.cli("queue", "baseline")
    _, out = _drain(ws, TRAIN_S="1", EVAL_S="4")
    assert [ws.state(c) for c in range(1, 6)] == ["succeeded"] * 5, out
    assert all(_visible(ws, c, "train") == "CVD=0,1,2,3 GPUS=0,1,2,3 N=4" for c in range(1, 6))
    evals = {c: _times(ws, c, "eval") for c in range(1, 5)}
    assert max(s for s, _ in evals.values()) < min(e for _, e in evals.values()), evals  # at once
    assert sorted(_visible(ws, c, "eval") for c in range(1, 5)) == [f"CVD={g} GPUS={g} N=1" for g in range(4)]
    trains = sorted(_times(ws, c, "train") for c in range(1, 6))
    assert all(a[1] <= b[0] for a, b in zip(trains, trains[1:])), trains  # four GPUs: one train at a time
    assert _times(ws, 5, "train")[0] >= max(e for _, e in evals.values())  # it waited for all four


def _running_trains(ws, n: int):
    rows = ws.sql("select chain_id, pid from stage where name = 'train' and state = 'running' and pid is not null")
    return rows if len(rows) >= n else None


def test_cancel_one_chain_leaves_the_others_and_sigterm_requeues_every_running_chain(ws, tmp_path):
    _slots(ws, tmp_path, per_chain=1)
    for _ in range(4):
        ws.cli("queue", "baseline")
    worker = ws.popen("worker", env={"TRAIN_S": "120"})
    try:
        rows = wait_for(lambda: _running_trains(ws, 4), timeout=90, what="four trains at once")
        pids = dict(rows)
        ws.cli("cancel", "2")
        wait_for(lambda: not pid_alive(pids[2]), timeout=30, what="chain 2's train to stop")
        assert ws.state(2) == "cancelled"
        time.sleep(1.0)
        assert all(pid_alive(pids[c]) for c in (1, 3, 4)) and all(ws.state(c) == "running" for c in (1, 3, 4))
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=90)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert not any(pid_alive(p) for p in pids.values())
    rows = ws.sql("select id, state, requeued_from from chain order by id")
    assert rows[:4] == [(1, "interrupted", None), (2, "cancelled", None), (3, "interrupted", None),
                        (4, "interrupted", None)], rows
    assert sorted((r[2], r[1]) for r in rows[4:]) == [(1, "queued"), (3, "queued"), (4, "queued")], out
    assert "stopping the running stage(s)" in out


def test_status_shows_every_running_chain_and_each_slots_projected_timeline(ws, tmp_path):
    _slots(ws, tmp_path, per_chain=1)
    for _ in range(6):
        ws.cli("queue", "baseline")
    worker = ws.popen("worker", env={"TRAIN_S": "120"})
    try:
        wait_for(lambda: _running_trains(ws, 4), timeout=90, what="four trains at once")
        doc = ws.status()
        activity = doc["worker"]["activity"]
        assert all(f"chain {c}: train (pid" in activity for c in (1, 2, 3, 4)), activity
        planner = doc["planner"]
        assert planner["layout"].startswith("up to 4 chains at once in 4 slot(s) of 1 GPU(s)")
        slots = planner["slots"]
        assert [s["gpus"] for s in slots] == [[0], [1], [2], [3]]
        lanes = [(x["chain_id"], x["stage"]) for s in slots for x in s["timeline"]]
        assert {(c, "train") for c in range(1, 7)} <= set(lanes) and (5, "eval") in lanes
        by_chain = {e["chain_id"]: e for e in planner["timeline"]}
        assert by_chain[5]["start_in_s"] > 0 and len(by_chain[5]["gpus"]) == 1  # on the first slot to free up
        text = ws.cli("status").stdout
        assert "slots" in text and "GPU 3  chain" in text
    finally:
        stop_process(worker)


def test_recovery_stops_and_requeues_every_chain_a_killed_worker_left(ws, tmp_path):
    _slots(ws, tmp_path, per_chain=2)
    for _ in range(2):
        ws.cli("queue", "baseline")
    worker = ws.popen("worker", env={"TRAIN_S": "120"})
    try:
        rows = wait_for(lambda: _running_trains(ws, 2), timeout=90, what="two trains at once")
        worker.kill()  # SIGKILL: nothing of the worker runs its stops
        worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert all(pid_alive(pid) for _, pid in rows)  # the stages outlive it, in their own sessions
    assert sorted(_visible(ws, c, "train") for c, _ in rows) == ["CVD=0,1 GPUS=0,1 N=2", "CVD=2,3 GPUS=2,3 N=2"]
    _, out = _drain(ws, TRAIN_S="0")
    assert not any(pid_alive(pid) for _, pid in rows)
    states = dict(ws.sql("select id, state from chain"))
    assert states[1] == states[2] == "interrupted", states
    fresh = ws.sql("select id, state, requeued_from from chain where requeued_from is not null order by id")
    assert sorted(r[2] for r in fresh) == [1, 2] and all(r[1] == "succeeded" for r in fresh), (fresh, out)


def test_each_chain_prestarts_its_own_eval_on_its_own_gpu(ws, tmp_path):
    _slots(ws, tmp_path, per_chain=1, prestart=True,
           train=f"echo CVD=$CUDA_VISIBLE_DEVICES GPUS={{gpus}} N={{num_gpus}} && "
                 f"{PY} {FAKE_TRAIN} --seed {{seed}} --output-dir {{stage_dir}}")
    for _ in range(2):
        ws.cli("queue", "baseline")
    _, out = _drain(ws, FAKE_STEPS="8", FAKE_STEP_SECONDS="0.5",
                    FAKE_RENDEZVOUS=f"{tmp_path / 'meet'}:2")  # both trains run before either goes on
    assert ws.state(1) == ws.state(2) == "succeeded", out
    for c in (1, 2):
        held = json.loads((ws.runs / str(c) / "eval" / "held.json").read_text())
        train_start, train_end = _times(ws, c, "train")
        assert train_start <= held["at"] < train_end and held["go_at"] >= train_end
        assert ws.sql("select pgid from stage where chain_id = ? and name = 'eval'", c) == [(held["pgid"],)]
        assert _visible(ws, c, "eval") == _visible(ws, c, "train")
    assert {_visible(ws, c, "train") for c in (1, 2)} == {"CVD=0 GPUS=0 N=1", "CVD=1 GPUS=1 N=1"}
    assert out.count("given the go after") == 2


def test_a_layout_the_devices_cannot_hold_is_one_line_and_exit_2(ws, tmp_path):
    _slots(ws, tmp_path, per_chain=3)
    res = ws.run("status", check=False)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "gpus_per_chain = 3 does not divide the 4 devices" in res.stderr
    _slots(ws, tmp_path, eval_gpus=8)
    res = ws.run("worker", "--drain", check=False)
    assert res.returncode == 2 and "[stages.eval] gpus = 8 does not divide" in res.stderr
    assert not os.path.exists(ws.runs)
