"""The stage contract's parsers: result.json, the FINAL line, training statistics, progress from
logs."""

from __future__ import annotations

import json

import pytest

from opsdctl.run import results


# --- result parsers -----------------------------------------------------------------------


def _result(**over):
    doc = {"schema": 1, "k": 2, "avg_at_k": 0.75, "n_problems": 2,
           "problems": [{"id": "a", "correct": 2, "samples": 2, "mean_tokens": 10.0},
                        {"id": 2, "correct": 1, "samples": 2}], "partial": False, "seconds": 3.5}
    doc.update(over)
    return json.dumps(doc)


def test_result_json():
    r = results.parse_result_json(_result())
    assert (r.k, r.avg_at_k, r.n_problems, r.n_correct, r.n_samples, r.partial, r.seconds) == (2, 75.0, 2, 3, 4, False, 3.5)
    assert r.problems[1] == {"id": "2", "correct": 1, "samples": 2}
    for bad, needle in [
        (_result(schema=2), "schema"),
        (_result(avg_at_k=52.78), "out of range"),
        (_result(n_problems=3), "n_problems = 3"),
        (_result(problems=[{"id": "a", "correct": 3, "samples": 2}], n_problems=1), "correct"),
        (_result(partial="no"), "partial"),
        ("{not json", "not valid JSON"),
        ("[1]", "JSON object"),
    ]:
        with pytest.raises(results.ResultError, match=".") as exc:
            results.parse_result_json(bad)
        assert needle in str(exc.value)


def test_final_line_last_match_wins():
    log = ("FINAL avg@12 accuracy: 50.00% (180/360 solutions correct on 30 problems)\nnoise\n"
           "\x1b[0mFINAL avg@12 accuracy: 52.78% (190/360 solutions correct on 30 problems)\n")
    r = results.parse_final_line(log)
    assert (r.k, r.avg_at_k, r.n_correct, r.n_samples, r.n_problems, r.source) == (12, 52.78, 190, 360, 30, "final-line")
    assert results.parse_final_line("FINAL avg@12 accuracy: 52.78%") is None


def test_train_summary_from_log_and_files(tmp_path):
    log = (
        "{'loss': -0.0021, 'grad_norm': 0.0492, 'learning_rate': 5e-06, 'on_policy_loss': -0.0021, 'epoch': 0.02}\n"
        "vLLM generation done - elapsed time: 3.74s, prompts: 4, total tokens: 3413, avg length: 853.2\n"
        "{'loss': -0.004, 'grad_norm': 0.05, 'learning_rate': 5e-06, 'epoch': 0.04}\n"
        "vLLM generation done - elapsed time: 4.26s, prompts: 4\n"
        "{'train_runtime': 908.19, 'train_samples_per_second': 3.523, 'train_steps_per_second': 0.11, "
        "'train_loss': -0.0079, 'epoch': 0.27}\n"
    )
    (tmp_path / "a.log").write_text(log)
    s = results.read_train_summary(tmp_path, tmp_path / "a.log")
    # two dict lines are not two steps (logging_steps may be 10): no bar, no step count;
    # step_seconds is then the Trainer's own 1 / train_steps_per_second
    assert (s.steps, s.final_loss, s.rollout_seconds, s.train_runtime, s.source) == (None, -0.0079, 4.0, 908.19, "log")
    assert s.step_seconds == pytest.approx(1 / 0.11) and [p["loss"] for p in s.curve] == [-0.0021, -0.004]
    # files win over the log
    (tmp_path / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "loss": 1.0, "kl": 0.2, "frac_clipped": 0.5, "peak_mem_mib": 10}) + "\n"
        + json.dumps({"step": 2, "loss": 0.5, "kl": 0.4, "frac_clipped": 0.0, "peak_mem_mib": 30}) + "\n{partial")
    (tmp_path / "train_result.json").write_text(json.dumps({"train_runtime": 12.0, "global_step": 2}))
    s = results.read_train_summary(tmp_path, tmp_path / "a.log")
    assert (s.steps, s.final_loss, s.mean_kl, s.frac_clipped, s.peak_mem_mib, s.train_runtime) == (2, 0.5, pytest.approx(0.3), 0.25, 30, 12.0)


def test_log_progress_adapters():
    train = results.LogProgress("train", max_steps=100)
    recs = train.feed(
        "Map: 100%|##########| 29434/29434 [00:01<00:00]\n"
        "Loading checkpoint shards: 100%|##| 2/2 [00:01<00:00]\n"
        "Processed prompts: 100%|##| 4/4 [00:03<00:00]\n"
        "{'loss': -0.0021, 'grad_norm': 0.0492, 'learning_rate': 5e-06, 'epoch': 0.02}\n"
        " 37%|###7      | 37/100 [05:12<08:53, 8.4s/it]\r"
        " 38%|###8      | 38/1"  # unfinished: waits for the rest of the line
    )
    assert [(r["step"], r["max_steps"]) for r in recs] == [(37, 100)]  # a dict line is not a step
    assert train.feed("00 [05:20<08:40, 8.4s/it]\n")[0]["step"] == 38
    ev = results.LogProgress("eval")
    recs = ev.feed("Adding requests: 100%|##| 84/84 [00:00<00:00]\rProcessed prompts:  57%|#####     | 48/84 [12:40<06:40, 1.2it/s]\r")
    p = results.progress_from_record(recs[-1])
    assert p.text() == "48/84 prompts" and p.fraction() == pytest.approx(48 / 84)
    assert results.progress_from_record({"step": 37, "max_steps": 100}).text() == "step 37/100"
    assert results.LogProgress("eval").feed("nothing here\n") == []


def test_partial_from_progress():
    rec = {"done": 40, "total": 120, "look_k": 4, "problems": [{"id": "a", "correct": 4, "samples": 4},
                                                               {"id": "b", "correct": 1, "samples": 4}]}
    r = results.partial_from_progress(rec)
    assert (r.k, r.avg_at_k, r.partial, r.source, r.n_correct) == (4, 62.5, True, "progress", 5)
    assert results.partial_from_progress({"done": 1}) is None
