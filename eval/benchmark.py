"""Loading a benchmark: a Hugging Face dataset id, a local JSON/JSONL file, or tiny://bench.

Rows need a problem and an answer; column names are matched loosely (problem/question/Problem,
answer/Answer, id/ID/problem_id) so both common AIME 2024 datasets load. Ids are kept when
present, else derived from the problem text (stable when the file is reordered).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from opsdctl.errors import UserError

PROBLEM_KEYS = ("problem", "question", "prompt")
ANSWER_KEYS = ("answer", "final_answer", "gold", "target")
ID_KEYS = ("id", "problem_id", "idx", "uid")


@dataclass(frozen=True)
class Problem:
    id: str
    problem: str
    answer: str


def _pick(row: dict, keys: tuple[str, ...]):
    lower = {str(k).lower(): k for k in row}
    for key in keys:
        if key in lower:
            return row[lower[key]]
    return None


def rows_to_problems(rows: list[dict], where: str) -> list[Problem]:
    out, seen = [], set()
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise UserError(f"{where}: row {i + 1} is not an object; each row needs problem and answer fields")
        problem, answer, pid = _pick(row, PROBLEM_KEYS), _pick(row, ANSWER_KEYS), _pick(row, ID_KEYS)
        if not isinstance(problem, str) or not problem.strip():
            raise UserError(f"{where}: row {i + 1} has no problem text; give each row a 'problem' field")
        if answer is None or str(answer).strip() == "":
            raise UserError(f"{where}: row {i + 1} has no answer; give each row an 'answer' field")
        if pid is None or str(pid).strip() == "":
            pid = "p-" + hashlib.sha256(problem.encode()).hexdigest()[:10]
            n, base = 2, pid
            while pid in seen:  # the same text twice: still distinct, still stable
                pid, n = f"{base}-{n}", n + 1
        pid = str(pid).strip()
        if pid in seen:
            raise UserError(f"{where}: id {pid!r} appears twice (row {i + 1}); ids must be unique")
        seen.add(pid)
        out.append(Problem(pid, problem, str(answer).strip()))
    if not out:
        raise UserError(f"{where}: no problems found; the benchmark needs at least one row")
    return out


def _read_local(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise UserError(f"{path}:{n}: not valid JSON ({exc.msg}); write one object per line") from None
        return rows
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); fix the file") from None
    if isinstance(doc, dict):
        for key in ("problems", "data", "rows", "train", "test"):
            if isinstance(doc.get(key), list):
                return doc[key]
        raise UserError(f"{path}: a JSON object must hold a list under 'problems' or 'data'")
    if not isinstance(doc, list):
        raise UserError(f"{path}: must be a JSON list of {{problem, answer}} objects")
    return doc


def _read_hub(name: str) -> list[dict]:
    """A Hugging Face dataset: `name` or `name:split` (default: train, else the only split)."""
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is a dependency
        raise UserError(f"benchmark {name}: the datasets package is missing; pip install datasets") from None
    repo, _, split = name.partition(":")
    try:
        ds = datasets.load_dataset(repo)
    except Exception as exc:  # offline, unknown id, auth...
        msg = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise UserError(f"benchmark {repo}: cannot load it ({msg}); give a local .json/.jsonl file or a "
                        f"dataset id that is cached or reachable") from None
    splits = list(ds.keys())
    if not split:
        split = "train" if "train" in splits else splits[0] if len(splits) == 1 else ""
    if split not in ds:
        raise UserError(f"benchmark {repo}: choose a split with {repo}:SPLIT (available: {', '.join(splits)})")
    return [dict(r) for r in ds[split]]


def load_benchmark(location: str) -> list[Problem]:
    if location.startswith("tiny://"):
        from opsdkit.tiny import resolve

        location = resolve(location)
    path = Path(location).expanduser()
    if path.suffix in (".json", ".jsonl") or path.exists() or location.startswith((".", "/", "~")):
        if not path.is_file():
            raise UserError(f"benchmark {location}: no such file; give a .json/.jsonl file or a dataset id")
        return rows_to_problems(_read_local(path), str(path))
    return rows_to_problems(_read_hub(location), f"benchmark {location}")


def benchmark_hash(problems: list[Problem]) -> str:
    """Content hash of the whole benchmark (ids, problems, answers), for resume checks."""
    doc = json.dumps([[p.id, p.problem, p.answer] for p in problems], ensure_ascii=False)
    return hashlib.sha256(doc.encode()).hexdigest()[:16]
