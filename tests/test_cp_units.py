"""Unit tests of the control plane's pure parts: states, templates, parsers, recipes, budget,
config, and the process-ownership checks that guard every signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from opsdctl.config import BudgetConfig, config_from_dict, load_config, starter_config
from opsdctl.errors import UserError
from opsdctl.plan import budget
from opsdctl.recipes import knobs
from opsdctl.recipes.load import content_hash, load_recipe, recipe_json
from opsdctl.run import procs, results, stages
from opsdctl.store.states import (
    TERMINAL,
    TRANSITIONS,
    IllegalTransition,
    State,
    check_transition,
    transition,
)

REPO = Path(__file__).resolve().parent.parent


# --- states -------------------------------------------------------------------------------


def test_transition_table():
    assert set(TRANSITIONS) == set(State)
    assert TERMINAL == {State.SUCCEEDED, State.FAILED, State.CANCELLED, State.INTERRUPTED, State.SKIPPED,
                        State.STOPPED_FUTILE}
    assert TRANSITIONS[State.QUEUED] == {State.RUNNING, State.CANCELLED, State.SKIPPED}
    for s in TERMINAL:
        with pytest.raises(IllegalTransition):
            check_transition(s, State.QUEUED)
    with pytest.raises(IllegalTransition):
        check_transition(State.QUEUED, State.SUCCEEDED)


def test_guarded_transition(tmp_path):
    from opsdctl.store.engine import open_store
    from opsdctl.store.models import Chain, Transition, Variant

    store = open_store(f"sqlite:///{tmp_path / 'x.db'}")
    with store.write() as s:
        v = Variant(name="v", version=1, hash="h")
        s.add(v)
        s.flush()
        s.add(Chain(variant_id=v.id, state="queued"))
    with store.write() as s:
        assert transition(s, 1, State.QUEUED, State.RUNNING)
        assert not transition(s, 1, State.QUEUED, State.RUNNING)  # lost the race: no change
        assert transition(s, 1, [State.QUEUED, State.RUNNING], State.CANCELLED, reason="r")
    with store.read() as s:
        c = s.get(Chain, 1)
        assert (c.state, c.reason) == ("cancelled", "r") and c.finished_at is not None
        from sqlalchemy import select

        rows = s.scalars(select(Transition).order_by(Transition.id))
        assert [(t.from_state, t.to_state) for t in rows] == [
            ("queued", "running"), ("running", "cancelled")]
    with store.write() as s, pytest.raises(IllegalTransition):
        transition(s, 1, State.CANCELLED, State.RUNNING)


# --- templates and the stage environment -------------------------------------------------


def test_render_quotes_every_placeholder():
    nasty = "a b'c\"$HOME;rm -rf x`id`"
    cmd = stages.render("printf '%s\\n' {stage_dir} {seed} ${HOME} {{lit}}", {"stage_dir": nasty, "seed": 3})
    out = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, env={"HOME": "/h"}).stdout
    assert out.splitlines() == [nasty, "3", "/h", "{lit}"]
    assert stages.render("{stage_dir}/ckpt", {"stage_dir": "/a b"}, quote=False) == "/a b/ckpt"


@pytest.mark.parametrize("template, needle", [
    ("x {seeed}", "did you mean {seed}"),
    ("x {checkpoint}", "only known in the eval stage"),
    ("x { y", "stray '{'"),
    ("x }", "stray '}'"),
    ("awk '{print $1}'", "not a placeholder"),
])
def test_template_errors(template, needle):
    with pytest.raises(UserError, match=".") as exc:
        stages.check_template(template, stages.STAGE_PLACEHOLDERS["train"], "cfg")
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_stage_env(tmp_path):
    env = stages.stage_env(
        hparams={"lora_r": 8, "fixed_teacher": True}, method={"clip_mode": "token"}, chain_id=7, stage="eval",
        stage_dir=tmp_path / "s", run_dir=tmp_path, token="tok", gpus=(), code_dir=tmp_path / "code",
        base={"PYTHONPATH": "/old", "PATH": "/bin"},
    )
    assert env["OPSD_LORA_R"] == "8" and env["OPSD_FIXED_TEACHER"] == "true" and env["OPSD_CLIP_MODE"] == "token"
    assert env["OPSDCTL_CHAIN_ID"] == "7" and env["OPSDCTL_STAGE_DIR"] == str(tmp_path / "s")
    assert env["OPSDCTL_STAGE_TOKEN"] == "tok" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["PYTHONPATH"] == f"{tmp_path / 'code'}{os.pathsep}/old"
    env = stages.stage_env(hparams={}, method={}, chain_id=1, stage="train", stage_dir=tmp_path, run_dir=tmp_path,
                           token="t", gpus=(2, 3), code_dir=tmp_path, base={})
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["PYTHONPATH"] == str(tmp_path)


# --- result parsers -----------------------------------------------------------------------


def _result(**over):
    doc = {"schema": 1, "k": 2, "avg_at_k": 0.75, "n_problems": 2,
           "problems": [{"id": "a", "correct": 2, "samples": 2, "mean_tokens": 10.0},
                        {"id": 2, "correct": 1, "samples": 2}], "partial": False, "seconds": 3.5}
    doc.update(over)
    return json.dumps(doc)


def test_result_json():
    r = results.parse_result_json(_result())
    assert (r.k, r.avg_at_k, r.n_problems, r.n_correct, r.n_samples, r.partial, r.seconds) == (2, 75.0, 2, 3, 4, False, 3.5)
    assert r.problems[1] == {"id": "2", "correct": 1, "samples": 2}
    for bad, needle in [
        (_result(schema=2), "schema"),
        (_result(avg_at_k=52.78), "out of range"),
        (_result(n_problems=3), "n_problems = 3"),
        (_result(problems=[{"id": "a", "correct": 3, "samples": 2}], n_problems=1), "correct"),
        (_result(partial="no"), "partial"),
        ("{not json", "not valid JSON"),
        ("[1]", "JSON object"),
    ]:
        with pytest.raises(results.ResultError, match=".") as exc:
            results.parse_result_json(bad)
        assert needle in str(exc.value)


def test_final_line_last_match_wins():
    log = ("FINAL avg@12 accuracy: 50.00% (180/360 solutions correct on 30 problems)\nnoise\n"
           "\x1b[0mFINAL avg@12 accuracy: 52.78% (190/360 solutions correct on 30 problems)\n")
    r = results.parse_final_line(log)
    assert (r.k, r.avg_at_k, r.n_correct, r.n_samples, r.n_problems, r.source) == (12, 52.78, 190, 360, 30, "final-line")
    assert results.parse_final_line("FINAL avg@12 accuracy: 52.78%") is None


def test_train_summary_from_log_and_files(tmp_path):
    log = (
        "{'loss': -0.0021, 'grad_norm': 0.0492, 'learning_rate': 5e-06, 'on_policy_loss': -0.0021, 'epoch': 0.02}\n"
        "vLLM generation done - elapsed time: 3.74s, prompts: 4, total tokens: 3413, avg length: 853.2\n"
        "{'loss': -0.004, 'grad_norm': 0.05, 'learning_rate': 5e-06, 'epoch': 0.04}\n"
        "vLLM generation done - elapsed time: 4.26s, prompts: 4\n"
        "{'train_runtime': 908.19, 'train_samples_per_second': 3.523, 'train_steps_per_second': 0.11, "
        "'train_loss': -0.0079, 'epoch': 0.27}\n"
    )
    (tmp_path / "a.log").write_text(log)
    s = results.read_train_summary(tmp_path, tmp_path / "a.log")
    # two dict lines are not two steps (logging_steps may be 10): no bar, no step count;
    # step_seconds is then the Trainer's own 1 / train_steps_per_second
    assert (s.steps, s.final_loss, s.rollout_seconds, s.train_runtime, s.source) == (None, -0.0079, 4.0, 908.19, "log")
    assert s.step_seconds == pytest.approx(1 / 0.11) and [p["loss"] for p in s.curve] == [-0.0021, -0.004]
    # files win over the log
    (tmp_path / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "loss": 1.0, "kl": 0.2, "frac_clipped": 0.5, "peak_mem_mib": 10}) + "\n"
        + json.dumps({"step": 2, "loss": 0.5, "kl": 0.4, "frac_clipped": 0.0, "peak_mem_mib": 30}) + "\n{partial")
    (tmp_path / "train_result.json").write_text(json.dumps({"train_runtime": 12.0, "global_step": 2}))
    s = results.read_train_summary(tmp_path, tmp_path / "a.log")
    assert (s.steps, s.final_loss, s.mean_kl, s.frac_clipped, s.peak_mem_mib, s.train_runtime) == (2, 0.5, pytest.approx(0.3), 0.25, 30, 12.0)


def test_log_progress_adapters():
    train = results.LogProgress("train", max_steps=100)
    recs = train.feed(
        "Map: 100%|##########| 29434/29434 [00:01<00:00]\n"
        "Loading checkpoint shards: 100%|##| 2/2 [00:01<00:00]\n"
        "Processed prompts: 100%|##| 4/4 [00:03<00:00]\n"
        "{'loss': -0.0021, 'grad_norm': 0.0492, 'learning_rate': 5e-06, 'epoch': 0.02}\n"
        " 37%|###7      | 37/100 [05:12<08:53, 8.4s/it]\r"
        " 38%|###8      | 38/1"  # unfinished: waits for the rest of the line
    )
    assert [(r["step"], r["max_steps"]) for r in recs] == [(37, 100)]  # a dict line is not a step
    assert train.feed("00 [05:20<08:40, 8.4s/it]\n")[0]["step"] == 38
    ev = results.LogProgress("eval")
    recs = ev.feed("Adding requests: 100%|##| 84/84 [00:00<00:00]\rProcessed prompts:  57%|#####     | 48/84 [12:40<06:40, 1.2it/s]\r")
    p = results.progress_from_record(recs[-1])
    assert p.text() == "48/84 prompts" and p.fraction() == pytest.approx(48 / 84)
    assert results.progress_from_record({"step": 37, "max_steps": 100}).text() == "step 37/100"
    assert results.LogProgress("eval").feed("nothing here\n") == []


def test_partial_from_progress():
    rec = {"done": 40, "total": 120, "look_k": 4, "problems": [{"id": "a", "correct": 4, "samples": 4},
                                                               {"id": "b", "correct": 1, "samples": 4}]}
    r = results.partial_from_progress(rec)
    assert (r.k, r.avg_at_k, r.partial, r.source, r.n_correct) == (4, 62.5, True, "progress", 5)
    assert results.partial_from_progress({"done": 1}) is None


# --- recipes ------------------------------------------------------------------------------


def test_recipe_hash_is_content_only(tmp_path):
    (tmp_path / "one.toml").write_text('name = "one"\ndescription = "x"\n[hparams]\nmax_grad_norm = 1\n')
    (tmp_path / "two.toml").write_text('name = "two"\n[hparams]\nmax_grad_norm = 1.0\n[method]\nclip_mode = "entry"\n')
    one, two = load_recipe("one", tmp_path), load_recipe("two", tmp_path)
    assert one.hash == two.hash and one.hparams["max_grad_norm"] == 1.0
    assert list(one.hparams) == list(knobs.HPARAMS) and set(one.method) == set(knobs.METHOD_KNOBS)
    assert one.hash == content_hash(knobs.default_hparams() | {"max_grad_norm": 1.0}, knobs.default_method())
    doc = recipe_json(one.name, 3, one.description, one.hparams, one.method)
    assert doc["version"] == 3 and doc["hash"] == one.hash and set(doc) == {"name", "version", "hash", "description", "hparams", "method"}


def test_extends_by_relative_path_and_chain(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "base.toml").write_text('[hparams]\nlora_r = 8\n[method]\nclip_mode = "token"\n')
    (tmp_path / "sub" / "mid.toml").write_text('extends = "../base.toml"\n[hparams]\nlora_alpha = 16\n')
    (tmp_path / "leaf.toml").write_text('name = "leaf"\nextends = "./sub/mid.toml"\n[hparams]\nlora_r = 4\n')
    leaf = load_recipe("leaf", tmp_path)
    assert (leaf.hparams["lora_r"], leaf.hparams["lora_alpha"], leaf.method["clip_mode"]) == (4, 16, "token")
    assert [p.name for p in leaf.lineage] == ["leaf.toml", "mid.toml", "base.toml"]
    assert load_recipe(str(tmp_path / "sub" / "mid.toml"), tmp_path).name == "mid"


def test_shipped_recipes():
    base = load_recipe("baseline", REPO / "recipes")
    assert base.hparams == knobs.default_hparams() and base.method == knobs.default_method()
    raw = (REPO / "recipes" / "baseline.toml").read_text()
    for key in knobs.HPARAMS:
        assert f"\n{key} = " in raw, f"baseline.toml must write out {key}"
    expected = {"token-clip": ("method", "clip_mode", "token"), "hard-data": ("method", "data_select", "hard"),
                "cosine": ("hparams", "lr_scheduler_type", "cosine"),
                "teacher-trace": ("method", "teacher_context", "trace")}
    for name, (table, key, value) in expected.items():
        r = load_recipe(name, REPO / "recipes")
        assert getattr(r, table)[key] == value and r.description and r.lineage[1].name == "baseline.toml"
        changed = {k for k in r.hparams if r.hparams[k] != base.hparams[k]} | {k for k in r.method if r.method[k] != base.method[k]}
        assert changed == {key}


def test_extra_method_knobs(tmp_path):
    (tmp_path / "x.toml").write_text('[method]\nmy_clip = 0.3\n')
    with pytest.raises(UserError, match="extra_method_knobs"):
        load_recipe("x", tmp_path)
    r = load_recipe("x", tmp_path, extra_method_knobs=("my_clip",))
    assert r.method["my_clip"] == 0.3


# --- budget -------------------------------------------------------------------------------


def test_budget_sources(tmp_path):
    f = tmp_path / "remaining_secs"
    f.write_text("3600\n")
    past = time.time() - 600
    os.utime(f, (past, past))  # written 10 minutes ago: 50 minutes are left now
    b = budget.budget_now(BudgetConfig(remaining_file=f, margin_minutes=5), None)
    assert b.seconds_left == pytest.approx(3000, abs=5) and b.usable_seconds == pytest.approx(2700, abs=5)
    assert budget.budget_now(BudgetConfig(remaining_file=tmp_path / "nope"), None).error
    import datetime as dt

    deadline = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    b = budget.budget_now(BudgetConfig(deadline=deadline, margin_minutes=0), None)
    assert b.seconds_left == pytest.approx(3600, abs=5) and b.kind == "deadline"
    now = 1_000_000.0
    h = BudgetConfig(hours=6, margin_minutes=10)
    assert budget.budget_now(h, None, now=now).clock_started is False
    b = budget.budget_now(h, clock_start=now - 3600, now=now)
    assert b.seconds_left == 5 * 3600 and b.usable_seconds == 5 * 3600 - 600
    assert "inside the" in budget.budget_now(h, clock_start=now - 6 * 3600 + 60, now=now).text()
    assert budget.budget_now(BudgetConfig(), None).usable_seconds is None
    assert budget.fmt_duration(46 * 60) == "46m" and budget.fmt_duration(3 * 3600 + 120) == "3h02m"


# --- config -------------------------------------------------------------------------------


def test_config_paths_resolve_against_the_file(tmp_path, monkeypatch):
    (tmp_path / "cfg").mkdir()
    path = tmp_path / "cfg" / "opsdctl.toml"
    path.write_text('db = "sqlite:///data/runs.db"\nruns_dir = "out"\n[budget]\nremaining_file = ".timer/remaining_secs"\n')
    monkeypatch.chdir(tmp_path)
    cfg = load_config(path)
    assert cfg.db == f"sqlite:///{tmp_path}/cfg/data/runs.db" and cfg.runs_dir == tmp_path / "cfg" / "out"
    assert cfg.budget.remaining_file == tmp_path / "cfg" / ".timer" / "remaining_secs"
    assert cfg.stages["train"].command.startswith("{python} -m trainer")  # the profile's default
    pg = config_from_dict({"db": "postgresql+psycopg://u:secret@h/db"}, tmp_path)
    assert pg.db == "postgresql+psycopg://u:secret@h/db"


def test_offset_and_family_keys(tmp_path):
    (tmp_path / "opsdctl.toml").write_text(
        '[baseline]\nreference = { mean = 54.22, sd = 1.48, n = 5, offset_sd = 0.5 }\n'
        '[compare]\nfamily = "since:2025-06-01T09:00"\n')
    cfg = load_config(tmp_path / "opsdctl.toml")
    assert cfg.reference.offset_sd == 0.5 and cfg.section("compare")["family"] == "since:2025-06-01T09:00"
    (tmp_path / "opsdctl.toml").write_text('[compare]\nfamily = ["a", "b"]\n')
    assert load_config(tmp_path / "opsdctl.toml").section("compare")["family"] == ["a", "b"]


@pytest.mark.parametrize("profile", ["tiny", "qwen3-1.7b"])
def test_starter_configs_load(tmp_path, profile):
    (tmp_path / "opsdctl.toml").write_text(starter_config(profile))
    cfg = load_config(tmp_path / "opsdctl.toml")
    train, ev = cfg.stages["train"].command, cfg.stages["eval"].command
    tail = "-m trainer --profile {profile} --recipe {recipe_json} --seed {seed} --output-dir {stage_dir}"
    if profile == "tiny":
        assert train == "{python} " + tail and cfg.devices == [] and cfg.reference is None
    else:
        assert train == "{python} -m accelerate.commands.launch --num_processes {num_gpus} " + tail
        assert cfg.devices == [0, 1, 2, 3] and (cfg.reference.mean, cfg.reference.sd, cfg.reference.n) == (54.22, 1.48, 5)
        assert cfg.reference.offset_sd == 1.0  # the setup offset's default
    assert cfg.section("compare")["family"] == "all"
    assert ev == ("{python} -m eval --profile {profile} --adapter {checkpoint} --num-problems {num_problems} --k {k} "
                  "--output-dir {stage_dir} --gpus {gpus}")
    assert cfg.stages["train"].checkpoint == "{stage_dir}/checkpoint-final" and cfg.profile == profile


# --- process ownership --------------------------------------------------------------------


def _spawn(token: str | None, escape_child: bool = False) -> psutil.Popen:
    env = dict(os.environ)
    env.pop(stages.ENV_STAGE_TOKEN, None)
    if token:
        env[stages.ENV_STAGE_TOKEN] = token
    code = "import time; time.sleep(60)"
    if escape_child:  # a child that leaves the group (its own session) but keeps the environment
        code = ("import os, subprocess, sys, time; "
                "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True); "
                "time.sleep(60)")
    return psutil.Popen([sys.executable, "-c", code], env=env, start_new_session=True)


def test_stop_stage_never_touches_unproven_processes():
    foreign = _spawn(token=None)
    try:
        # Right pgid, but the start time does not match (pid reuse) and there is no token.
        ident = procs.StageIdentity(pgid=foreign.pid, pid=foreign.pid, create_time=foreign.create_time() - 100, token="mine")
        report = procs.stop_stage(ident, grace=0.5)
        assert report.found == 0 and report.unverified_group and foreign.is_running()
        assert not procs.leader_is_ours(ident)
        assert procs.leader_is_ours(procs.StageIdentity(foreign.pid, foreign.pid, foreign.create_time(), ""))
    finally:
        foreign.kill()
        foreign.wait()


def test_stop_stage_kills_group_and_escaped_token_carriers():
    token = f"tok-{os.getpid()}-{time.time()}"
    leader = _spawn(token=token, escape_child=True)
    try:
        def escaped():
            return [p for p in psutil.process_iter() if p.pid != leader.pid and procs._has_token(p, token)]

        deadline = time.monotonic() + 20
        while not escaped() and time.monotonic() < deadline:
            time.sleep(0.05)
        (child,) = escaped()
        assert os.getpgid(child.pid) != leader.pid  # it left the group
        ident = procs.StageIdentity(pgid=leader.pid, pid=leader.pid, create_time=leader.create_time(), token=token)
        report = procs.stop_stage(ident, grace=2, reap=lambda: leader.poll())
        assert report.found == 2 and report.survivors == []
        assert leader.poll() == -signal.SIGTERM
        child.wait(timeout=5)
        assert not child.is_running()
    finally:
        for p in psutil.process_iter():
            if procs._has_token(p, token):
                p.kill()
        if leader.poll() is None:
            leader.kill()


def test_a_live_worker_stays_running_when_the_boot_time_moves():
    """psutil's start time = /proc/stat btime (whole seconds, moved by NTP and VM clock steps) +
    ticks since boot: a live worker can read a second away from its recorded start. It is still
    running; a recorded start far from the process's (a reused pid) is not."""
    import os
    import socket

    import psutil

    from opsdctl.run.worker_view import worker_view
    from opsdctl.store.models import WorkerRun

    me = psutil.Process(os.getpid()).create_time()

    def row(create_time):
        return WorkerRun(pid=os.getpid(), host=socket.gethostname(), create_time=create_time)

    for shift in (0.0, 1.0, -1.0, 2.0):  # btime crossed a second (or two) since the worker started
        assert worker_view(row(me + shift))["state"] == "running", shift
    for shift in (60.0, -3600.0):
        assert worker_view(row(me + shift))["state"] == "dead", shift
