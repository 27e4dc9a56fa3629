"""Trainer speed and memory: real OPSD optimizer steps, and the chunked loss against a naive one.

GPU (default): random-init Qwen3-1.7B shapes in bf16 (opsdkit.shapes) with the tiny tokenizer,
LoRA r 64 / alpha 128, gradient checkpointing, per-device batch 4, gradient accumulation 1,
Hugging Face generate rollouts forced to exactly 1024 tokens (min_new_tokens = max). It reports
1. each optimizer step of trainer.train.OPSDTrainer: step seconds, rollout seconds, peak memory;
2. the loss alone on real-shape hidden states (4 x 1024 positions, hidden 2048, vocabulary
   151,936): peak memory and time of forward+backward, chunked (trainer.loss.chunked_loss) vs
   naive (full-vocabulary fp32 tensors for every position at once: trainer.loss.naive_loss);
3. one training micro-step without the rollout (teacher forward, student forward, loss,
   backward) on the last step's real batch, chunked vs naive (full model logits).
Goal: the loss at <= 50% of the naive peak with no slower step.
--smoke: the untrained tiny model on the CPU, 12-token completions, seconds (memory: None).

    python benchmarks/bench_trainer.py [--smoke] [--steps 2] [--out FILE]

Writes benchmarks/results/trainer_<device>.json (or --out) and prints the figures.
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

# Sized for one H200 in well under 8 minutes (HF generate ~13 decode steps/s at batch 4, so
# ~75 s per 1024-token rollout).
BATCH = 4
COMPLETION = 1024
STEPS = 2
SOLUTION_REPEAT = 12  # teacher prompts of a few hundred tokens, like real reference solutions
SMOKE = dict(batch=2, completion=12, steps=1)


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


def build_assets(work: Path, smoke: bool) -> tuple[str, str]:
    """(model dir, dataset file): a random model of the benchmark's shape with the tiny tokenizer."""
    import torch

    from opsdkit.tiny import TRACE_COLUMN, build_untrained_tiny, make_rows, train_tokenizer

    rows = make_rows(64, seed=11)
    for r in rows:
        r["solution"] = " ".join([r["solution"]] * (2 if smoke else SOLUTION_REPEAT))
    data = work / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    model_dir = work / "model"
    if smoke:
        build_untrained_tiny(model_dir)
        return str(model_dir), str(data)
    from opsdkit.shapes import random_qwen3

    tok = train_tokenizer([r[k] for r in rows for k in ("problem", "solution", TRACE_COLUMN)])
    model = random_qwen3("qwen3-1.7b", dtype=torch.bfloat16, device="cuda",
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    del model
    torch.cuda.empty_cache()
    return str(model_dir), str(data)


def make_trainer(model_dir: str, data: str, out: Path, batch: int, completion: int, steps: int):
    from opsdctl.recipes import knobs
    from opsdctl.recipes.profiles import get_profile, with_overrides
    from trainer.cli import TrainConfig
    from trainer.train import OPSDTrainer

    hp = {**knobs.default_hparams(), "max_completion_length": completion}  # the released recipe
    prof = with_overrides(get_profile("qwen3-1.7b"), model=model_dir, dataset=data, max_steps=steps,
                          per_device_train_batch_size=batch, gradient_accumulation_steps=1, save_steps=10**6)
    cfg = TrainConfig(profile=prof, hparams=hp, method=knobs.default_method(), seed=0, output_dir=out,
                      rollout_backend="hf", keep_global_batch=False)  # one process, accumulation 1
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny model on the CPU, seconds")
    ap.add_argument("--steps", type=int, default=None, help=f"optimizer steps (default {STEPS})")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("no CUDA device: run on the GPU machine, or pass --smoke", file=sys.stderr)
        return 2
    if args.smoke:
        torch.set_num_threads(2)
    batch = SMOKE["batch"] if args.smoke else BATCH
    completion = SMOKE["completion"] if args.smoke else COMPLETION
    steps = args.steps or (SMOKE["steps"] if args.smoke else STEPS)
    device = "cpu-smoke" if args.smoke else device_slug()
    out_path = args.out or ROOT / "benchmarks" / "results" / f"trainer_{device}.json"

    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        model_dir, data = build_assets(work, args.smoke)
        tr = make_trainer(model_dir, data, work / "out", batch, completion, steps)
        setup_s = time.perf_counter() - t0
        records = []
        for step in range(1, steps + 1):
            rec = tr.train_step(step)
            records.append({k: rec[k] for k in ("step", "loss", "grad_norm", "kl", "frac_clipped", "completion_length",
                                                "rollout_seconds", "step_seconds", "tokens_per_second",
                                                "peak_memory_mib")})
            print(f"step {step}: step {rec['step_seconds']:.2f}s (rollout {rec['rollout_seconds']:.2f}s), "
                  f"completion {rec['completion_length']:.0f} tokens, peak {rec['peak_memory_mib']:.0f} MiB, "
                  f"loss {rec['loss']:.4g}", flush=True)
        repeats = 1 if args.smoke else 2
        loss = loss_only(tr, batch * completion, repeats)
        micro = micro_step(tr, repeats)
    last = records[-1]

    def ratio(a, b):
        return round(a / b, 3) if a is not None and b else None

    loss_peak_ratio = ratio(loss["chunked"]["peak_mib"], loss["naive"]["peak_mib"])
    result = {
        "benchmark": "trainer", "device": device, "smoke": args.smoke,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "config": {"model": "tiny (untrained)" if args.smoke else "random-init Qwen3-1.7B shapes, bf16",
                   "per_device_batch": batch, "grad_accum": 1, "completion_tokens": completion,
                   "rollout_backend": tr.backend.name, "gradient_checkpointing": tr.device.type == "cuda",
                   "lora_r": tr.hp["lora_r"], "loss_chunk_size": tr.cfg.loss_chunk_size},
        "setup_seconds": round(setup_s, 2),
        "steps": records,
        "step_seconds": last["step_seconds"], "rollout_seconds": last["rollout_seconds"],
        "train_seconds_without_rollout": round(last["step_seconds"] - last["rollout_seconds"], 3),
        "peak_memory_mib": max(r["peak_memory_mib"] for r in records),
        "loss_only": loss,
        "micro_step": micro,
        "loss_peak_ratio_chunked_over_naive": loss_peak_ratio,
        "micro_step_peak_ratio": ratio(micro["chunked"]["peak_mib"], micro["naive"]["peak_mib"]),
        "micro_step_time_ratio": ratio(micro["chunked"]["seconds"], micro["naive"]["seconds"]),
        # goals are judged on the GPU only (the CPU smoke run has no memory figures and tiny shapes)
        "goal_loss_peak_at_most_half": None if args.smoke else loss_peak_ratio is not None and loss_peak_ratio <= 0.5,
        "goal_step_not_slower": None if args.smoke else micro["chunked"]["seconds"] <= micro["naive"]["seconds"] * 1.05,
        "total_seconds": round(time.perf_counter() - t_all, 1),
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"loss alone ({loss['positions']} positions x {loss['vocab']} vocab): "
          f"naive {loss['naive']['seconds']:.3f}s / {loss['naive']['peak_mib']} MiB, "
          f"chunked {loss['chunked']['seconds']:.3f}s / {loss['chunked']['peak_mib']} MiB "
          f"(peak ratio {loss_peak_ratio}, same loss {loss['same_loss']})")
    print(f"micro-step without rollout ({micro['tokens']} tokens): naive {micro['naive']['seconds']:.3f}s / "
          f"{micro['naive']['peak_mib']} MiB, chunked {micro['chunked']['seconds']:.3f}s / "
          f"{micro['chunked']['peak_mib']} MiB")
    print(f"goals: loss peak <= 50% of naive: {result['goal_loss_peak_at_most_half']}; "
          f"step not slower: {result['goal_step_not_slower']}")
    print(f"wrote {out_path} ({result['total_seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
