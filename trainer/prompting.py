"""The student, teacher and reason_first prompts of a training row (texts in opsdkit.prompts).

student: student_prompt wording, chat template with enable_thinking = student_thinking;
teacher: (reason_first off) teacher_prompt wording around the teacher_context reference, chat
         template with enable_thinking = teacher_thinking;
reason_first (the released layout, opsd_trainer.py training_step): the teacher's context is
         [analysis request through the chat template] [the model's own analysis, sampled, at
         most RATIONALE_MAX_TOKENS] [the raw transition + instruction]; the student's completion
         follows. With pad_side = right each of those pieces is padded to the micro-batch's widest,
         as the release concatenates padded tensors.
"""

from __future__ import annotations

from opsdkit.prompts import (
    chat_prompt,
    reason_first_text,
    reason_first_transition,
    student_text,
    teacher_text,
)

from trainer.data import Row

# opsd_trainer.py OPSDTrainer.__init__: max_reasoning_length = getattr(args, "max_reasoning_length", 4096)
RATIONALE_MAX_TOKENS = 4096
RATIONALE_PLACEHOLDER = "[the model's analysis of the reference, sampled at training time]"


def student_user(row: Row, method: dict) -> str:
    return student_text(row.problem, style=method["student_prompt"])


def teacher_user(row: Row, hparams: dict, method: dict) -> str:
    """The teacher's user message: the analysis request when reason_first is on."""
    if hparams["reason_first"]:
        return reason_first_text(row.problem, solution=row.solution, trace=row.trace,
                                 context=method["teacher_context"])
    return teacher_text(row.problem, solution=row.solution, trace=row.trace, context=method["teacher_context"],
                        style=method["teacher_prompt"])


def student_prompt(tokenizer, row: Row, hparams: dict, method: dict) -> str:
    return chat_prompt(tokenizer, student_user(row, method), thinking=hparams["student_thinking"])


def teacher_prompt(tokenizer, row: Row, hparams: dict, method: dict) -> str:
    """The teacher's templated prompt (with reason_first: the analysis request, before the analysis)."""
    return chat_prompt(tokenizer, teacher_user(row, hparams, method), thinking=hparams["teacher_thinking"])


def teacher_display(tokenizer, row: Row, hparams: dict, method: dict) -> str:
    """The whole teacher context as text, the analysis shown by a placeholder (for --print-prompts)."""
    text = teacher_prompt(tokenizer, row, hparams, method)
    if hparams["reason_first"]:
        text += RATIONALE_PLACEHOLDER + reason_first_transition()
    return text


def encode(tokenizer, texts: list[str]) -> list[list[int]]:
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
