"""Training rows: load (HF dataset id or local json/jsonl/parquet), find the columns, select, order.

Columns: problem and solution are required; a long reasoning trace (`COT_Reason` in the released
dataset), the source (e.g. `math`) and a token count are optional. Names are matched
case-insensitively against common spellings; any can be named explicitly (--problem-column ...
on the command line). A teacher_context that needs the trace (trace, both) is refused at load
time when the column is missing or a selected row has none: never a silent fallback.

data_select (method knob): none = all rows; nomath = drop rows whose source is `math`;
hard = drop `math`, then keep the longer half of what is left (token count >= its median;
the trace's character length stands in when there is no token count column).
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from pathlib import Path

from opsdctl.errors import UserError

COLUMN_ALIASES = {
    "problem": ("problem", "question", "prompt", "query", "input", "instruction"),
    "solution": ("solution", "reference_solution", "answer_solution", "response", "output", "answer"),
    "trace": ("cot_reason", "trace", "reasoning_trace", "long_trace", "verified_trace", "reasoning", "deepseek_reasoning",
              "generation", "cot", "thinking"),
    "source": ("source", "data_source", "domain", "category", "subject"),
    "num_tokens": ("num_tokens", "token_count", "generated_token_count", "num_generated_tokens", "trace_tokens",
                   "n_tokens", "length", "tokens"),
}
REQUIRED = ("problem", "solution")
EASY_SOURCE = "math"
LOCAL_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}


@dataclass(frozen=True)
class Row:
    problem: str
    solution: str
    trace: str | None = None
    source: str | None = None
    num_tokens: int | None = None


@dataclass(frozen=True)
class Selection:
    rows: list[Row]
    rows_total: int
    rows_selected: int
    columns: dict  # role -> column name (None if absent)
    note: str  # one line for the log


def find_columns(names: list[str], overrides: dict | None = None, where: str = "dataset") -> dict:
    """Map each role to a column name; explicit overrides win and must exist."""
    lower = {n.lower(): n for n in names}
    found = {}
    for role, aliases in COLUMN_ALIASES.items():
        want = (overrides or {}).get(role)
        if want:
            if want not in names:
                raise UserError(f"{where}: --{role.replace('_', '-')}-column {want!r}: no such column; "
                                f"columns are {', '.join(names)}")
            found[role] = want
            continue
        found[role] = next((lower[a] for a in aliases if a in lower), None)
    for role in REQUIRED:
        if found[role] is None:
            raise UserError(f"{where}: no {role} column (looked for {', '.join(COLUMN_ALIASES[role])}); "
                            f"columns are {', '.join(names)}; name it with --{role}-column")
    return found


def load_table(location: str, split: str = "train"):
    """A `datasets.Dataset` from a HF id or a local file (tiny:// resolved to its file)."""
    from opsdkit.tiny import resolve

    path = resolve(location)
    suffix = Path(path).suffix.lower()
    import datasets

    datasets.disable_progress_bars()  # stderr holds our one-line errors, not progress bars

    if suffix in LOCAL_FORMATS:
        if not Path(path).exists():
            raise UserError(f"dataset {location}: file not found; give an existing json/jsonl/parquet file or a dataset id")
        return datasets.load_dataset(LOCAL_FORMATS[suffix], data_files=path, split="train")
    if Path(path).exists():
        if Path(path).is_dir():
            return datasets.load_dataset(path, split=split)
        raise UserError(f"dataset {location}: unsupported file type {suffix!r}; use .json, .jsonl or .parquet")
    try:
        return datasets.load_dataset(path, split=split)
    except Exception as exc:  # noqa: BLE001 - any loading failure is the user's location
        msg = " ".join(str(exc).split())[:200]
        raise UserError(f"dataset {location}: could not load ({type(exc).__name__}: {msg}); "
                        "check the id, the network or the Hugging Face cache") from None


def to_rows(table, columns: dict) -> list[Row]:
    data = {role: (table[col] if col else None) for role, col in columns.items()}
    n = len(table)

    def get(role, i):
        col = data[role]
        return None if col is None else col[i]

    rows = []
    for i in range(n):
        tokens = get("num_tokens", i)
        rows.append(Row(problem=str(get("problem", i)), solution=str(get("solution", i)),
                        trace=get("trace", i), source=get("source", i),
                        num_tokens=int(tokens) if tokens is not None else None))
    return rows


def select_rows(rows: list[Row], data_select: str, columns: dict | None = None) -> tuple[list[Row], str]:
    """(selected rows, a note saying what was done with counts)."""
    n = len(rows)
    if data_select == "none":
        return list(rows), f"data_select=none: {n} rows"
    if columns is not None and columns.get("source") is None:
        raise UserError(f"data_select={data_select}: the dataset has no source column to drop `{EASY_SOURCE}` "
                        "rows by; name it with --source-column or use data_select = \"none\"")
    kept = [r for r in rows if (r.source or "").strip().lower() != EASY_SOURCE]
    if data_select == "nomath":
        return kept, f"data_select=nomath: {n} -> {len(kept)} rows (dropped {n - len(kept)} `{EASY_SOURCE}` rows)"
    if data_select != "hard":
        raise UserError(f"data_select={data_select!r}: must be none, hard or nomath")
    if not kept:
        return kept, f"data_select=hard: {n} -> 0 rows"
    by_tokens = all(r.num_tokens is not None for r in kept)
    length = (lambda r: r.num_tokens) if by_tokens else (lambda r: len(r.trace or r.solution))
    median = statistics.median(length(r) for r in kept)
    hard = [r for r in kept if length(r) >= median]
    what = "token count" if by_tokens else "trace characters (no token count column)"
    return hard, (f"data_select=hard: {n} -> {len(kept)} without `{EASY_SOURCE}` -> {len(hard)} rows "
                  f"with {what} >= median {median:g}")


def check_traces(rows: list[Row], columns: dict, teacher_context: str, where: str) -> None:
    """teacher_context trace/both must find a trace on every row it may train on."""
    if teacher_context not in ("trace", "both"):
        return
    if columns.get("trace") is None:
        raise UserError(f"{where}: teacher_context = {teacher_context!r} needs the reasoning trace column "
                        f"(COT_Reason in the released dataset; looked for {', '.join(COLUMN_ALIASES['trace'])}); "
                        "name it with --trace-column or use teacher_context = \"solution\"")
    empty = [i for i, r in enumerate(rows) if not (isinstance(r.trace, str) and r.trace.strip())]
    if empty:
        raise UserError(f"{where}: teacher_context = {teacher_context!r}: {len(empty)} of {len(rows)} selected rows "
                        f"have an empty {columns['trace']} (first: selected row {empty[0]}); drop them from the "
                        "data or use teacher_context = \"solution\"")


def load_selection(location: str, data_select: str, overrides: dict | None = None,
                   teacher_context: str = "solution") -> Selection:
    table = load_table(location)
    where = f"dataset {location}"
    columns = find_columns(list(table.column_names), overrides, where=where)
    rows = to_rows(table, columns)
    selected, note = select_rows(rows, data_select, columns)
    if not selected:
        raise UserError(f"{where}: {note}: nothing left to train on; use data_select = \"none\"")
    check_traces(selected, columns, teacher_context, where)
    return Selection(selected, len(rows), len(selected), columns, note)


class RowStream:
    """An endless, seeded order over the rows: a fresh permutation per epoch.

    Every process builds the same stream and takes its own slice of each global batch, so the
    processes never share a row within a step.
    """

    def __init__(self, rows: list[Row], seed: int):
        self.rows = rows
        self.seed = seed
        self.consumed = 0
        self._epoch = -1
        self._order: list[int] = []

    def _index(self, k: int) -> int:
        epoch, pos = divmod(k, len(self.rows))
        if epoch != self._epoch:
            self._order = list(range(len(self.rows)))
            random.Random(f"opsd-data-{self.seed}-{epoch}").shuffle(self._order)
            self._epoch = epoch
        return self._order[pos]

    def take(self, n: int) -> list[Row]:
        out = [self.rows[self._index(self.consumed + i)] for i in range(n)]
        self.consumed += n
        return out

    @property
    def epoch(self) -> float:
        return self.consumed / len(self.rows)
