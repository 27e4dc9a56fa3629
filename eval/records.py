"""What the evaluator leaves in its output dir, and the pure summary of it.

- `settings.json`: what defines the samples (model, adapter hash, benchmark hash, k, sampling
  settings, the draw and the seed it gives, backend); a resume must match it.
- `samples.jsonl`: one line per finished (problem, sample), appended and fsynced as it lands.
  A crash can leave a torn last line: readers ignore it and the next run cuts it off first.
- `progress.jsonl`: `{"done", "total"}` lines, plus look records carrying per-problem counts.
- `result.json`: schema 1 of the stage contract (DEVELOPERS.md), plus extra keys.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SCHEMA = 1
SAMPLE_KEYS = ("id", "sample", "seed", "text", "n_tokens", "finish_reason", "extracted", "correct")


def write_json_atomic(path: Path, doc) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# --- samples.jsonl ------------------------------------------------------------------------


def read_samples(path: Path) -> tuple[list[dict], int]:
    """(records, bytes up to the last newline). A torn last line (no newline: the writer died
    mid-write) is ignored; a complete line that is not a sample record is skipped."""
    if not path.exists():
        return [], 0
    data = path.read_bytes()
    good = data.rfind(b"\n") + 1
    records = []
    for line in data[:good].splitlines():
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(rec, dict) and all(k in rec for k in ("id", "sample", "correct")):
            records.append(rec)
    return records, good


class SampleLog:
    """Appends sample records durably: one write per line, then flush and fsync."""

    def __init__(self, path: Path):
        _, good = read_samples(path)
        if path.exists() and path.stat().st_size != good:
            os.truncate(path, good)  # drop a torn tail so the next line starts clean
        self.f = open(path, "a", encoding="utf-8")

    def append(self, rec: dict) -> None:
        self.f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())

    def close(self) -> None:
        self.f.close()


def done_map(records: list[dict], wanted_ids: set[str], k: int) -> dict[tuple[str, int], dict]:
    """The first record of each (problem, sample) that belongs to this run."""
    done: dict[tuple[str, int], dict] = {}
    for r in records:
        key = (str(r["id"]), int(r["sample"]))
        if key[0] in wanted_ids and 0 <= key[1] < k and key not in done:
            done[key] = r
    return done


# --- progress.jsonl -----------------------------------------------------------------------


def looks_written(path: Path) -> set[tuple[int, int]]:
    """(look_k, number of problems) of the look records already in progress.jsonl."""
    out = set()
    if path.exists():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("look_k"), int) and isinstance(rec.get("problems"), list):
                out.add((rec["look_k"], len(rec["problems"])))
    return out


def append_line(path: Path, rec: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")


# --- summary ------------------------------------------------------------------------------


def summarize(problem_ids: list[str], done: dict[tuple[str, int], dict], *, k: int,
              below: int | None = None) -> list[dict]:
    """Per-problem counts over the samples with index < `below` (default k)."""
    limit = k if below is None else below
    out = []
    for pid in problem_ids:
        recs = [done[(pid, s)] for s in range(limit) if (pid, s) in done]
        reasons: dict[str, int] = {"stop": 0, "length": 0}
        for r in recs:
            reasons[str(r.get("finish_reason"))] = reasons.get(str(r.get("finish_reason")), 0) + 1
        tokens = [r["n_tokens"] for r in recs if isinstance(r.get("n_tokens"), (int, float))]
        out.append({
            "id": pid,
            "correct": sum(1 for r in recs if r["correct"]),
            "samples": len(recs),
            "mean_tokens": round(sum(tokens) / len(tokens), 2) if tokens else 0.0,
            "finish_reasons": reasons,
        })
    return out


def avg_at_k(problems: list[dict]) -> float:
    """Mean over problems of the fraction correct (problems without samples count as 0)."""
    if not problems:
        return 0.0
    return sum(p["correct"] / p["samples"] if p["samples"] else 0.0 for p in problems) / len(problems)


def final_line(k: int, problems: list[dict]) -> str:
    correct = sum(p["correct"] for p in problems)
    n = len(problems)
    return (f"FINAL avg@{k} accuracy: {100 * avg_at_k(problems):.2f}% "
            f"({correct}/{n * k} solutions correct on {n} problems)")
