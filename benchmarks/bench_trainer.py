"""Trainer speed and memory: real OPSD optimizer steps, and the chunked loss against a naive one.

GPU (default): random-init Qwen3-1.7B shapes in bf16 (opsdkit.shapes) with the tiny tokenizer,
LoRA r 64 / alpha 128, gradient checkpointing, per-device batch 4, gradient accumulation 2 (the
profile's), rollouts forced to exactly 1024 tokens, through vLLM colocated in the process
(--backend vllm, the default where vLLM is installed) or Hugging Face generate (--backend hf).
It reports
1. each optimizer step of trainer.train.OPSDTrainer: step, rollout and train seconds, rollout
   tokens/s, and peak GPU memory from NVML for this process (trainer.gpu_memory), for the
   rollout phase (vLLM awake) and the training phase (vLLM asleep) apart;
2. the memory split on the users' card, an 80 GB H100: vLLM gets gpu_memory_utilization x the
   card's memory while it is awake. By default the engine here gets exactly what 0.6 gives on
   an H100 (0.6 x 81,559 MiB), so the measured rollout peak is what an H100 would hold, and the
   largest utilisation that still fits there follows from the trainer's own share;
3. start-up (process start to the engine ready and to the first step's end) and the projected
   100-step time on 4 GPUs (each GPU does this per-device work; LoRA gradients are averaged),
   against the 908 s the seeds' official trainer took on 4 x H100;
4. (--loss-parts) the loss alone on real-shape hidden states, chunked vs naive, and one
   training micro-step without the rollout, chunked vs naive (full model logits).
--smoke: the untrained tiny model on the CPU, HF generate, 12-token completions, seconds.

    python benchmarks/bench_trainer.py [--smoke] [--backend vllm|hf] [--steps 10] [--out FILE]

Writes benchmarks/results/trainer_<device>[_<backend>].json (or --out) and prints the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BATCH = 4
GRAD_ACCUM = 2  # the qwen3-1.7b profile's
COMPLETION = 1024
STEPS = {"vllm": 10, "hf": 2}  # HF generate: ~75 s per 1024-token rollout
SOLUTION_REPEAT = 12  # teacher prompts of a few hundred tokens, like real reference solutions
SMOKE = dict(batch=2, completion=12, steps=1, grad_accum=1)
H100_MIB = 81559  # an 80 GB H100 as NVML reports it
PROFILE_UTIL = 0.6  # the qwen3-1.7b profile's gpu_memory_utilization
OFFICIAL_100_STEPS_S = 908.0  # the seeds' official trainer, 100 steps on 4 x H100
H100_OVER_H200_DECODE = 4.8 / 3.35  # decode is memory-bound: HBM bandwidth H200 / H100


def device_slug() -> str:
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    name = torch.cuda.get_device_name(0)
    m = re.search(r"(H200|H100|A100|L40S|L4|A10G|B200|GB200|RTX ?\d+)", name)
    return (m.group(1) if m else name).replace(" ", "").lower()


def sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Meter:
    """Seconds and peak memory above the starting point (MiB; None on the CPU)."""

    def __enter__(self):
        import torch

        sync()
        self.cuda = torch.cuda.is_available()
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        import torch

        sync()
        self.seconds = time.perf_counter() - self.t0
        self.peak_mib = (torch.cuda.max_memory_allocated() - self.base) / 2**20 if self.cuda else None
        return False


def build_assets(work: Path, smoke: bool, model_dir: Path | None = None) -> tuple[str, str]:
    """(model dir, dataset file): a random model of the benchmark's shape with the tiny tokenizer
    (built once into `model_dir` when given, so other benchmarks reuse it and its compile cache)."""
    import torch

    from opsdkit.modeling import load_tokenizer
    from opsdkit.tiny import build_untrained_tiny, make_rows

    rows = make_rows(64, seed=11)
    for r in rows:
        r["solution"] = " ".join([r["solution"]] * (2 if smoke else SOLUTION_REPEAT))
    data = work / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tiny = build_untrained_tiny(work / "tiny")
    if smoke:
        return str(tiny), str(data)
    from opsdkit.shapes import cached_random_qwen3

    path = cached_random_qwen3(model_dir or work / "model", tokenizer=load_tokenizer(str(tiny)),
                               dtype=torch.bfloat16, device="cuda")
    torch.cuda.empty_cache()
    return path, str(data)


def make_trainer(model_dir: str, data: str, out: Path, batch: int, completion: int, steps: int,
                 grad_accum: int = 1, backend: str = "hf", gpu_memory_utilization: float | None = None):
    from opsdctl.recipes import knobs
    from opsdctl.recipes.profiles import get_profile, with_overrides
    from trainer.cli import TrainConfig
    from trainer.train import OPSDTrainer

    hp = {**knobs.default_hparams(), "max_completion_length": completion}  # the released recipe
    prof = with_overrides(get_profile("qwen3-1.7b"), model=model_dir, dataset=data, max_steps=steps,
                          per_device_train_batch_size=batch, gradient_accumulation_steps=grad_accum,
                          save_steps=10**6, gpu_memory_utilization=gpu_memory_utilization)
    cfg = TrainConfig(profile=prof, hparams=hp, method=knobs.default_method(), seed=0, output_dir=out,
                      rollout_backend=backend, keep_global_batch=False)  # one process, the accumulation given
    tr = OPSDTrainer(cfg)
    # force full-length rollouts: a random model would stop anywhere
    tr.sampling = dataclasses.replace(tr.sampling, min_new_tokens=completion)
    prepare = tr.prepare

    def keep_batches(*args, **kwargs):
        tr.last_batches = prepare(*args, **kwargs)
        return tr.last_batches

    tr.prepare = keep_batches
    return tr


def loss_only(tr, n_positions: int, repeats: int = 2) -> dict:
    """Forward+backward of the loss on real-shape hidden states, chunked vs naive."""
    import torch

    from trainer.loss import chunked_loss, naive_loss
    from trainer.model import backbone_and_head

    _, head = backbone_and_head(tr.model)
    hidden = head.weight.shape[1]
    g = torch.Generator(device=tr.device).manual_seed(0)
    dtype = head.weight.dtype
    h_s = torch.randn(n_positions, hidden, device=tr.device, generator=g).to(dtype).requires_grad_(True)
    h_t = torch.randn(n_positions, hidden, device=tr.device, generator=g).to(dtype)
    tokens = torch.randint(0, head.weight.shape[0], (n_positions,), device=tr.device, generator=g)
    spec = tr.loss_spec

    def naive():
        with torch.no_grad():
            t_logits = head(h_t)
        out = naive_loss(head(h_s), t_logits, tokens, spec)
        out.loss.backward()
        return out

    def chunked():
        out = chunked_loss(h_s, h_t, head, tokens, spec, chunk_size=tr.cfg.loss_chunk_size)
        out.loss.backward()
        return out

    res = {}
    for name, fn in (("naive", naive), ("chunked", chunked)):
        fn()  # warm-up
        h_s.grad = None
        best = None
        for _ in range(repeats):
            with Meter() as m:
                out = fn()
            h_s.grad = None
            if best is None or m.seconds < best.seconds:
                best = m
        res[name] = {"seconds": round(best.seconds, 4),
                     "peak_mib": round(best.peak_mib, 1) if best.peak_mib is not None else None,
                     "loss": out.loss.item()}
    res["positions"] = n_positions
    res["vocab"] = head.weight.shape[0]
    res["same_loss"] = abs(res["naive"]["loss"] - res["chunked"]["loss"]) <= 1e-3 * max(1.0, abs(res["naive"]["loss"]))
    return res


def micro_step(tr, repeats: int = 2) -> dict:
    """One training micro-step on the last step's batch, without the rollout: chunked vs naive."""
    import torch

    from trainer.batch import build
    from trainer.loss import naive_loss
    from trainer.model import full_logits
    from trainer.teacher import as_teacher

    mb = tr.last_batches[0][0]
    n = sum(len(c) for c in mb.completions)

    def naive():
        s = build(mb.student, mb.completions, tr.pad_id).to(tr.device)
        t = build(mb.teacher, mb.completions, tr.pad_id).to(tr.device)
        with as_teacher(tr.model, tr.teacher):
            t_logits = full_logits(tr.model, t)[:, t.predicting_slice()][t.completion_mask]
        s_logits = full_logits(tr.model, s)[:, s.predicting_slice()][s.completion_mask]
        tokens = s.completion_ids[s.completion_mask]
        out = naive_loss(s_logits.float(), t_logits.float(), tokens, tr.loss_spec, normalizer=n)
        out.loss.backward()

    def chunked():
        tr.micro_loss(mb, n).loss.backward()

    res = {"tokens": n}
    tr.model.train()
    for name, fn in (("naive", naive), ("chunked", chunked)):
        fn()  # warm-up
        tr.optimizer.zero_grad(set_to_none=True)
        best = None
        for _ in range(repeats):
            with Meter() as m:
                fn()
            tr.optimizer.zero_grad(set_to_none=True)
            if best is None or m.seconds < best.seconds:
                best = m
        res[name] = {"seconds": round(best.seconds, 4),
                     "peak_mib": round(best.peak_mib, 1) if best.peak_mib is not None else None}
    return res


def process_age_s() -> float:
    """Seconds since this process started (the kernel's start time, so imports count)."""
    import psutil

    return time.time() - psutil.Process().create_time()


def h100_split(records: list[dict], util: float, total_mib: float) -> dict:
    """What an 80 GB H100 would hold, from the measured phases (MiB, this process, NVML).

    Rollout: vLLM awake takes util x this GPU's memory; the rest of the rollout peak is the
    trainer's (weights, LoRA, optimizer state, torch's cache). Training: vLLM asleep; the peak is
    the trainer's plus vLLM's sleeping remainder. On an H100 vLLM would take U x 81,559 MiB."""
    steady = records[1:] or records
    rollout = max(r["rollout_peak_memory_mib"] for r in steady)
    train = max(r["train_peak_memory_mib"] for r in steady)
    vllm_awake = util * total_mib
    trainer_at_rollout = max(0.0, rollout - vllm_awake)
    margin = 0.02 * H100_MIB  # fragmentation, NCCL buffers on 4 processes
    max_util = (H100_MIB - margin - trainer_at_rollout) / H100_MIB
    need_06 = trainer_at_rollout + PROFILE_UTIL * H100_MIB
    return {
        "vllm_budget_mib": round(vllm_awake), "rollout_peak_mib": round(rollout), "train_peak_mib": round(train),
        "trainer_share_at_rollout_mib": round(trainer_at_rollout),
        "h100_mib": H100_MIB, "h100_at_0_6": {"rollout_mib": round(need_06), "train_mib": round(train),
                                              "fits": need_06 <= H100_MIB - margin and train <= H100_MIB - margin},
        "h100_left_for_training_at_0_6_mib": round(H100_MIB - PROFILE_UTIL * H100_MIB),
        "h100_max_gpu_memory_utilization": round(max_util, 3),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny model on the CPU, seconds")
    ap.add_argument("--backend", choices=("auto", "vllm", "hf"), default="auto", help="rollouts (auto: vllm if installed)")
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps (default 10 with vLLM, 2 with HF)")
    ap.add_argument("--grad-accum", type=int, default=None, help=f"default {GRAD_ACCUM}")
    ap.add_argument("--gpu-memory-utilization", type=float, default=None,
                    help="vLLM's share of this GPU (default: what 0.6 gives on an 80 GB H100)")
    ap.add_argument("--loss-parts", action="store_true", help="also the loss-only and micro-step comparisons")
    ap.add_argument("--model-dir", type=Path, help="random model dir to reuse (built there if missing)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("no CUDA device: run on the GPU machine, or pass --smoke", file=sys.stderr)
        return 2
    if args.smoke:
        torch.set_num_threads(2)
    from trainer.rollout import choose_backend

    backend = "hf" if args.smoke else choose_backend(args.backend)
    batch = SMOKE["batch"] if args.smoke else BATCH
    completion = SMOKE["completion"] if args.smoke else COMPLETION
    steps = args.steps or (SMOKE["steps"] if args.smoke else STEPS[backend])
    grad_accum = args.grad_accum or (SMOKE["grad_accum"] if args.smoke else GRAD_ACCUM)
    loss_parts = args.loss_parts or args.smoke
    device = "cpu-smoke" if args.smoke else device_slug()
    total_mib = torch.cuda.get_device_properties(0).total_memory / 2**20 if torch.cuda.is_available() else None
    util = args.gpu_memory_utilization
    if util is None and backend == "vllm":
        util = round(PROFILE_UTIL * H100_MIB / total_mib, 4)  # the H100's absolute budget at 0.6
    suffix = "" if backend == "hf" else f"_{backend}"
    out_path = args.out or ROOT / "benchmarks" / "results" / f"trainer_{device}{suffix}.json"

    t_all = time.perf_counter()
    started_s = process_age_s()
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        model_dir, data = build_assets(work, args.smoke, args.model_dir)
        assets_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        tr = make_trainer(model_dir, data, work / "out", batch, completion, steps, grad_accum, backend, util)
        setup_s = time.perf_counter() - t0
        ready_age_s = process_age_s()
        print(f"trainer ready ({tr.backend.name} rollouts{f', gpu_memory_utilization {util}' if util else ''}): "
              f"assets {assets_s:.1f} s, trainer + engine {setup_s:.1f} s", flush=True)
        records = []
        first_step_age_s = None
        for step in range(1, steps + 1):
            rec = tr.train_step(step)
            first_step_age_s = first_step_age_s or process_age_s()
            rec["train_seconds"] = rec["step_seconds"] - rec["rollout_seconds"]
            rec["rollout_tokens_per_second"] = rec["completion_length"] * batch * grad_accum / max(rec["rollout_seconds"], 1e-9)
            records.append({k: rec.get(k) for k in (
                "step", "loss", "grad_norm", "kl", "frac_clipped", "completion_length", "rollout_seconds",
                "train_seconds", "step_seconds", "tokens_per_second", "rollout_tokens_per_second", "peak_memory_mib",
                "rollout_peak_memory_mib", "train_peak_memory_mib", "memory_source")})
            out_path.parent.mkdir(parents=True, exist_ok=True)  # partial figures survive a cut-off run
            out_path.write_text(json.dumps({"benchmark": "trainer", "partial": True, "device": device,
                                            "gpu_memory_utilization": util, "setup_seconds": round(setup_s, 2),
                                            "startup_age_s": round(ready_age_s - assets_s, 1), "steps": records},
                                           indent=1) + "\n")
            print(f"step {step}: step {rec['step_seconds']:.2f}s (rollout {rec['rollout_seconds']:.2f}s, "
                  f"{rec['rollout_tokens_per_second']:.0f} tok/s; train {rec['train_seconds']:.2f}s), completion "
                  f"{rec['completion_length']:.0f} tokens, peak {rec['peak_memory_mib']:.0f} MiB (rollout "
                  f"{rec['rollout_peak_memory_mib']:.0f} / train {rec['train_peak_memory_mib']:.0f}, "
                  f"{rec['memory_source']}), loss {rec['loss']:.4g}", flush=True)
        loss = micro = None
        if loss_parts:
            repeats = 1 if args.smoke else 2
            loss = loss_only(tr, batch * completion, repeats)
            micro = micro_step(tr, repeats)
        tr.memory.close()
        tr.backend.close()
    steady = records[1:] or records

    def mean(key):
        return round(sum(r[key] for r in steady) / len(steady), 3)

    def ratio(a, b):
        return round(a / b, 3) if a is not None and b else None

    step_s = mean("step_seconds")
    # 4 GPUs, each with this per-device work; the start-up is paid once per process, in parallel
    startup_s = round(ready_age_s - assets_s, 1)  # imports, model load, engine start (assets are ours)
    first = records[0]["step_seconds"]  # the first step pays one-off costs (kernels, allocator growth)
    n_more = 99
    projected = round(startup_s + first + n_more * step_s, 1)
    rollout_share = mean("rollout_seconds") / step_s if step_s else 0.0
    slow = 1 + rollout_share * (H100_OVER_H200_DECODE - 1)
    projected_h100 = round(startup_s + (first + n_more * step_s) * slow, 1)
    result = {
        "benchmark": "trainer", "device": device, "smoke": args.smoke,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "gpu_total_mib": round(total_mib) if total_mib else None,
        "config": {"model": "tiny (untrained)" if args.smoke else "random-init Qwen3-1.7B shapes, bf16",
                   "per_device_batch": batch, "grad_accum": grad_accum, "completion_tokens": completion,
                   "rollout_backend": tr.backend.name, "gpu_memory_utilization": util,
                   "gradient_checkpointing": tr.device.type == "cuda",
                   "lora_r": tr.hp["lora_r"], "loss_chunk_size": tr.cfg.loss_chunk_size},
        "setup_seconds": round(setup_s, 2), "assets_seconds": round(assets_s, 2),
        "startup": {"process_age_at_script_start_s": round(started_s, 1),
                    "process_start_to_trainer_ready_s": round(ready_age_s - assets_s, 1),
                    "process_start_to_first_step_end_s": round(first_step_age_s - assets_s, 1),
                    "note": "the benchmark's own asset build (random weights saved to disk) is left out"},
        "steps": records,
        "steady_state": {"steps": [r["step"] for r in steady], "step_seconds": step_s,
                         "rollout_seconds": mean("rollout_seconds"), "train_seconds": mean("train_seconds"),
                         "rollout_tokens_per_second": round(mean("rollout_tokens_per_second"), 1)},
        "step_seconds": records[-1]["step_seconds"], "rollout_seconds": records[-1]["rollout_seconds"],
        "train_seconds_without_rollout": round(records[-1]["step_seconds"] - records[-1]["rollout_seconds"], 3),
        "peak_memory_mib": max(r["peak_memory_mib"] for r in records),
        "memory_source": records[-1]["memory_source"],
        "projection_100_steps_4_gpus": {
            "startup_seconds": startup_s, "seconds_on_h200": projected,
            "seconds_on_h100_estimate": projected_h100, "official_seconds_4xh100": OFFICIAL_100_STEPS_S,
            "note": "start-up + the first step + 99 x the steady step (each of 4 GPUs does this per-device work); the "
                    "H100 estimate scales the rollout share by the HBM bandwidth ratio 4.8/3.35; completions "
                    "forced to 1024 tokens (real ones stop earlier, so this is the slow end)"},
        "total_seconds": None,
    }
    if tr.device.type == "cuda" and records[0].get("rollout_peak_memory_mib") and util:
        result["h100_memory_split"] = h100_split(records, util, total_mib)
    if loss is not None:
        loss_peak_ratio = ratio(loss["chunked"]["peak_mib"], loss["naive"]["peak_mib"])
        result.update({
            "loss_only": loss, "micro_step": micro,
            "loss_peak_ratio_chunked_over_naive": loss_peak_ratio,
            "micro_step_peak_ratio": ratio(micro["chunked"]["peak_mib"], micro["naive"]["peak_mib"]),
            "micro_step_time_ratio": ratio(micro["chunked"]["seconds"], micro["naive"]["seconds"]),
            # goals are judged on the GPU only (the CPU smoke run has no memory figures and tiny shapes)
            "goal_loss_peak_at_most_half": None if args.smoke else loss_peak_ratio is not None and loss_peak_ratio <= 0.5,
            "goal_step_not_slower": None if args.smoke else micro["chunked"]["seconds"] <= micro["naive"]["seconds"] * 1.05,
        })
    result["total_seconds"] = round(time.perf_counter() - t_all, 1)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=1) + "\n")
    ss = result["steady_state"]
    print(f"steady state (steps {ss['steps'][0]}-{ss['steps'][-1]}): step {ss['step_seconds']:.2f} s = rollout "
          f"{ss['rollout_seconds']:.2f} s ({ss['rollout_tokens_per_second']:.0f} tok/s) + train {ss['train_seconds']:.2f} s")
    pr = result["projection_100_steps_4_gpus"]
    print(f"projected 100 steps on 4 GPUs: {pr['seconds_on_h200']:.0f} s (H200), ~{pr['seconds_on_h100_estimate']:.0f} s "
          f"(H100 estimate) vs official {OFFICIAL_100_STEPS_S:.0f} s; start-up {pr['startup_seconds']:.0f} s")
    if "h100_memory_split" in result:
        sp = result["h100_memory_split"]
        print(f"memory: rollout peak {sp['rollout_peak_mib']} MiB (vLLM budget {sp['vllm_budget_mib']}), train peak "
              f"{sp['train_peak_mib']} MiB; on an 80 GB H100 at 0.6: {sp['h100_at_0_6']} ; largest utilisation that "
              f"fits there: {sp['h100_max_gpu_memory_utilization']}")
    if loss is not None:
        print(f"loss alone ({loss['positions']} positions x {loss['vocab']} vocab): "
              f"naive {loss['naive']['seconds']:.3f}s / {loss['naive']['peak_mib']} MiB, "
              f"chunked {loss['chunked']['seconds']:.3f}s / {loss['chunked']['peak_mib']} MiB "
              f"(peak ratio {result['loss_peak_ratio_chunked_over_naive']}, same loss {loss['same_loss']})")
        print(f"micro-step without rollout ({micro['tokens']} tokens): naive {micro['naive']['seconds']:.3f}s / "
              f"{micro['naive']['peak_mib']} MiB, chunked {micro['chunked']['seconds']:.3f}s / "
              f"{micro['chunked']['peak_mib']} MiB")
    print(f"wrote {out_path} ({result['total_seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
