"""Pure parsers for what stages leave behind: eval results, training statistics, progress.

Nothing here touches the store or starts processes; every function takes text or a path and
returns plain data, so each format has its own small tests.

- eval:  `result.json` (schema 1 of the stage contract, DEVELOPERS.md), else the log's last `FINAL avg@k accuracy:` line.
- train: `train_result.json` + `metrics.jsonl`, else Hugging Face Trainer dict lines in the log
         (`{'loss': ...}` parsed with ast.literal_eval) and vLLM rollout timing lines.
- progress: `progress.jsonl` records, else log adapters (the Trainer's bar or an explicit step
         field -> steps; never a count of dict lines; tqdm bars such as
         `Processed prompts:  57%|...| 48/84 [...]` -> 48/84 prompts).
Scores whose numbers cannot be true are refused (opsdctl.run.score_checks).
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from opsdctl.fsutil import read_tail
from opsdctl.run import score_checks, stage_json

RESULT_SCHEMA = 1

FINAL_RE = re.compile(
    r"FINAL avg@(\d+) accuracy: ([0-9.]+)% \((\d+)/(\d+) solutions correct on (\d+) problems\)"
)
# Logs are read in tail windows: a stage may print gigabytes, and what is read from its log (the
# FINAL line, the Trainer's last dict lines) is at its end. Lines longer than MAX_LINE are cut.
LOG_TAIL_BYTES = 8 << 20
STATS_TAIL_BYTES = 32 << 20
MAX_LINE = 64 << 10
MAX_BAR_LINE = 1024
MAX_COUNT_DIGITS = 18  # counts beyond 64 bits are not counts (and int() of 5000 digits raises)
HF_DICT_RE = re.compile(r"\{'[A-Za-z_][^{}]*\}")
ROLLOUT_RE = re.compile(r"vLLM generation done - elapsed time: ([0-9.]+)s")
# tqdm: "desc:  57%|#####     | 48/84 [12:40<06:40, ...]" (desc optional)
TQDM_RE = re.compile(r"(?:(?P<desc>[A-Za-z][^|\r\n%]*?):\s*)?(?P<pct>\d+)%\|[^|\r\n]*\|\s*(?P<done>\d+)/(?P<total>\d+)\s*\[")


class ResultError(ValueError):
    """A stage's result exists but is malformed (becomes the chain's failure reason)."""


# --- evaluation ---------------------------------------------------------------------------


@dataclass
class EvalResult:
    k: int
    avg_at_k: float  # points, 0-100
    n_problems: int
    n_correct: Optional[int]
    n_samples: Optional[int]
    problems: Optional[list[dict]]
    partial: bool
    seconds: Optional[float]
    source: str  # "result.json" | "final-line" | "progress"

    def to_dict(self) -> dict:
        return asdict(self)


def _num(x: Any, name: str, where: str, integer: bool = False, lo: float | None = None, hi: float | None = None):
    if isinstance(x, bool) or not isinstance(x, (int, float)) or (isinstance(x, float) and not math.isfinite(x)):
        raise ResultError(f"{where}: {name} = {x!r}: must be a number")
    if integer and (isinstance(x, float) and not x.is_integer()):
        raise ResultError(f"{where}: {name} = {x!r}: must be a whole number")
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        raise ResultError(f"{where}: {name} = {x!r}: out of range [{lo}, {hi}]")
    return int(x) if integer else float(x)


def parse_result_json(text: str, where: str = "result.json") -> EvalResult:
    """Validate a schema-1 result.json; avg_at_k (a fraction) becomes points."""
    try:
        doc = stage_json.loads(text, where)
    except stage_json.StageJsonError as exc:
        raise ResultError(str(exc)) from None
    return _result_doc(doc, where)


def read_result_json(path: Path) -> EvalResult:
    """parse_result_json of a file, refused unread when it is larger than any result can be."""
    try:
        doc = stage_json.read(path)
    except stage_json.StageJsonError as exc:
        raise ResultError(str(exc)) from None
    return _result_doc(doc, str(path))


def _result_doc(doc: Any, where: str) -> EvalResult:
    if not isinstance(doc, dict):
        raise ResultError(f"{where}: must be a JSON object")
    if doc.get("schema") != RESULT_SCHEMA:
        raise ResultError(f"{where}: schema = {doc.get('schema')!r}: this opsdctl reads schema {RESULT_SCHEMA}")
    k = _num(doc.get("k"), "k", where, integer=True, lo=1)
    avg = _num(doc.get("avg_at_k"), "avg_at_k", where, lo=0.0, hi=1.0)
    n_problems = _num(doc.get("n_problems"), "n_problems", where, integer=True, lo=0)
    problems = doc.get("problems")
    n_correct = n_samples = None
    if problems is not None:
        if not isinstance(problems, list):
            raise ResultError(f"{where}: problems: must be a list")
        clean = []
        for i, p in enumerate(problems):
            pw = f"{where}: problems[{i}]"
            if not isinstance(p, dict) or "id" not in p:
                raise ResultError(f"{pw}: must be an object with id, correct, samples")
            samples = _num(p.get("samples"), "samples", pw, integer=True, lo=0, hi=2**31)
            correct = _num(p.get("correct"), "correct", pw, integer=True, lo=0, hi=samples)
            item = {"id": str(p["id"]), "correct": correct, "samples": samples}
            if p.get("mean_tokens") is not None:
                item["mean_tokens"] = _num(p["mean_tokens"], "mean_tokens", pw, lo=0)
            clean.append(item)
        if len(clean) != n_problems:
            raise ResultError(f"{where}: n_problems = {n_problems} but problems lists {len(clean)}")
        problems = clean
        n_correct = sum(p["correct"] for p in clean)
        n_samples = sum(p["samples"] for p in clean)
        for name, total in (("n_correct", n_correct), ("n_samples", n_samples)):
            if name in doc and doc[name] != total:
                raise ResultError(f"{where}: {name} = {doc[name]!r} but the problems sum to {total}")
        why = score_checks.counts_problem(avg, clean)
        if why is not None:
            raise ResultError(f"{where}: {why}")
    partial = doc.get("partial", False)
    if not isinstance(partial, bool):
        raise ResultError(f"{where}: partial = {partial!r}: must be true or false")
    seconds = doc.get("seconds")
    seconds = None if seconds is None else _num(seconds, "seconds", where, lo=0)
    return EvalResult(k, 100.0 * avg, n_problems, n_correct, n_samples, problems, partial, seconds, "result.json")


def parse_final_line(log_text: str) -> Optional[EvalResult]:
    """The last `FINAL avg@k accuracy: P% (c/s solutions correct on n problems)` line, or None.
    A line whose numbers cannot be true raises ResultError quoting it."""
    last = None
    for m in FINAL_RE.finditer(log_text):
        last = m
    if last is None:
        return None
    fields = last.groups()
    line = _line_of(log_text, last)
    if any(len(f) > MAX_COUNT_DIGITS for f in fields):
        raise ResultError(f"impossible FINAL line (a number too large to be a count): {line}")
    k, pct, correct, samples, n = fields
    why = score_checks.final_line_problem(int(k), pct, int(correct), int(samples), int(n))
    if why is not None:
        raise ResultError(f"impossible FINAL line ({why}): {line}")
    return EvalResult(
        k=int(k),
        avg_at_k=float(pct),
        n_problems=int(n),
        n_correct=int(correct),
        n_samples=int(samples),
        problems=None,
        partial=False,
        seconds=None,
        source="final-line",
    )


def _line_of(text: str, m: re.Match) -> str:
    """The whole log line a match sits on, quoted, at most 200 characters."""
    start = max(text.rfind("\n", 0, m.start()), text.rfind("\r", 0, m.start())) + 1
    ends = [i for i in (text.find("\n", m.end()), text.find("\r", m.end())) if i != -1]
    line = text[start:min(ends) if ends else len(text)].strip()
    return repr(line if len(line) <= 200 else line[:197] + "...")


def read_eval_result(stage_dir: Path, log_path: Path) -> Optional[EvalResult]:
    """The stage contract: result.json if present (malformed -> ResultError), else the FINAL line."""
    result_file = Path(stage_dir) / "result.json"
    if result_file.is_file():
        return read_result_json(result_file)
    if not Path(log_path).is_file():
        return None
    return parse_final_line(read_tail(log_path, LOG_TAIL_BYTES))


def partial_from_progress(record: dict) -> Optional[EvalResult]:
    """A partial score from a progress record carrying per-problem counts (a look at k < K)."""
    problems = record.get("problems")
    if not isinstance(problems, list) or not problems:
        return None
    try:
        clean = [{"id": str(p["id"]), "correct": int(p["correct"]), "samples": int(p["samples"])} for p in problems]
    except (KeyError, TypeError, ValueError):
        return None
    if any(p["samples"] <= 0 or not 0 <= p["correct"] <= p["samples"] for p in clean):
        return None  # impossible counts: no partial score from them
    avg = 100.0 * sum(p["correct"] / p["samples"] for p in clean) / len(clean)
    k = int(record.get("look_k") or max(p["samples"] for p in clean))
    return EvalResult(
        k=k, avg_at_k=avg, n_problems=len(clean), n_correct=sum(p["correct"] for p in clean),
        n_samples=sum(p["samples"] for p in clean), problems=clean, partial=True, seconds=None, source="progress",
    )


# --- training statistics ------------------------------------------------------------------


@dataclass
class TrainSummary:
    steps: Optional[int] = None
    final_loss: Optional[float] = None
    mean_kl: Optional[float] = None
    frac_clipped: Optional[float] = None
    step_seconds: Optional[float] = None
    rollout_seconds: Optional[float] = None
    peak_mem_mib: Optional[float] = None
    train_runtime: Optional[float] = None
    curve: list[dict] = field(default_factory=list)
    source: str = ""
    metrics: dict = field(default_factory=dict)  # [stages.train.metrics]: name -> {mean, last, steps}

    def to_dict(self) -> dict:
        return asdict(self)

    def empty(self) -> bool:
        return not self.curve and self.final_loss is None and self.train_runtime is None


# Accepted spellings in metrics.jsonl / train_result.json (first match wins).
ALIASES = {
    "step": ("step", "global_step", "steps"),
    "loss": ("loss", "train_loss"),
    "lr": ("learning_rate", "lr"),
    "kl": ("kl", "mean_kl", "kl_mean", "kl_ts", "mean_token_kl"),
    "clip": ("frac_clipped", "fraction_clipped", "clip_frac", "clipped_frac", "clip_fraction"),
    "step_seconds": ("step_seconds", "step_s", "step_time"),
    "rollout_seconds": ("rollout_seconds", "rollout_s", "rollout_time"),
    "peak_mem": ("peak_mem_mib", "peak_memory_mib", "peak_gpu_memory_mib", "max_memory_mib"),
    "runtime": ("train_runtime", "runtime_seconds", "seconds"),
    "final_loss": ("final_loss", "train_loss", "loss"),
}


def _pick(d: dict, what: str) -> Optional[float]:
    for key in ALIASES[what]:
        v = d.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return None


def _mean(xs: Iterable[Optional[float]]) -> Optional[float]:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def _jsonl(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or len(line) > MAX_LINE:
            continue
        try:
            rec = stage_json.loads(line, "a JSON line")
        except stage_json.StageJsonError:
            continue  # a line being written when we read, or junk: skip it
        if isinstance(rec, dict):
            out.append(rec)
    return out


def summarize_metrics(records: list[dict], totals: Optional[dict] = None) -> TrainSummary:
    """From metrics.jsonl records (one per optimizer step) and train_result.json totals."""
    totals = totals or {}
    curve = []
    for i, rec in enumerate(records):
        point = {"step": int(_pick(rec, "step") or i + 1)}
        for what, key in (("loss", "loss"), ("kl", "kl"), ("clip", "frac_clipped"), ("lr", "learning_rate")):
            v = _pick(rec, what)
            if v is not None:
                point[key] = v
        curve.append(point)
    losses = [p["loss"] for p in curve if "loss" in p]
    peak = [_pick(r, "peak_mem") for r in records] + [_pick(totals, "peak_mem")]
    peak = [p for p in peak if p is not None]
    return TrainSummary(
        steps=int(_pick(totals, "step") or (curve[-1]["step"] if curve else 0)) or None,
        final_loss=_pick(totals, "final_loss") if _pick(totals, "final_loss") is not None else (losses[-1] if losses else None),
        mean_kl=_pick(totals, "kl") if _pick(totals, "kl") is not None else _mean(p.get("kl") for p in curve),
        frac_clipped=_pick(totals, "clip") if _pick(totals, "clip") is not None else _mean(p.get("frac_clipped") for p in curve),
        step_seconds=_mean(_pick(r, "step_seconds") for r in records) or _pick(totals, "step_seconds"),
        rollout_seconds=_mean(_pick(r, "rollout_seconds") for r in records) or _pick(totals, "rollout_seconds"),
        peak_mem_mib=max(peak) if peak else None,
        train_runtime=_pick(totals, "runtime"),
        curve=curve,
        source="metrics.jsonl",
    )


def parse_hf_dicts(log_text: str) -> list[dict]:
    """Every Hugging Face Trainer dict line (`{'loss': ..., 'epoch': ...}`) in a log."""
    out = []
    for m in HF_DICT_RE.finditer(log_text):
        try:
            d = ast.literal_eval(m.group(0))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(d, dict) and all(isinstance(k, str) for k in d):
            out.append(d)
    return out


def explicit_step(d: dict) -> Optional[int]:
    """A dict line's own step field (`step`, `global_step`), when it has one."""
    for key in ("step", "global_step"):
        v = d.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
    return None


def trainer_bar(line: str) -> Optional[tuple[int, int]]:
    """(done, total) of the Hugging Face Trainer's own tqdm bar (the one without a
    description: "Map", "Loading checkpoint shards" and the colocated vLLM's "Processed
    prompts" bars are not optimizer steps)."""
    m = tqdm_bar(line)
    if m is None or m.group("desc") is not None:
        return None
    return int(m.group("done")), int(m.group("total"))


def tqdm_bar(line: str) -> Optional[re.Match]:
    """TQDM_RE on a line that can be a bar: its lazy description scan is quadratic in the
    line's length, and a bar redrawn with \\r is a short line of its own."""
    if len(line) > MAX_BAR_LINE or "%|" not in line:
        return None
    return TQDM_RE.search(line)


def summarize_log(log_text: str) -> TrainSummary:
    """Training statistics from a log alone (external scripts).

    Steps come from the Trainer's progress bar or an explicit step field, never from counting
    dict lines: with logging_steps = 10 there is one line per 10 steps. step_seconds is
    train_runtime / steps, else 1 / train_steps_per_second (the Trainer's own figure)."""
    bar_step: Optional[int] = None
    steps_seen: list[int] = []
    curve = []
    final: dict = {}
    for line in re.split(r"[\r\n]", log_text):
        line = line[:MAX_LINE]
        bar = trainer_bar(line)
        if bar is not None:
            bar_step = bar[0]
            steps_seen.append(bar_step)
        if "{'" not in line:
            continue
        for d in parse_hf_dicts(line):
            if "train_runtime" in d:
                final = d
                continue
            if "loss" not in d:
                continue
            step = explicit_step(d)
            if step is not None:
                steps_seen.append(step)
            else:
                step = bar_step
            point: dict = {} if step is None else {"step": step}
            if isinstance(d.get("loss"), (int, float)):
                point["loss"] = float(d["loss"])
            lr = _pick(d, "lr")
            if lr is not None:
                point["learning_rate"] = lr
            kl = next((float(v) for k, v in d.items() if "kl" in k.lower() and isinstance(v, (int, float))), None)
            if kl is not None:
                point["kl"] = kl
            clip = next((float(v) for k, v in d.items() if "clip" in k.lower() and isinstance(v, (int, float))), None)
            if clip is not None:
                point["frac_clipped"] = clip
            curve.append(point)
    final_step = explicit_step(final)
    steps = final_step if final_step is not None else (max(steps_seen) if steps_seen else None)
    rollouts = [float(x) for x in ROLLOUT_RE.findall(log_text)]
    runtime = _pick(final, "runtime")
    per_second = final.get("train_steps_per_second")
    losses = [p["loss"] for p in curve if "loss" in p]
    final_loss = final.get("train_loss")
    if runtime is not None and steps:
        step_seconds = runtime / steps
    elif isinstance(per_second, (int, float)) and not isinstance(per_second, bool) and per_second > 0:
        step_seconds = 1.0 / float(per_second)
    else:
        step_seconds = None
    return TrainSummary(
        steps=steps or None,
        final_loss=float(final_loss) if isinstance(final_loss, (int, float)) else (losses[-1] if losses else None),
        mean_kl=_mean(p.get("kl") for p in curve),
        frac_clipped=_mean(p.get("frac_clipped") for p in curve),
        step_seconds=step_seconds,
        rollout_seconds=_mean(rollouts),
        peak_mem_mib=None,
        train_runtime=runtime,
        curve=curve,
        source="log",
    )


def read_train_summary(stage_dir: Path, log_path: Path) -> Optional[TrainSummary]:
    """train_result.json + metrics.jsonl when present, else the log's HF dict lines."""
    stage_dir = Path(stage_dir)
    metrics = stage_dir / "metrics.jsonl"
    totals_file = stage_dir / "train_result.json"
    totals = None
    if totals_file.is_file():
        try:
            totals = stage_json.read(totals_file)
        except stage_json.StageJsonError:
            totals = None
        if not isinstance(totals, dict):
            totals = None
    if metrics.is_file() or totals is not None:
        records = _jsonl(read_tail(metrics, STATS_TAIL_BYTES)) if metrics.is_file() else []
        summary = summarize_metrics(records, totals)
        summary.source = "+".join(n for n, ok in (("train_result.json", totals is not None), ("metrics.jsonl", metrics.is_file())) if ok)
        if not summary.empty():
            return summary
    if not Path(log_path).is_file():
        return None
    summary = summarize_log(read_tail(log_path, STATS_TAIL_BYTES))
    return None if summary.empty() else summary


# --- progress -----------------------------------------------------------------------------


@dataclass
class Progress:
    done: int
    total: Optional[int]
    unit: str  # "steps" | "prompts" | "items"
    source: str  # "progress.jsonl" | "log"

    def text(self) -> str:
        if self.unit == "steps":
            return f"step {self.done}/{self.total}" if self.total else f"step {self.done}"
        return f"{self.done}/{self.total} {self.unit}" if self.total else f"{self.done} {self.unit}"

    def fraction(self) -> Optional[float]:
        return min(1.0, self.done / self.total) if self.total else None

    def to_dict(self) -> dict:
        return {"done": self.done, "total": self.total, "unit": self.unit, "source": self.source,
                "text": self.text(), "fraction": self.fraction()}


def progress_from_record(rec: dict) -> Optional[Progress]:
    """A progress.jsonl record: {"step", "max_steps"} or {"done", "total"}."""
    if _count(rec.get("step")):
        total = rec.get("max_steps")
        return Progress(rec["step"], total if _count(total) else None, "steps", "progress.jsonl")
    if _count(rec.get("done")):
        total = rec.get("total")
        unit = rec.get("unit") if isinstance(rec.get("unit"), str) else "items"
        return Progress(rec["done"], total if _count(total) else None, unit, "progress.jsonl")
    return None


def _count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


class LogProgress:
    """Incremental log adapter: feed it text as the log grows; it yields progress records.

    train: the step is the Trainer's own tqdm bar (step/total) or a dict line's explicit step
    field; dict lines are never counted (logging_steps may be 10, and a log may repeat them).
    The total is the bar's, else the profile's max_steps.
    eval: vLLM's `Processed prompts` bar (or a bar without a description) gives done/total.
    """

    def __init__(self, stage: str, max_steps: Optional[int] = None):
        self.stage = stage
        self.max_steps = max_steps
        self.step: Optional[int] = None  # the latest step the log showed
        self._buf = ""

    def feed(self, text: str) -> list[dict]:
        self._buf += text
        parts = re.split(r"[\r\n]", self._buf)
        self._buf = parts.pop()  # an unfinished line waits for more text
        if len(self._buf) > 65536:
            self._buf = self._buf[-65536:]
        out = []
        for line in parts:
            rec = self._line(line[:MAX_LINE])
            if rec is not None:
                out.append(rec)
        return out

    def _line(self, line: str) -> Optional[dict]:
        if self.stage == "train":
            # The bar (stderr) and a dict line (stdout) may share a log line: read both.
            out = None
            bar = trainer_bar(line)
            if bar is not None:
                self.step, self.max_steps = bar
                out = {"step": self.step, "max_steps": self.max_steps, "source": "log"}
            if "{'" in line and "'loss'" in line and "train_runtime" not in line:
                for d in parse_hf_dicts(line):
                    if "loss" in d:
                        step = explicit_step(d)
                        if step is not None:
                            self.step = step
                        if self.step is not None:  # a loss without a known step is no progress
                            out = {**{k: v for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
                                   "step": self.step, "max_steps": self.max_steps, "source": "log"}
                        break
            return out
        m = tqdm_bar(line)
        if m and (m.group("desc") is None or _about_prompts(m.group("desc"))):
            return {"done": int(m.group("done")), "total": int(m.group("total")), "unit": "prompts", "source": "log"}
        return None


def _about_prompts(desc: Optional[str]) -> bool:
    return bool(desc) and any(w in desc.lower() for w in ("prompt", "request", "sampl"))
