"""Rendering the student, teacher and rationale prompts of a row (text through opsdkit.prompts).

student: the problem (+ the boxed instruction when student_prompt = boxed), chat template with
         enable_thinking = student_thinking;
teacher: the problem + privileged context (teacher_context: solution | trace | both), with an
         optional rationale first (reason_first), enable_thinking = teacher_thinking;
rationale (reason_first): the model is asked to explain why the reference solution works; its
         answer is placed before the reference in the teacher prompt.
"""

from __future__ import annotations

from opsdkit.prompts import chat_prompt, student_text, teacher_text

from trainer.data import Row

RATIONALE_INSTRUCTION = ("Explain briefly why this reference solution is correct: name the key idea "
                         "and each step it relies on.")
RATIONALE_MAX_TOKENS = 512  # capped further by max_completion_length


def student_prompt(tokenizer, row: Row, hparams: dict, method: dict) -> str:
    return chat_prompt(tokenizer, student_text(row.problem, style=method["student_prompt"]),
                       thinking=hparams["student_thinking"])


def teacher_prompt(tokenizer, row: Row, hparams: dict, method: dict, rationale: str | None = None) -> str:
    text = teacher_text(row.problem, solution=row.solution, trace=row.trace,
                        context=method["teacher_context"], rationale=rationale)
    return chat_prompt(tokenizer, text, thinking=hparams["teacher_thinking"])


def rationale_prompt(tokenizer, row: Row) -> str:
    text = f"{row.problem}\n\nReference solution:\n{row.solution.strip()}\n\n{RATIONALE_INSTRUCTION}"
    return chat_prompt(tokenizer, text, thinking=False)


def encode(tokenizer, texts: list[str]) -> list[list[int]]:
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
