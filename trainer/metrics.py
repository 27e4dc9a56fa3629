"""What a run leaves for people and for opsdctl: metrics.jsonl, progress.jsonl, train_result.json,
and Hugging Face Trainer style dict lines on stdout (external tools parse those)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

STEP_FIELDS = ("step", "loss", "grad_norm", "learning_rate", "kl", "frac_clipped", "completion_length",
               "rollout_seconds", "step_seconds", "tokens_per_second", "peak_memory_mib",
               "rollout_peak_memory_mib", "train_peak_memory_mib", "memory_source", "on_policy")


def _r(x, nd=6):
    return round(float(x), nd) if x is not None else None


def hf_line(d: dict) -> str:
    """A dict printed the way transformers' Trainer prints its logs: {'loss': 0.1, ...}."""
    return repr(d)


class RunLog:
    """Writes the files (main process only) and prints the log lines."""

    def __init__(self, out_dir: Path, max_steps: int, enabled: bool = True):
        self.out = Path(out_dir)
        self.max_steps = max_steps
        self.enabled = enabled
        self.steps: list[dict] = []
        if enabled:
            self.out.mkdir(parents=True, exist_ok=True)
            for name in ("metrics.jsonl", "progress.jsonl"):
                (self.out / name).write_text("")

    def info(self, msg: str) -> None:
        if self.enabled:
            print(msg, flush=True)

    def _append(self, name: str, record: dict) -> None:
        with open(self.out / name, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()

    def step(self, record: dict, epoch: float) -> None:
        self.steps.append(record)
        if not self.enabled:
            return
        self._append("metrics.jsonl", {k: record.get(k) for k in STEP_FIELDS})
        self._append("progress.jsonl", {"step": record["step"], "max_steps": self.max_steps})
        kind = "on_policy_loss" if record["on_policy"] else "off_policy_loss"
        # exactly the keys of the released trainer's lines; the rest goes on the next line
        print(hf_line({"loss": round(record["loss"], 4), "grad_norm": round(record["grad_norm"], 4),
                       "learning_rate": record["learning_rate"], kind: round(record["loss"], 4),
                       "epoch": round(epoch, 2)}), flush=True)
        print(f"step {record['step']}/{self.max_steps}: kl {record['kl']:.4g}, clipped {record['frac_clipped']:.3f}, "
              f"rollout {record['rollout_seconds']:.2f}s, "
              f"step {record['step_seconds']:.2f}s, {record['tokens_per_second']:.1f} tok/s, "
              f"completion length {record['completion_length']:.1f}, peak {record['peak_memory_mib']:.0f} MiB "
              f"(rollout {record.get('rollout_peak_memory_mib', 0):.0f} / train {record.get('train_peak_memory_mib', 0):.0f}, "
              f"{record.get('memory_source', '?')})",
              flush=True)

    def finish(self, *, runtime: float, samples: int, epoch: float, extra: dict) -> dict:
        steps = self.steps
        n = max(1, len(steps))
        train_loss = sum(s["loss"] for s in steps) / n
        summary = {
            "train_runtime": round(runtime, 4),
            "train_samples_per_second": round(samples / runtime, 3) if runtime > 0 else 0.0,
            "train_steps_per_second": round(len(steps) / runtime, 3) if runtime > 0 else 0.0,
            "train_loss": round(train_loss, 6),
            "epoch": round(epoch, 2),
        }
        result = {
            "steps": len(steps),
            "final_loss": _r(steps[-1]["loss"]) if steps else None,
            "train_loss": _r(train_loss),
            "mean_kl": _r(sum(s["kl"] for s in steps) / n),
            "frac_clipped": _r(sum(s["frac_clipped"] for s in steps) / n),
            "step_seconds": _r(sum(s["step_seconds"] for s in steps) / n, 4),
            "rollout_seconds": _r(sum(s["rollout_seconds"] for s in steps) / n, 4),
            # GPU: NVML's figure for this process (trainer.gpu_memory); CPU: peak RSS
            "peak_memory_mib": _r(max((s["peak_memory_mib"] for s in steps), default=0.0), 1),
            "rollout_peak_memory_mib": _r(max((s.get("rollout_peak_memory_mib", 0.0) for s in steps), default=0.0), 1),
            "train_peak_memory_mib": _r(max((s.get("train_peak_memory_mib", 0.0) for s in steps), default=0.0), 1),
            "memory_source": steps[-1].get("memory_source") if steps else None,
            "train_runtime": round(runtime, 4),
            "on_policy_steps": sum(1 for s in steps if s["on_policy"]),
            **extra,
        }
        if self.enabled:
            print(hf_line(summary), flush=True)
            tmp = self.out / "train_result.json.tmp"
            tmp.write_text(json.dumps(result, indent=1) + "\n")
            os.replace(tmp, self.out / "train_result.json")
            sys.stdout.flush()
        return result
