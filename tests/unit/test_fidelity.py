"""Fidelity, in process: the evaluator's answer extraction and grading and the training loss's
micro-batch weighting are the released code's (tests/integration/test_fidelity.py has the rest).

Line numbers (`file.py:N`; a bare `:N` is in the file last named) refer to siyan-zhao/OPSD at
commit 590ec26c59e689a29840a501f65335578251b68c.

One test per point where the release and our first code differed. Each test types the released
string or behaviour and names where it comes from in the public release (github siyan-zhao/OPSD):
the file, the line and the function. Our own improvements are method knobs whose released value
is the default; the tests check the default, and that the knob really changes the behaviour.
"""

from __future__ import annotations

import json

import pytest

from eval.grading import grade, released_boxed

# --- eval answer extraction: eval/evaluate_math.py:15-51, extract_boxed_answer, and
# eval/evaluate_math.py:54-86, grade_answer ------------------------------------------------------

# (completion, what extract_boxed_answer returns): the last `\boxed` (rfind, eval/evaluate_math.py:21),
# braces counted to the closing one (:26-38), none closed -> None (:40-41), wrapper check (:47-51)
RELEASED_EXTRACTION = [
    ("The answer is \\boxed{33}.", "33"),
    ("\\boxed{ 204 }", "204"),  # answer.strip(), eval/evaluate_math.py:49
    ("\\boxed{12} no wait \\boxed{33}", "33"),
    ("\\boxed{33} no wait \\boxed{12}", "12"),
    ("\\boxed{12} and then \\boxed{33", None),  # the LAST box is unclosed: no answer, no fallback
    ("\\boxed{\\frac{1}{2}", None),
    ("\\boxed{a{b}c}", "a{b}c"),  # braces matched by counting
    ("\\boxed{33}}}", "33"),
    ("\\boxed{\\}}", "\\"),  # no escapes: `\}` closes the box
    ("\\boxed 33", None),  # the span must start with \boxed{
    ("\\boxed   {33}", None),
    ("\\fbox{9}", None),  # only \boxed is looked for
    ("\\boxedx{33}", None),
    ("<think>maybe \\boxed{1}</think>\n\nThe answer is \\boxed{2}.", "2"),
    ("\\boxed{}", ""),
    ("The answer is 33.", None),
]


@pytest.mark.parametrize("completion,expected", RELEASED_EXTRACTION)
def test_eval_extraction_is_the_last_boxed_only(completion, expected):
    assert released_boxed(completion) == expected
    assert grade(completion, "33").extracted == expected  # the default mode is the released one


def test_eval_grading_is_math_verify_on_dollar_wrapped_strings():
    """eval/evaluate_math.py:54-86, grade_answer: None -> False (:65-66); `$...$` wrapped (:70-73),
    parse(fallback_mode="no_fallback") (:76-77), verify(gold, predicted) (:80)."""
    assert grade("\\boxed{033}", "33").correct
    assert grade("\\boxed{x = 33}", "33").correct  # math-verify reads the equation's right side
    assert grade("\\boxed{\\frac{1}{2}}", "0.5").correct
    assert not grade("\\boxed{34}", "33").correct
    unclosed = grade("\\boxed{33} and then \\boxed{33", "33")
    assert (unclosed.extracted, unclosed.correct, unclosed.how) == (None, False, "no-box")
    # ours, only on request: the earlier closed box and other spellings count
    assert grade("\\boxed{33} and then \\boxed{33", "33", "lenient").correct
    assert grade("\\fbox{33}", "33", "lenient").correct


def test_eval_extract_mode_is_a_setting_released_by_default(tmp_path):
    """`python -m eval` grades like the released script (eval/evaluate_math.py:396 and :402,
    evaluate_math500: extract_boxed_answer, then grade_answer) unless --extract lenient is given, and a
    resume with the other mode is refused (its samples were graded differently)."""
    from eval.cli import build_parser, resolve
    from eval.settings import check_resume
    from opsdctl.errors import UserError

    from opsdkit.tiny import make_benchmark

    bench = tmp_path / "bench.jsonl"  # the tiny benchmark's rows, without building the tiny model
    bench.write_text("".join(json.dumps(r) + "\n" for r in make_benchmark()))
    base = ["--profile", "tiny", "--benchmark", str(bench), "--gpus", "", "--output-dir", str(tmp_path / "o")]
    settings, _, _ = resolve(build_parser().parse_args(base))
    assert settings.extract == "released"
    lenient, _, _ = resolve(build_parser().parse_args(base + ["--extract", "lenient"]))
    assert lenient.extract == "lenient"
    with pytest.raises(UserError, match="extract"):
        check_resume(settings.identity(), lenient, "settings.json")
    with pytest.raises(UserError):
        build_parser().parse_args(base + ["--extract", "loose"])


def test_micro_batch_weighting_4000_and_300_tokens():
    """opsd_trainer.py:458, generalized_jsd_loss: `jsd.sum() / mask.sum()` per micro-batch (reduction
    "batchmean" by default, :380; compute_loss calls it with the labels and no reduction, :721-728); the HF
    Trainer divides each by gradient_accumulation_steps; DDP averages the processes. So the step
    objective is the mean of the micro-batches' own token means: every micro-batch weighs the same."""
    import numpy as np

    from trainer.loss import micro_batch_normalizer

    rng = np.random.default_rng(0)
    a, b = rng.gamma(2.0, 0.01, 4000), rng.gamma(2.0, 0.05, 300)  # per-token losses, float64
    ours = sum(x.sum() / micro_batch_normalizer("micro_batch", len(x), 2, 4300, 1) for x in (a, b))
    assert ours == pytest.approx((a.mean() + b.mean()) / 2, rel=1e-12)
    # a token of the short micro-batch weighs 4000/300 times one of the long one
    assert micro_batch_normalizer("micro_batch", 4000, 2, 4300, 1) / micro_batch_normalizer(
        "micro_batch", 300, 2, 4300, 1) == pytest.approx(4000 / 300)
    token = sum(x.sum() / micro_batch_normalizer("token", len(x), 2, 4300, 1) for x in (a, b))
    assert token == pytest.approx(np.concatenate([a, b]).mean(), rel=1e-12)
    assert abs(ours - token) > 1e-3  # the knob matters here
    # two processes: each normalises by its own micro-batches; the gradients are then averaged
    c = rng.gamma(2.0, 0.02, 1000)
    per_process = [a.sum() / micro_batch_normalizer("micro_batch", 4000, 1, 5000, 2),
                   c.sum() / micro_batch_normalizer("micro_batch", 1000, 1, 5000, 2)]
    assert np.mean(per_process) == pytest.approx((a.mean() + c.mean()) / 2, rel=1e-12)
