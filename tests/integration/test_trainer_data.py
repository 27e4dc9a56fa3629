"""The rendered prompts (trainer/prompting.py) on a real tiny tokenizer: every prompt knob changes
the text it should."""

from __future__ import annotations

import pytest
from fixtures_tiny import untrained_tiny_model  # noqa: F401  (pytest fixture)

from opsdctl.recipes import knobs
from trainer import data, prompting


@pytest.fixture(scope="module")
def tokenizer(untrained_tiny_model):  # noqa: F811
    from opsdkit.modeling import load_tokenizer

    return load_tokenizer(str(untrained_tiny_model))


ROW = data.Row(problem="What is 2 + 3?", solution="2 + 3 = 5. The answer is \\boxed{5}.",
               trace="We add the ones: 2 + 3 = 5.", source="math")
EMPTY_THINK = "<think>\n\n</think>"


def test_thinking_knobs_change_the_rendered_prompts(tokenizer):
    hp, m = knobs.default_hparams(), knobs.default_method()
    assert EMPTY_THINK in prompting.student_prompt(tokenizer, ROW, hp, m)  # student_thinking false
    assert EMPTY_THINK in prompting.teacher_prompt(tokenizer, ROW, hp, m)  # teacher_thinking false
    hp2 = {**hp, "student_thinking": True, "teacher_thinking": True}
    assert EMPTY_THINK not in prompting.student_prompt(tokenizer, ROW, hp2, m)
    assert EMPTY_THINK not in prompting.teacher_prompt(tokenizer, ROW, hp2, m)
    hp3 = {**hp, "reason_first": True, "teacher_thinking": True}  # the analysis request is a teacher prompt
    assert EMPTY_THINK not in prompting.teacher_prompt(tokenizer, ROW, hp3, m)


def test_teacher_context_and_student_prompt_knobs(tokenizer):
    hp, m = knobs.default_hparams(), knobs.default_method()
    sol = prompting.teacher_prompt(tokenizer, ROW, hp, m)
    trace = prompting.teacher_prompt(tokenizer, ROW, hp, {**m, "teacher_context": "trace"})
    both = prompting.teacher_prompt(tokenizer, ROW, hp, {**m, "teacher_context": "both"})
    assert ROW.solution in sol and ROW.trace not in sol
    assert ROW.trace in trace and ROW.solution not in trace
    assert ROW.trace in both and ROW.solution in both
    released = prompting.student_prompt(tokenizer, ROW, hp, m)
    boxed = prompting.student_prompt(tokenizer, ROW, hp, {**m, "student_prompt": "boxed"})
    plain = prompting.student_prompt(tokenizer, ROW, hp, {**m, "student_prompt": "plain"})
    assert "Problem: " + ROW.problem in released and "Problem:" not in boxed
    assert "\\boxed{}" in boxed and "\\boxed{}" not in plain and ROW.problem in plain
    assert ROW.solution not in released + boxed  # the student never sees the reference
    own = prompting.teacher_prompt(tokenizer, ROW, hp, {**m, "teacher_prompt": "own-words"})
    assert "in your own words" in own and "in your own words" not in sol and ROW.solution in own


def test_reason_first_asks_for_an_analysis_of_the_reference(tokenizer):
    hp, m = {**knobs.default_hparams(), "reason_first": True}, knobs.default_method()
    request = prompting.teacher_prompt(tokenizer, ROW, hp, m)
    assert "=== Reference Reasoning Start ===\n" + ROW.solution in request
    assert request.endswith(tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False,
                                                           add_generation_prompt=True, enable_thinking=False)
                            .split("x", 1)[1])  # the assistant header: the analysis is the model's turn
    shown = prompting.teacher_display(tokenizer, ROW, hp, m)
    assert shown.startswith(request) and prompting.RATIONALE_PLACEHOLDER in shown
