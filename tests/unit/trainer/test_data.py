"""Training data (trainer/data.py): column detection, data_select with row counts, seeded order."""

from __future__ import annotations

import json

import pytest

from opsdctl.errors import UserError
from trainer import data


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def sample_rows():
    # 4 `math` rows and 6 others with token counts 10..60: hard keeps the longer half of the 6
    rows = [{"problem": f"m{i}", "solution": f"s{i}", "source": "math", "num_tokens": 100} for i in range(4)]
    rows += [{"problem": f"a{i}", "solution": f"s{i}", "source": "arith", "num_tokens": 10 * (i + 1)} for i in range(6)]
    return rows


def test_data_select_counts(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", sample_rows())
    none = data.load_selection(path, "none")
    assert (none.rows_total, none.rows_selected) == (10, 10)
    nomath = data.load_selection(path, "nomath")
    assert nomath.rows_selected == 6 and all(r.source != "math" for r in nomath.rows)
    assert "10 -> 6" in nomath.note
    hard = data.load_selection(path, "hard")
    assert sorted(r.num_tokens for r in hard.rows) == [40, 50, 60]  # >= median 35 of 10..60
    assert "10 -> 6" in hard.note and "-> 3 rows" in hard.note


def test_tolerant_columns_and_overrides(tmp_path):
    rows = [{"Question": "q", "response": "r", "data_source": "math", "generated_token_count": 5, "extra": "x"}]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    sel = data.load_selection(path, "none")
    assert sel.columns == {"problem": "Question", "solution": "response", "trace": None,
                           "source": "data_source", "num_tokens": "generated_token_count"}
    assert sel.rows[0].problem == "q" and sel.rows[0].num_tokens == 5
    sel = data.load_selection(path, "none", {"solution": "extra"})
    assert sel.rows[0].solution == "x"
    with pytest.raises(UserError, match="no such column"):
        data.load_selection(path, "none", {"trace": "nope"})


def test_parquet_and_missing_columns(tmp_path):
    import datasets

    datasets.Dataset.from_list(sample_rows()).to_parquet(str(tmp_path / "d.parquet"))
    assert data.load_selection(str(tmp_path / "d.parquet"), "nomath").rows_selected == 6
    path = write_jsonl(tmp_path / "bad.jsonl", [{"problem": "p", "solution": "s"}])
    with pytest.raises(UserError, match="no source column"):
        data.load_selection(path, "hard")
    with pytest.raises(UserError, match="no solution column"):
        data.load_selection(write_jsonl(tmp_path / "b2.jsonl", [{"problem": "p"}]), "none")
    with pytest.raises(UserError, match="file not found"):
        data.load_selection(str(tmp_path / "missing.jsonl"), "none")


def test_row_stream_is_seeded_and_covers_each_epoch():
    rows = [data.Row(problem=str(i), solution="s") for i in range(10)]
    a = [r.problem for r in data.RowStream(rows, seed=1).take(20)]
    b = [r.problem for r in data.RowStream(rows, seed=1).take(20)]
    c = [r.problem for r in data.RowStream(rows, seed=2).take(20)]
    assert a == b and a != c
    assert sorted(a[:10]) == sorted(a[10:]) == sorted(str(i) for i in range(10))
    assert a[:10] != a[10:]  # a fresh order each epoch
