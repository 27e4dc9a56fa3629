"""Prompts shared by the trainer and the evaluator.

The student sees the problem (and, by default, the instruction to box its answer); the teacher
sees the same problem plus privileged context (a reference solution and/or a long trace). Both
go through the model's chat template so Qwen3's thinking switch applies.
"""

from __future__ import annotations

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

TEACHER_CONTEXT_HEADER = "Here is a reference solution to this problem:"
TEACHER_TRACE_HEADER = "Here is a worked reasoning trace for this problem:"
TEACHER_CLOSING = "Now solve the problem yourself, in your own words."


def eval_text(problem: str) -> str:
    """The evaluation prompt of the released eval/evaluate_math.py (evaluate_math500)."""
    return f"{problem}\n\n{BOXED_INSTRUCTION}"


def student_text(problem: str, style: str = "boxed") -> str:
    if style == "plain":
        return problem
    return f"{problem}\n{BOXED_INSTRUCTION}"


def teacher_text(problem: str, *, solution: str | None = None, trace: str | None = None,
                 context: str = "solution", rationale: str | None = None) -> str:
    """The teacher's user turn. `context` is the method knob teacher_context.

    `rationale` (reason_first) is a rationalization the model wrote for the solution; it is
    placed before the reference material so the teacher conditions on its own reading first.
    """
    parts = [problem, ""]
    if rationale:
        parts += ["Before reading the reference, an explanation of why it works:", rationale.strip(), ""]
    if context in ("solution", "both") and solution:
        parts += [TEACHER_CONTEXT_HEADER, solution.strip(), ""]
    if context in ("trace", "both") and trace:
        parts += [TEACHER_TRACE_HEADER, trace.strip(), ""]
    if context == "trace" and not trace and solution:  # rows without a trace fall back to the solution
        parts += [TEACHER_CONTEXT_HEADER, solution.strip(), ""]
    parts += [TEACHER_CLOSING, BOXED_INSTRUCTION]
    return "\n".join(parts)


def chat_prompt(tokenizer, user_text: str, *, thinking: bool) -> str:
    """Render one user turn plus the assistant header, with Qwen3's enable_thinking switch."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": user_text}],
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=thinking,
    )
