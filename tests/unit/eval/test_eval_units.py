"""Pure pieces of the evaluator: seeds, the plan, dispatch order, records, sampling filters."""

import json
import math

import pytest
import torch

from eval import plan, records
from eval.benchmark import benchmark_hash, load_benchmark, rows_to_problems
from eval.sampling import filter_logits, sample_next
from opsdctl.errors import UserError


@pytest.mark.parametrize("k,bounds,looks", [
    (12, [0, 4, 8, 12], [4, 8]), (4, [0, 1, 2, 4], [1, 2]), (3, [0, 1, 2, 3], [1, 2]),
    (2, [0, 1, 2], [1]), (1, [0, 1], []), (13, [0, 4, 8, 13], [4, 8]),
])
def test_rounds_and_looks(k, bounds, looks):
    assert plan.round_bounds(k) == bounds
    assert plan.look_points(k) == looks


def test_batches_cover_every_item_once_with_fixed_composition():
    ids = [f"p{i}" for i in range(5)]
    batches = plan.make_batches(ids, 12, seed=7)
    items = [(b.problem_id, s) for b in batches for s in b.samples]
    assert sorted(items) == sorted((p, s) for p in ids for s in range(12))
    assert all(len(b.samples) == 4 and len({b.problem_id}) == 1 for b in batches)
    assert [b.round for b in batches] == sorted(b.round for b in batches)  # sample-major
    assert all(b.seeds == tuple(plan.item_seed(7, b.problem_id, s) for s in b.samples) for b in batches)
    # A batch cap splits rounds further, still independently of anything else.
    small = plan.make_batches(ids, 12, seed=7, batch_size=3)
    assert {len(b.samples) for b in small} == {3, 1}
    assert plan.make_batches(ids, 12, seed=7) == batches


def test_dispatcher_round_by_round_longest_expected_first():
    ids = ["a", "b", "c"]
    batches = plan.make_batches(ids, 6, seed=0)  # rounds of 2 samples
    d = plan.Dispatcher(batches, proxy=[10.0, 30.0, 20.0])
    first = [d.next() for _ in range(3)]
    assert [b.problem_id for b in first] == ["b", "c", "a"]  # by proxy length
    assert {b.round for b in first} == {0}
    # Measured lengths replace the proxy: "a" turns out longest.
    for p, n in ((0, 500), (1, 50), (2, 100)):
        d.record(p, n)
    assert [d.next().problem_id for _ in range(3)] == ["a", "c", "b"]
    d.record(1, 5000)  # b's mean is now (50 + 5000) / 2
    assert [d.next().problem_id for _ in range(3)] == ["b", "a", "c"]
    assert d.next() is None


def test_dispatcher_scales_the_proxy_of_unmeasured_problems():
    d = plan.Dispatcher(plan.make_batches(["a", "b", "c"], 3, seed=0), proxy=[100.0, 100.0, 300.0])
    d.record(0, 50)  # 0.5 tokens per proxy unit
    assert d.expected(2) == pytest.approx(150.0)
    assert d.expected(0) == 50


def test_round_robin_shards_by_problem():
    batches = plan.make_batches(["a", "b", "c", "d", "e"], 3, seed=0)
    shards = plan.round_robin(batches, 2)
    assert {b.problem_id for b in shards[0]} == {"a", "c", "e"}
    assert {b.problem_id for b in shards[1]} == {"b", "d"}


# --- records ------------------------------------------------------------------------------


def _rec(pid, s, correct, n=10, reason="stop"):
    return {"id": pid, "sample": s, "seed": 1, "text": "t", "n_tokens": n, "finish_reason": reason,
            "extracted": "1", "correct": correct}


def test_samples_log_ignores_and_cuts_a_torn_last_line(tmp_path):
    path = tmp_path / "samples.jsonl"
    log = records.SampleLog(path)
    log.append(_rec("a", 0, True))
    log.append(_rec("a", 1, False))
    log.close()
    with open(path, "a") as f:
        f.write('{"id": "a", "sample": 2, "seed": 1, "te')  # died mid-write
    got, good = records.read_samples(path)
    assert [r["sample"] for r in got] == [0, 1] and good < path.stat().st_size
    log = records.SampleLog(path)  # the next run cuts the tail before appending
    log.append(_rec("a", 2, True))
    log.close()
    got, _ = records.read_samples(path)
    assert [r["sample"] for r in got] == [0, 1, 2]
    assert all(json.loads(line) for line in path.read_text().splitlines())


def test_a_bad_complete_line_is_skipped_not_cut(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps(_rec("a", 0, True)) + "\nnot json\n" + json.dumps(_rec("a", 1, True)) + "\n")
    size = path.stat().st_size
    records.SampleLog(path).close()
    assert path.stat().st_size == size
    assert [r["sample"] for r in records.read_samples(path)[0]] == [0, 1]


def test_one_writer_per_output_dir(tmp_path):
    from filelock import FileLock

    from eval.runner import RunOptions, run

    (tmp_path / "out").mkdir()
    with FileLock(str(tmp_path / "out" / ".eval.lock")):
        with pytest.raises(UserError, match="another evaluation is writing there"):
            run(None, [], RunOptions(output_dir=tmp_path / "out", devices=[]))


def test_done_map_keeps_first_copy_and_only_this_runs_items():
    recs = [_rec("a", 0, True), _rec("a", 0, False), _rec("zz", 0, True), _rec("a", 7, True)]
    done = records.done_map(recs, {"a"}, k=4)
    assert list(done) == [("a", 0)] and done[("a", 0)]["correct"] is True


def test_summary_avg_and_final_line_format():
    done = {}
    for s in range(4):
        done[("a", s)] = _rec("a", s, s < 3, n=100 + s, reason="length" if s == 3 else "stop")
        done[("b", s)] = _rec("b", s, s == 0, n=10)
    probs = records.summarize(["a", "b"], done, k=4)
    assert probs[0] == {"id": "a", "correct": 3, "samples": 4, "mean_tokens": 101.5,
                        "finish_reasons": {"stop": 3, "length": 1}}
    assert records.avg_at_k(probs) == pytest.approx((3 / 4 + 1 / 4) / 2)
    assert records.final_line(4, probs) == "FINAL avg@4 accuracy: 50.00% (4/8 solutions correct on 2 problems)"
    look = records.summarize(["a", "b"], done, k=4, below=2)
    assert [(p["correct"], p["samples"]) for p in look] == [(2, 2), (1, 2)]


def test_final_line_matches_the_stage_contract_regex():
    from opsdctl.run.results import FINAL_RE

    probs = [{"id": str(i), "correct": c, "samples": 12} for i, c in enumerate([7] * 10 + [6] * 20)]
    line = records.final_line(12, probs)
    assert line == "FINAL avg@12 accuracy: 52.78% (190/360 solutions correct on 30 problems)"
    assert FINAL_RE.fullmatch(line)


# --- benchmarks ---------------------------------------------------------------------------


def test_benchmark_columns_ids_and_hash(tmp_path):
    rows = [{"ID": "2024-I-1", "Problem": "p1", "Answer": 33}, {"id": 61, "question": "p2", "answer": "033"}]
    probs = rows_to_problems(rows, "x")
    assert [(p.id, p.problem, p.answer) for p in probs] == [("2024-I-1", "p1", "33"), ("61", "p2", "033")]
    no_ids = rows_to_problems([{"problem": "p1", "answer": 1}, {"problem": "p2", "answer": 2}], "x")
    again = rows_to_problems([{"problem": "p2", "answer": 2}, {"problem": "p1", "answer": 1}], "x")
    assert {p.problem: p.id for p in no_ids} == {p.problem: p.id for p in again}  # stable when reordered
    assert benchmark_hash(no_ids) != benchmark_hash(again)
    f = tmp_path / "b.json"
    f.write_text(json.dumps({"problems": rows}))
    assert load_benchmark(str(f)) == probs
    with pytest.raises(UserError, match="row 2 has no answer"):
        rows_to_problems([{"problem": "p", "answer": 1}, {"problem": "q"}], "x")
    with pytest.raises(UserError, match="appears twice"):
        rows_to_problems([{"id": 1, "problem": "p", "answer": 1}, {"id": 1, "problem": "q", "answer": 2}], "x")


def test_hub_dataset_columns_and_split(monkeypatch):
    """A dataset id goes through datasets.load_dataset (stubbed here: no network in tests)."""
    import datasets

    rows = {"id": [60, 61], "problem": ["p1", "p2"], "solution": ["s", "s"], "answer": ["204", "025"],
            "url": ["u", "u"], "year": ["2024", "2024"]}
    monkeypatch.setattr(datasets, "load_dataset",
                        lambda name: datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}))
    probs = load_benchmark("HuggingFaceH4/aime_2024")
    assert [(p.id, p.answer) for p in probs] == [("60", "204"), ("61", "025")]
    with pytest.raises(UserError, match="choose a split"):
        load_benchmark("HuggingFaceH4/aime_2024:test")

    def offline(name):
        raise ConnectionError("offline")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(UserError, match="cannot load it"):
        load_benchmark("someone/missing")


def test_gpu_ids_are_physical_and_within_what_we_were_given(monkeypatch):
    from eval.cli import _devices

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert _devices(None) == ["2", "3"] and _devices("3") == ["3"] and _devices("") == []
    with pytest.raises(UserError, match="not among CUDA_VISIBLE_DEVICES=2,3"):
        _devices("0,1")
    with pytest.raises(UserError, match="listed twice"):
        _devices("2,2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert _devices(None) == []


# --- sampling -----------------------------------------------------------------------------


def test_filters_against_a_hand_computation():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.07, 0.03]]))
    keep = lambda x: (x > -math.inf).squeeze(0).tolist()  # noqa: E731
    assert keep(filter_logits(logits, temperature=1.0, top_k=0, top_p=0.8, min_p=0.0)) == [True, True, True, False, False]
    assert keep(filter_logits(logits, temperature=1.0, top_k=0, top_p=0.75, min_p=0.0)) == [True, True, False, False, False]
    assert keep(filter_logits(logits, temperature=1.0, top_k=2, top_p=1.0, min_p=0.0)) == [True, True, False, False, False]
    assert keep(filter_logits(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.2)) == [True, True, True, False, False]
    assert keep(filter_logits(logits, temperature=1.0, top_k=0, top_p=0.01, min_p=0.0)) == [True, False, False, False, False]
    scaled = filter_logits(logits, temperature=0.5, top_k=0, top_p=1.0, min_p=0.0)
    assert torch.allclose(torch.softmax(scaled, -1), torch.softmax(2 * logits, -1))


def test_each_row_samples_from_its_own_generator():
    logits = torch.zeros(3, 50)

    def draw(seeds):
        gens = [torch.Generator().manual_seed(s) for s in seeds]
        return torch.stack([sample_next(logits[: len(seeds)], gens, temperature=1.0, top_k=0, top_p=1.0,
                                         min_p=0.0) for _ in range(20)], dim=1)

    full = draw([1, 2, 3])
    assert torch.equal(draw([2])[0], full[1])  # row 1 alone draws what it drew beside rows 0 and 2
    assert torch.equal(draw([3, 1])[1], full[0])


def test_progress_clock_starts_when_the_engines_are_ready(capsys):
    """An 80 s engine start must not count as generation time (the bar read 1/24 [01:23<31:51])."""
    from eval.runner import _Bar

    now = [1000.0]
    bar = _Bar(total=24, start_done=0, quiet=False, clock=lambda: now[0])
    now[0] += 80.0  # workers load their engines
    bar.start()
    now[0] += 3.0
    bar.show(1, force=True)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "1/24 [00:03<01:09, 0.33it/s]" in line, line
