"""The OPSD training workload: `python -m trainer` (or `accelerate launch -m trainer`).

Modules, one idea each: cli (arguments -> validated TrainConfig), data (rows, selection, order),
prompting (student/teacher/rationale prompts), batch (contiguous padded sequences), rollout
(sampling backends), loss (the pure OPSD loss), teacher (fixed / EMA / current), model (LoRA
student, hidden states), optim (AdamW, schedule), metrics (logs), checkpoint (adapters), train
(the loop).
"""
