"""Fidelity: by default our trainer, evaluator and export do what the released OPSD code does.

One test per row of issue 13's table. Each test types the released string or behaviour and
names where it comes from in the public release (github siyan-zhao/OPSD): the file and the
function. Our own improvements are method knobs whose released value is the default; the tests
check the default, and that the knob really changes the behaviour.
"""

from __future__ import annotations

import pytest

from eval.grading import grade, released_boxed
from fixtures_tiny import one_thread, tiny_assets, untrained_tiny_model  # noqa: F401  (pytest fixtures)

# Typed from the release; never imported from our code, so a drifting constant fails here.
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


# --- eval prompt: eval/evaluate_math.py, evaluate_math500 --------------------------------------


def test_eval_prompt_is_the_released_one(untrained_tiny_model):
    """evaluate_math500 builds `f"{problem}\\n\\nPlease reason step by step, and put your final
    answer within \\\\boxed{{}}."`, one user message, chat template with enable_thinking=True."""
    from transformers import AutoTokenizer

    from eval.backends import _Base
    from opsdkit.prompts import eval_text

    problem = "What is 2 + 3?"
    assert eval_text(problem) == "What is 2 + 3?\n\nPlease reason step by step, and put your final answer within \\boxed{}."
    tok = AutoTokenizer.from_pretrained(untrained_tiny_model)
    backend = _Base({"sampling": {"thinking": True}, "problems": [{"problem": problem}]})
    backend.tokenizer = tok
    want = tok.apply_chat_template([{"role": "user", "content": problem + "\n\n" + INSTRUCTION}],
                                   tokenize=False, add_generation_prompt=True, enable_thinking=True)
    assert tok.decode(backend.prompt_ids(0)) == want


# --- eval answer extraction: eval/evaluate_math.py, extract_boxed_answer and grade_answer -------

# (completion, what extract_boxed_answer returns)
RELEASED_EXTRACTION = [
    ("The answer is \\boxed{33}.", "33"),
    ("\\boxed{ 204 }", "204"),  # answer.strip()
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
    """grade_answer: None -> False; `$...$` wrapped, parse(fallback_mode="no_fallback"),
    verify(gold, predicted)."""
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
    """`python -m eval` grades like the released script unless --extract lenient is given, and a
    resume with the other mode is refused (its samples were graded differently)."""
    from eval.cli import build_parser, resolve
    from eval.settings import check_resume
    from opsdctl.errors import UserError

    base = ["--profile", "tiny", "--gpus", "", "--output-dir", str(tmp_path / "o")]
    settings, _, _ = resolve(build_parser().parse_args(base))
    assert settings.extract == "released"
    lenient, _, _ = resolve(build_parser().parse_args(base + ["--extract", "lenient"]))
    assert lenient.extract == "lenient"
    with pytest.raises(UserError, match="extract"):
        check_resume(settings.identity(), lenient, "settings.json")
    with pytest.raises(UserError):
        build_parser().parse_args(base + ["--extract", "loose"])
