"""`[stages.eval] prestart`: the eval starts while its train stage runs and holds until the go.

Why: the GPU sat idle ~50 s between the last train step and the first eval sample, most of
it the eval's interpreter start and imports (torch, transformers, vLLM). A pre-started eval does
those behind training; the worker gives it the go (one byte on OPSD_GO_FD) only once the train
stage has passed its checks and the eval is granted the same GPUs and settings, and otherwise
closes the pipe and stops its process group. tests/stages/fake_eval.py honours the protocol as a
user's script would; tests/integration/test_eval_e2e.py checks our evaluator's side.
"""

from __future__ import annotations

import datetime as dt
import json

from conftest import pid_alive

PRESTART = "[stages.eval]\nprestart = true\n"


def _prestarting(ws, on: bool = True) -> None:
    text = (ws.root / "opsdctl.toml").read_text()
    ws.write_config(text.replace("[stages.eval]\n", PRESTART) if on else text)


def _epoch(iso_text: str) -> float:
    return dt.datetime.fromisoformat(iso_text).replace(tzinfo=dt.timezone.utc).timestamp()


def _stage_times(ws, chain_id: int, name: str) -> tuple[float, float]:
    """(started, finished) of a stage as epoch seconds, from the store's microsecond timestamps."""
    start, end = ws.sql("select started_at, finished_at from stage where chain_id = ? and name = ?", chain_id, name)[0]
    return _epoch(start), _epoch(end)


def test_the_eval_starts_during_training_and_runs_only_after_the_go(ws):
    _prestarting(ws)
    ws.cli("queue", "baseline")
    out = ws.run("worker", "--drain", env={"FAKE_STEPS": "6", "FAKE_STEP_SECONDS": "0.4"})
    assert ws.state(1) == "succeeded", out.stdout
    held = json.loads((ws.runs / "1" / "eval" / "held.json").read_text())
    train_start, train_end = _stage_times(ws, 1, "train")
    eval_start, _ = _stage_times(ws, 1, "eval")
    assert train_start <= held["at"] < train_end, "the eval process started while training ran"
    assert held["go_at"] >= train_end, "and ran only once training had ended"
    assert eval_start >= train_end - 0.01, "the eval stage's clock starts at the go, not at the early start"
    # one eval process: the early one was given the stage (its process group is the stage's)
    assert ws.sql("select pgid from stage where chain_id = 1 and name = 'eval'") == [(held["pgid"],)]
    assert "eval started ahead" in out.stdout and "given the go after" in out.stdout


def test_a_failed_train_gives_the_early_eval_no_go(ws):
    _prestarting(ws)
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain", env={"FAKE_FAIL": "1", "FAKE_STEP_SECONDS": "1.0"})
    assert ws.state(1) == "failed"
    eval_dir = ws.runs / "1" / "eval"
    held = json.loads((eval_dir / "held.json").read_text())
    assert (eval_dir / "nogo").exists() and "go_at" not in held, "it never ran"
    assert not pid_alive(held["pid"]), "and nothing of it is left"
    assert ws.sql("select count(*) from stage where chain_id = 1 and name = 'eval'") == [(0,)]
    assert "gets no go" in (ws.runs / "1" / "eval.log").read_text()


def test_a_cancel_during_training_stops_the_early_eval(ws):
    import time

    from conftest import wait_for

    _prestarting(ws)
    ws.cli("queue", "baseline")
    worker = ws.popen("worker", "--drain", env={"FAKE_STEPS": "200", "FAKE_STEP_SECONDS": "0.2"})
    try:
        held_file = ws.runs / "1" / "eval" / "held.json"
        wait_for(held_file.exists, timeout=60, what="the eval started ahead")
        ws.cli("cancel", "1")
        worker.wait(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    held = json.loads(held_file.read_text())
    assert ws.state(1) == "cancelled"
    deadline = time.monotonic() + 10
    while pid_alive(held["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(held["pid"])
    assert ws.sql("select count(*) from stage where chain_id = 1 and name = 'eval'") == [(0,)]


def test_a_users_own_eval_is_not_started_early_unless_its_config_says_so(ws):
    ws.cli("queue", "baseline")  # the test config's commands are a user's own scripts
    ws.run("worker", "--drain")
    assert ws.state(1) == "succeeded"
    assert not (ws.runs / "1" / "eval" / "held.json").exists(), "no OPSD_GO_FD: it started after training"


def test_a_bad_prestart_value_is_one_line(ws):
    text = (ws.root / "opsdctl.toml").read_text().replace("[stages.eval]\n", '[stages.eval]\nprestart = "soon"\n')
    ws.write_config(text)
    out = ws.run("status", check=False)
    assert out.returncode == 2 and "prestart" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_with_the_nvml_gate_the_early_eval_gets_its_go(ws, tmp_path):
    """The GPU gate's grants carry CUDA_DEVICE_ORDER and the devices as CUDA_VISIBLE_DEVICES spells
    them: the early eval starts with the train stage's grant, so the eval's grant matches it.
    (On an H200 the first version started the early eval without the grant's environment, and
    every chain dropped it: 'granted other GPUs or settings'.)"""
    f = tmp_path / "gpus.json"
    f.write_text(json.dumps({"gpus": [{"uuid": "GPU-fake-0", "total_mib": 81559, "base_used_mib": 0,
                                       "util_pct": 0, "processes": []}]}))
    text = (ws.root / "opsdctl.toml").read_text()
    ws.write_config(text.replace("[gpus]\ndevices = []", "[gpus]\ndevices = [0]\nmin_free_mib = 0")
                    .replace("[stages.eval]\n", PRESTART))
    ws.env.update({"OPSDCTL_GPU_PROBE": f"fake:{f}"})
    ws.cli("queue", "baseline")
    out = ws.run("worker", "--drain", env={"FAKE_STEPS": "4", "FAKE_STEP_SECONDS": "0.4"})
    assert ws.state(1) == "succeeded", out.stdout
    held = json.loads((ws.runs / "1" / "eval" / "held.json").read_text())
    assert "go_at" in held, (ws.runs / "1" / "eval.log").read_text()
    assert "gets no go" not in (ws.runs / "1" / "eval.log").read_text()


def test_a_held_eval_does_not_outlive_a_killed_worker(ws):
    """SIGKILL leaves the worker no time to drop it: the pipe's end of file is its no-go."""
    import signal
    import time

    from conftest import wait_for

    _prestarting(ws)
    ws.cli("queue", "baseline")
    worker = ws.popen("worker", "--drain", env={"FAKE_STEPS": "200", "FAKE_STEP_SECONDS": "0.2"})
    held_file = ws.runs / "1" / "eval" / "held.json"
    try:
        wait_for(held_file.exists, timeout=60, what="the eval started ahead")
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        held = json.loads(held_file.read_text())
        deadline = time.monotonic() + 10
        while pid_alive(held["pid"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pid_alive(held["pid"]) and (ws.runs / "1" / "eval" / "nogo").exists()
    finally:
        if worker.poll() is None:
            worker.kill()
        ws.run("worker", "--drain", env={"FAKE_STEPS": "2"})  # recovery stops the orphaned train stage
    assert ws.state(1) == "interrupted"
