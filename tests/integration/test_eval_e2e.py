"""`python -m eval` as a real subprocess on the tiny profile (CPU): every output consistent with
the others, resume after SIGKILL, 1 vs 2 workers, settings mismatch refused, bad input, a fresh
draw of samples (OPSD_EVAL_DRAW)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO
from fixtures_tiny import tiny_assets  # noqa: F401  (pytest fixture)

from eval import plan
from eval.grading import grade
from opsdctl.contract.results import FINAL_RE, parse_result_json, partial_from_progress

N_PROBLEMS = 8
K = 4  # the tiny profile's k: looks at 1 and 2
ARGS = ["--profile", "tiny", "--gpus", "", "--num-problems", str(N_PROBLEMS)]
SAMPLE_FIELDS = ("seed", "text", "n_tokens", "finish_reason", "extracted", "correct")


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("OPSD_", "OPSDCTL_", "CUDA_VISIBLE"))}
    e.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false",
             HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    if "OPSDCTL_CACHE_DIR" in os.environ:
        e["OPSDCTL_CACHE_DIR"] = os.environ["OPSDCTL_CACHE_DIR"]
    return e


def run_eval(*args, timeout: float = 300, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eval", *map(str, args)], cwd=REPO, env={**env(), **(extra_env or {})},
                          capture_output=True, text=True, timeout=timeout)


def samples(out: Path) -> dict[tuple[str, int], dict]:
    recs = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    keyed = {(r["id"], r["sample"]): r for r in recs}
    assert len(keyed) == len(recs), "duplicated samples"
    return keyed


def per_sample(out: Path) -> dict:
    return {key: tuple(r[f] for f in SAMPLE_FIELDS) for key, r in samples(out).items()}


@pytest.fixture(scope="module")
def reference(tiny_assets, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("eval") / "ref"
    proc = run_eval(*ARGS, "--output-dir", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc, tiny_assets


def test_outputs_are_consistent(reference):
    out, proc, assets = reference
    result = json.loads((out / "result.json").read_text())
    # The stage contract's own validator accepts it.
    parsed = parse_result_json((out / "result.json").read_text())
    assert parsed.k == K and parsed.n_problems == N_PROBLEMS and parsed.partial is True  # 8 of 30 problems
    assert result["schema"] == 1 and 0.0 <= result["avg_at_k"] <= 1.0

    # samples.jsonl: every item once, seeds from the plan, grades reproducible here.
    gold = {json.loads(line)["id"]: json.loads(line)["answer"] for line in assets.bench_file.read_text().splitlines()}
    recs = samples(out)
    ids = [p["id"] for p in result["problems"]]
    assert set(recs) == {(pid, s) for pid in ids for s in range(K)}
    for (pid, s), r in recs.items():
        assert r["seed"] == plan.item_seed(0, pid, s)
        g = grade(r["text"], gold[pid])
        assert (g.extracted, g.correct) == (r["extracted"], r["correct"])
        assert r["finish_reason"] in ("stop", "length") and 0 < r["n_tokens"] <= 48
    assert sum(r["correct"] for r in recs.values()) > 0, "the warm-started tiny model solves some problems"

    # result.json agrees with samples.jsonl.
    for p in result["problems"]:
        mine = [recs[(p["id"], s)] for s in range(K)]
        assert p["samples"] == K and p["correct"] == sum(r["correct"] for r in mine)
        assert p["mean_tokens"] == pytest.approx(sum(r["n_tokens"] for r in mine) / K, abs=0.01)
        assert sum(p["finish_reasons"].values()) == K
    avg = sum(p["correct"] / p["samples"] for p in result["problems"]) / N_PROBLEMS
    assert result["avg_at_k"] == pytest.approx(avg, abs=1e-6)

    # The FINAL line is the last stdout line, exactly in the contract's format.
    last = proc.stdout.strip().splitlines()[-1]
    n_correct = sum(p["correct"] for p in result["problems"])
    assert last == (f"FINAL avg@{K} accuracy: {100 * avg:.2f}% "
                    f"({n_correct}/{N_PROBLEMS * K} solutions correct on {N_PROBLEMS} problems)")
    assert FINAL_RE.fullmatch(last)
    assert "Processed prompts:" in proc.stderr

    # The bar's clock starts when the workers are ready: its elapsed time is generation time only.
    assert re.search(r"eval: 1/1 worker\(s\) ready [0-9.]+ s after start \(engine load [0-9.]+ s\)", proc.stderr)
    bars = re.findall(r"Processed prompts: +100%.*\[(\d+):(\d+)<", proc.stderr)
    assert bars, proc.stderr[-2000:]
    shown = int(bars[-1][0]) * 60 + int(bars[-1][1])
    load = next(w["load_seconds"] for w in result["workers"])
    assert load >= 1.0  # spawning a worker and importing torch: the test below can tell the clocks apart
    assert shown <= math.ceil(result["generation_seconds"]), (shown, result["generation_seconds"], load)
    # the start-up breakdown (docs/benchmarks.md): the parent's own start, then each worker's phases
    start = result["startup_seconds"]
    assert 0 < start["workers_spawned"] <= start["engines_ready"] <= result["seconds"] + start["workers_spawned"]
    phases = result["workers"][0]["startup_seconds"]
    assert {"interpreter", "imports", "engine", "since_process_start"} <= set(phases)
    assert phases["imports"] > 0 and phases["since_process_start"] >= phases["imports"] + phases["engine"]

    # progress.jsonl: monotone, ends at total, one look record per look point with exact counts.
    prog = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    dones = [r["done"] for r in prog]
    assert dones == sorted(dones) and prog[-1] == {"done": N_PROBLEMS * K, "total": N_PROBLEMS * K}
    looks = [r for r in prog if "look_k" in r]
    assert [r["look_k"] for r in looks] == plan.look_points(K) == [1, 2]
    for look in looks:
        assert [p["id"] for p in look["problems"]] == ids
        for p in look["problems"]:
            assert p["samples"] == look["look_k"]
            assert p["correct"] == sum(recs[(p["id"], s)]["correct"] for s in range(look["look_k"]))
        assert partial_from_progress(look).k == look["look_k"]

    settings = json.loads((out / "settings.json").read_text())
    assert settings["k"] == K and settings["temperature"] == 1.0 and settings["top_p"] == 0.95
    assert settings["backend"] == "hf" and settings["thinking"] is True and settings["adapter"] is None


def test_two_workers_give_identical_samples(reference, tmp_path):
    out = tmp_path / "two"
    proc = run_eval(*ARGS, "--workers", "2", "--output-dir", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert per_sample(out) == per_sample(reference[0])
    workers = json.loads((out / "result.json").read_text())["workers"]
    assert len(workers) == 2 and sum(w["items"] for w in workers) == N_PROBLEMS * K
    assert proc.stdout.strip().splitlines()[-1] == reference[1].stdout.strip().splitlines()[-1]


def test_resume_after_sigkill(reference, tmp_path):
    import psutil

    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "eval", *ARGS, "--output-dir", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    path = out / "samples.jsonl"
    deadline = time.monotonic() + 240
    children = []
    while time.monotonic() < deadline:
        children = children or psutil.Process(proc.pid).children(recursive=True)
        if path.exists() and path.read_text().count("\n") >= 3:
            break
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    written = path.read_text().count("\n")
    assert 3 <= written < N_PROBLEMS * K, "the kill should land mid-run"
    # No orphan: the workers follow their parent.
    gone, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, f"orphaned workers: {alive}"
    with open(path, "a") as f:  # and a line torn by a crash mid-write
        f.write('{"id": "tiny-001", "sample": 3, "seed": 1, "text": "tor')

    again = run_eval(*ARGS, "--output-dir", out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert per_sample(out) == per_sample(reference[0])  # identical, nothing duplicated
    assert all(line.endswith("}") for line in path.read_text().splitlines())
    result = json.loads((out / "result.json").read_text())
    assert result["resumed_samples"] == written
    assert again.stdout.strip().splitlines()[-1] == reference[1].stdout.strip().splitlines()[-1]
    looks = [json.loads(line).get("look_k") for line in (out / "progress.jsonl").read_text().splitlines()]
    assert sorted(x for x in looks if x) == [1, 2]  # each look written once over both runs

    # Resuming a finished dir recomputes nothing and gives the same answer.
    done = run_eval(*ARGS, "--output-dir", out)
    assert done.returncode == 0 and done.stdout == again.stdout
    assert path.read_text().count("\n") == N_PROBLEMS * K


def _snapshot(d: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


@pytest.mark.parametrize("change,word,extra_env", [
    (["--temperature", "0.7"], "temperature", None),
    (["--k", "2"], "k=", None),
    (["--seed", "1"], "seed", None),
    (["--thinking", "off"], "thinking", None),
    ([], "draw=0 but this run has draw=1", {"OPSD_EVAL_DRAW": "1"}),
])
def test_resume_with_other_settings_is_refused(reference, tmp_path, change, word, extra_env):
    out = tmp_path / "copy"
    shutil.copytree(reference[0], out)
    before = _snapshot(out)
    proc = run_eval(*ARGS, "--output-dir", out, *change, timeout=120, extra_env=extra_env)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and word in lines[0] and "--output-dir" in lines[0], proc.stderr
    assert _snapshot(out) == before and proc.stdout == ""


def test_a_fresh_draw_samples_the_same_items_with_other_seeds(reference, tmp_path):
    """OPSD_EVAL_DRAW=1 (a re-evaluation): the same problems x k, every sample from a seed of its
    own draw; OPSD_EVAL_DRAW=0 is the usual draw (it resumes the reference, a dir written before
    draws were recorded, and computes nothing)."""
    out = tmp_path / "draw1"
    proc = run_eval(*ARGS, "--output-dir", out, extra_env={"OPSD_EVAL_DRAW": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    seed = plan.draw_seed(0, 1)
    assert f"fresh draw 1 (seed {seed})" in proc.stderr
    first, fresh = samples(reference[0]), samples(out)
    assert set(fresh) == set(first)  # same problems, same k
    for (pid, s), r in fresh.items():
        assert r["seed"] == plan.item_seed(seed, pid, s) != first[(pid, s)]["seed"]
    assert sum(r["text"] != first[key]["text"] for key, r in fresh.items()) > len(fresh) // 2  # sampled anew
    settings = json.loads((out / "settings.json").read_text())
    assert (settings["draw"], settings["seed"]) == (1, seed)
    result = json.loads((out / "result.json").read_text())
    first_result = json.loads((reference[0] / "result.json").read_text())
    assert [p["id"] for p in result["problems"]] == [p["id"] for p in first_result["problems"]]
    assert result["k"] == K and result["settings"]["draw"] == 1

    old = tmp_path / "before-draws"
    shutil.copytree(reference[0], old)
    recorded = json.loads((old / "settings.json").read_text())
    assert recorded.pop("draw") == 0
    (old / "settings.json").write_text(json.dumps(recorded))
    again = run_eval(*ARGS, "--output-dir", old, extra_env={"OPSD_EVAL_DRAW": "0"})
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((old / "result.json").read_text())["resumed_samples"] == N_PROBLEMS * K
    assert again.stdout.strip().splitlines()[-1] == reference[1].stdout.strip().splitlines()[-1]


def test_resume_over_fewer_problems_reuses_the_samples(reference, tmp_path):
    """--num-problems is not part of a dir's identity: the first N problems' samples are reused."""
    out = tmp_path / "fewer"
    shutil.copytree(reference[0], out)
    proc = run_eval("--profile", "tiny", "--gpus", "", "--num-problems", "3", "--output-dir", out)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["n_problems"] == 3 and result["resumed_samples"] == 3 * K and result["workers"] == []
    assert result["problems"] == json.loads((reference[0] / "result.json").read_text())["problems"][:3]
    looks = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    assert [len(r["problems"]) for r in looks if "look_k" in r] == [N_PROBLEMS, N_PROBLEMS, 3, 3]


@pytest.mark.parametrize("args,word", [
    (["--profile", "nope"], "unknown profile"),
    (["--adapter", "/no/such/adapter"], "--adapter"),
    (["--gpus", "x"], "--gpus"),
    (["--num-problems", "999"], "has only"),
    (["--top-p", "0"], "--top-p"),
    (["--k", "0"], "--k"),
    (["--benchmark", "/no/such.jsonl"], "no such file"),
    (["--backend", "vllm"], "--backend vllm"),
    (["--thinking", "maybe"], "thinking"),
    (["--frobnicate"], "unrecognized"),
])
def test_bad_input_is_one_line_and_writes_nothing(tiny_assets, tmp_path, capsys, args, word):  # noqa: F811
    from eval.cli import main

    out = tmp_path / "never"
    rc = main(["--profile", "tiny", "--gpus", "", "--output-dir", str(out), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and word in err[0], err
    assert not out.exists()


def _held_eval(out: Path, *extra) -> tuple[subprocess.Popen, int]:
    """`python -m eval` started ahead of its turn (eval/hold.py): our end of its go pipe."""
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "eval", *ARGS, "--output-dir", str(out), *extra], cwd=REPO,
                            env={**env(), "OPSD_GO_FD": str(read_fd)}, pass_fds=(read_fd,),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.close(read_fd)
    return proc, write_fd


def _pool_children(pid: int) -> list:
    import psutil

    return psutil.Process(pid).children(recursive=True)


def test_a_held_eval_imports_then_waits_for_the_go_and_gives_the_same_samples(reference, tmp_path):
    """The worker pool's forkserver has imported torch and transformers before the go, nothing is
    written until it, and the samples equal an eval started the usual way."""
    out = tmp_path / "held"
    proc, go = _held_eval(out, "--workers", "2")
    try:
        def pool_imported():  # the forkserver: a child of the eval holding torch's shared library
            for child in _pool_children(proc.pid):
                try:
                    if any("libtorch" in m.path for m in child.memory_maps()):
                        return child
                except Exception:
                    pass
            return None

        deadline = time.monotonic() + 120
        while not pool_imported():
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "the pool never imported torch while held"
            time.sleep(0.2)
        time.sleep(1.0)
        assert proc.poll() is None, "a held eval must wait for the go"
        assert not (out / "samples.jsonl").exists() and not (out / "settings.json").exists(), \
            "nothing is written before the go"
        os.write(go, b"1")
    finally:
        os.close(go)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    assert "started ahead" in stderr and "go after" in stderr
    assert per_sample(out) == per_sample(reference[0])
    assert stdout.strip().splitlines()[-1] == reference[1].stdout.strip().splitlines()[-1]
    doc = json.loads((out / "result.json").read_text())
    assert doc["startup_seconds"]["held"] >= 1.0
    # forked from the prewarmed pool: the workers' own import phase is short (no interpreter start)
    assert all(w["startup_seconds"]["imports"] < 1.0 for w in doc["workers"]), doc["workers"]


def test_a_held_eval_without_a_go_exits_and_writes_nothing(tiny_assets, tmp_path):  # noqa: F811
    out = tmp_path / "nogo"
    proc, go = _held_eval(out)
    time.sleep(2.0)
    os.close(go)  # the worker dropped it (its chain's training failed) or died
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "no go" in stderr, stderr[-2000:]
    assert not out.exists() or not any(out.iterdir()), "a dropped eval leaves no output"
