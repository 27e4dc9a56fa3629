"""Prompts shared by the trainer and the evaluator: the released OPSD strings by default.

The released strings (github siyan-zhao/OPSD) are typed here, each with where it comes from:
- data_collator.py, SelfDistillationDataCollator.__call__: the student and teacher user
  messages, and the reason_first analysis request and transition;
- eval/evaluate_math.py, evaluate_math500: the evaluation user message.
Every user message goes through the model's chat template with the Qwen3 thinking switch.

Method knobs choose other wordings (student_prompt, teacher_prompt) or other privileged
context (teacher_context); "released" is always the default. A context that a row cannot
supply (no trace for teacher_context = trace) is an error, never a silent fallback.
"""

from __future__ import annotations

from opsdctl.errors import UserError

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
# data_collator.py, SelfDistillationDataCollator.__init__: transition_prompt
TRANSITION = ("\n\nAfter understanding the reference solution and the rationale behind each step, now articulate "
              "your own step-by-step reasoning that derives the same final answer to the problem below:\n")
# data_collator.py, SelfDistillationDataCollator.__init__: reason_first_prompt
REASON_FIRST_REQUEST = (
    "\n\nThe reference reasoning above arrives at the correct answer. "
    "Please analyze this solution and explain the key reasoning steps and problem-solving strategies employed. "
    "Do NOT use <think> tags. Do NOT derive your own solution. "
    "Simply analyze and explain the reference solution provided above.\n"
)
SOLUTION_HEADER = "Here is a reference solution to this problem:"
# ours: the release has one reference slot; "both" adds the trace under this header
TRACE_HEADER = "Here is a detailed reasoning trace for this problem:"
OWN_WORDS_CLOSING = "Now solve the problem yourself, in your own words."

STUDENT_STYLES = ("released", "boxed", "plain")
TEACHER_STYLES = ("released", "own-words")
CONTEXTS = ("solution", "trace", "both")


def eval_text(problem: str) -> str:
    """The evaluation prompt of the released eval/evaluate_math.py (evaluate_math500)."""
    return f"{problem}\n\n{BOXED_INSTRUCTION}"


def student_text(problem: str, style: str = "released") -> str:
    if style == "released":  # data_collator.py: student_user_message
        return f"Problem: {problem}\n\n{BOXED_INSTRUCTION}"
    if style == "boxed":  # ours before we followed the release
        return f"{problem}\n{BOXED_INSTRUCTION}"
    if style == "plain":
        return problem
    raise ValueError(f"student_prompt {style!r}: must be one of {', '.join(STUDENT_STYLES)}")


def reference(solution: str | None, trace: str | None, context: str) -> str:
    """The privileged material for teacher_context; raises UserError when the row lacks it."""
    if context not in CONTEXTS:
        raise ValueError(f"teacher_context {context!r}: must be one of {', '.join(CONTEXTS)}")
    if context in ("trace", "both") and not (trace and trace.strip()):
        raise UserError(f"teacher_context = {context!r}: this row has no reasoning trace (the dataset's "
                        "COT_Reason column); name the column with --trace-column or use teacher_context = \"solution\"")
    if context in ("solution", "both") and solution is None:
        raise UserError(f"teacher_context = {context!r}: this row has no solution")
    if context == "solution":
        return solution
    if context == "trace":
        return trace
    return f"{solution}\n\n{TRACE_HEADER}\n{trace}"


def teacher_text(problem: str, *, solution: str | None = None, trace: str | None = None,
                 context: str = "solution", style: str = "released") -> str:
    """The teacher's user message when reason_first is off."""
    ref = reference(solution, trace, context)
    if style == "released":  # data_collator.py: teacher_user_message
        return f"{problem}\n\n{SOLUTION_HEADER}\n{ref}\n{TRANSITION}\n{BOXED_INSTRUCTION}"
    if style == "own-words":  # ours before we followed the release
        parts = [problem, ""]
        if context in ("solution", "both"):
            parts += [SOLUTION_HEADER, solution.strip(), ""]
        if context in ("trace", "both"):
            parts += [TRACE_HEADER, trace.strip(), ""]
        return "\n".join(parts + [OWN_WORDS_CLOSING, BOXED_INSTRUCTION])
    raise ValueError(f"teacher_prompt {style!r}: must be one of {', '.join(TEACHER_STYLES)}")


def reason_first_text(problem: str, *, solution: str | None = None, trace: str | None = None,
                      context: str = "solution") -> str:
    """reason_first: the user message asking the model to analyse the reference
    (data_collator.py: reasoning_user_message; the release has no newline after the colon)."""
    ref = reference(solution, trace, context)
    return (f"Problem: {problem}\n\nHere is a correct reasoning to this problem:"
            f"=== Reference Reasoning Start ===\n{ref}\n=== Reference Reasoning End ===\n\n{REASON_FIRST_REQUEST}")


def reason_first_transition() -> str:
    """reason_first: raw text (no chat template) appended after the model's analysis, right
    before the student's completion (data_collator.py: transition_text)."""
    return f"\n{TRANSITION}\n{BOXED_INSTRUCTION}"


def chat_prompt(tokenizer, user_text: str, *, thinking: bool) -> str:
    """Render one user turn plus the assistant header, with Qwen3's enable_thinking switch."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": user_text}],
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=thinking,
    )
