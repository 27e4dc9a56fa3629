"""The OPSD training loop (accelerate for processes and devices; PEFT LoRA; AdamW).

One optimizer step, on every process (what the released opsd_trainer.py does by default):
1. take this process's rows of the global batch (per-device batch x gradient accumulation);
2. reason_first: the model first writes an analysis of each reference (at most 4096 tokens);
   then the student samples completions through the rollout backend. Every step is on-policy:
   the release hard-codes on_policy = True, so lmbda is inert (knobs refuse other values);
3. for each micro-batch: teacher hidden states (no grad) and student hidden states at the
   completion positions (layout: method knob pad_side), then the chunked loss over the
   completion tokens that are not the pad id, divided as loss_weighting says (micro_batch:
   the micro-batch's own tokens x accumulation, released; token: the step's tokens), backward;
4. gradients of the LoRA weights averaged over processes, clipped (max_grad_norm), AdamW step,
   scheduler step; EMA teacher: a snapshot of the student after the first step, then
   ema <- decay * ema + (1 - decay) * student after every later one;
5. rank 0 writes metrics/progress/HF-style lines, and checkpoints at save_steps.
Dropout is disabled in the student, as TRL's disable_dropout does in the release.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import torch

from opsdctl.errors import UserError
from opsdctl.templates import grad_accum
from opsdkit.prompts import reason_first_transition
from trainer import checkpoint, data, prompting
from trainer.batch import build, count_tokens
from trainer.config import TrainConfig
from trainer.loss import LossSpec, chunked_loss, micro_batch_normalizer
from trainer.gpu_memory import memory_meter
from trainer.metrics import RunLog
from trainer.model import (
    backbone_and_head,
    completion_hidden,
    lora_config,
    trainable_parameters,
    wrap_with_lora,
)
from trainer.optim import clip_gradients, lr_curve, make_optimizer, make_scheduler
from trainer.rollout import HFGenerateBackend, SamplingSpec, choose_backend
from trainer.teacher import add_ema_adapter, as_teacher, ema_snapshot, ema_update, teacher_mode

MAX_PROMPT_TOKENS = 4096  # vLLM max_model_len headroom for prompts (student and rationale)


def accumulation_for(profile, processes: int, log=print) -> int:
    """Gradient accumulation that keeps the profile's global batch (per-device batch x accumulation
    x num_processes, a budget knob) when the run has a different number of processes."""
    ga = profile.gradient_accumulation_steps
    if processes == profile.num_processes:
        return ga
    try:  # the rule of opsdctl's {grad_accum} placeholder, so a user's script and ours agree
        kept = grad_accum(profile.global_batch, profile.per_device_train_batch_size, processes)
    except UserError:
        log(f"warning: {processes} processes instead of the profile's {profile.num_processes}: the global batch "
            f"changes from {profile.global_batch} to {profile.per_device_train_batch_size * ga * processes}")
        return ga
    log(f"{processes} processes instead of the profile's {profile.num_processes}: gradient accumulation "
        f"{ga} -> {kept} keeps the global batch at {profile.global_batch}")
    return kept


def rollout_seed(seed: int, step: int, process_index: int, salt: int = 0) -> int:
    return (seed * 1_000_003 + step * 7919 + process_index * 104_729 + salt) % (2**31 - 1)


@dataclass
class StepBatch:
    rows: list  # data.Row per example, this process
    student: list[list[int]]  # prompt ids
    teacher: list  # prompt ids, or (request, analysis, transition) pieces with reason_first
    completions: list[list[int]]


class OPSDTrainer:
    def __init__(self, cfg: TrainConfig, *, backend=None, accelerator=None, log: RunLog | None = None):
        from accelerate import Accelerator

        from opsdkit.startup_clock import Phases, since_process_start

        self.startup = {"imports": since_process_start()}  # interpreter + torch/transformers, before us
        phases = Phases()
        self.cfg = cfg
        self.hp = cfg.hparams
        self.method = cfg.method
        self.acc = accelerator or Accelerator(cpu=not torch.cuda.is_available())
        self.device = self.acc.device
        self.P = self.acc.num_processes
        self.rank = self.acc.process_index
        prof = cfg.profile
        self.B = prof.per_device_train_batch_size
        self.max_steps = prof.max_steps
        self.log = log or RunLog(cfg.output_dir, self.max_steps, enabled=self.acc.is_main_process)
        for note in cfg.notes:
            self.log.info(note)
        # the scorer's capped script prints this line; opsdctl's effective-config check reads it
        self.log.info(f"[modes] teacher_thinking={self.hp['teacher_thinking']} student_thinking={self.hp['student_thinking']}")
        self.GA = (accumulation_for(prof, self.P, self.log.info) if cfg.keep_global_batch
                   else prof.gradient_accumulation_steps)

        # data first: a bad dataset or selection fails before any model loads
        self.selection = data.load_selection(prof.dataset, self.method["data_select"], cfg.columns,
                                             teacher_context=self.method["teacher_context"])
        self.log.info(f"data {prof.dataset}: {self.selection.note}; columns "
                      + ", ".join(f"{r}={c}" for r, c in self.selection.columns.items() if c))
        self.stream = data.RowStream(self.selection.rows, cfg.seed)
        phases.mark("accelerate_and_data")

        from opsdkit.modeling import load_model, load_tokenizer, stop_token_ids

        cuda = self.device.type == "cuda"
        self.tokenizer = load_tokenizer(prof.model, padding_side="left")
        base = load_model(prof.model, dtype=torch.bfloat16 if cuda else torch.float32, device=self.device)
        self.stop_ids = stop_token_ids(self.tokenizer, base)
        self.pad_id = self.tokenizer.pad_token_id
        self.eos_id = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if not isinstance(self.eos_id, int) or self.eos_id == self.tokenizer.unk_token_id:
            self.eos_id = self.tokenizer.eos_token_id
        self.model = wrap_with_lora(base, self.hp, cfg.seed, gradient_checkpointing=cuda)
        self.teacher = teacher_mode(self.hp)
        self.ema_started = False  # the EMA teacher starts as a snapshot after the first optimizer step
        if self.teacher == "ema":
            add_ema_adapter(self.model, lora_config(self.hp))
        self.model.train()
        self.params = trainable_parameters(self.model)
        self.optimizer = make_optimizer(self.params, cfg.optimizer_hparams)
        self.scheduler = make_scheduler(self.optimizer, self.hp, self.max_steps)
        self.loss_spec = LossSpec.from_knobs(self.hp, self.method)
        self.max_new = cfg.max_completion_length
        self.rationale_max = cfg.rationale_max_tokens
        self.sampling = SamplingSpec.from_knobs(self.hp, self.max_new)
        phases.mark("models")
        self.backend = backend or self._make_backend()
        phases.mark("rollout_engine")
        self.memory = memory_meter(self.device, self.log.info)  # NVML on GPUs: vLLM's pool fools torch's counters
        self.log.info(f"teacher={self.teacher} rollout={self.backend.name} processes={self.P} "
                      f"batch={self.B}x{self.GA}x{self.P} steps={self.max_steps} "
                      f"max_completion_length={self.max_new} trainable={sum(p.numel() for p in self.params)}")
        self.startup.update(phases.summary())
        self.log.info("startup: " + ", ".join(f"{k.replace('_', ' ')} {v} s" for k, v in self.startup.items()
                                              if v is not None))

    def _make_backend(self):
        kind = choose_backend(self.cfg.rollout_backend)
        if kind == "vllm":
            from opsdkit.tiny import resolve
            from trainer.rollout import VLLMColocatedBackend

            return VLLMColocatedBackend(resolve(self.cfg.profile.model),
                                        gpu_memory_utilization=self.cfg.profile.gpu_memory_utilization,
                                        max_model_len=MAX_PROMPT_TOKENS + self._longest_generation(),
                                        stop_ids=self.stop_ids,
                                        seed=self.cfg.seed, process_index=self.rank)
        return HFGenerateBackend(self.model, self.stop_ids, self.pad_id, batch_size=self.B)

    def _longest_generation(self) -> int:
        return max(self.max_new, self.rationale_max if self.hp["reason_first"] else 0)

    # --- one step ---------------------------------------------------------------------------

    def _my_rows(self) -> list[list]:
        g = self.stream.take(self.B * self.GA * self.P)
        return [g[(m * self.P + self.rank) * self.B: (m * self.P + self.rank + 1) * self.B] for m in range(self.GA)]

    def _generate(self, prompts: list[list[int]], spec: SamplingSpec) -> tuple[list[list[int]], float]:
        t0 = time.perf_counter()
        out = self.backend.generate(prompts, spec)
        dt = time.perf_counter() - t0
        tokens = sum(len(c) for c in out)
        self.log.info(f"{self.backend.name} generation done - elapsed time: {dt:.2f}s, prompts: {len(prompts)}, "
                      f"total tokens: {tokens}, avg length: {tokens / max(1, len(out)):.1f}, "
                      f"speed: {tokens / max(dt, 1e-9):.1f} tok/s")
        return out, dt

    def prepare(self, step: int, micro_rows: list[list]) -> tuple[list[StepBatch], float]:
        """Prompts and completions of every micro-batch of a step; returns the rollout seconds."""
        tok, hp, method = self.tokenizer, self.hp, self.method
        flat = [r for rows in micro_rows for r in rows]
        student = prompting.encode(tok, [prompting.student_prompt(tok, r, hp, method) for r in flat])
        teacher = prompting.encode(tok, [prompting.teacher_prompt(tok, r, hp, method) for r in flat])
        t0 = time.perf_counter()
        self.backend.sync_weights(self.model)
        rollout_s = time.perf_counter() - t0
        if hp["reason_first"]:  # the analysis first, as the release's training_step does
            spec = self.sampling.with_seed(rollout_seed(self.cfg.seed, step, self.rank, salt=1))
            spec = SamplingSpec(spec.temperature, spec.top_p, spec.top_k, self.rationale_max, seed=spec.seed)
            analyses, dt = self._generate(teacher, spec)
            rollout_s += dt
            (transition,) = prompting.encode(tok, [reason_first_transition()])
            teacher = [(request, analysis, transition) for request, analysis in zip(teacher, analyses)]
        spec = self.sampling.with_seed(rollout_seed(self.cfg.seed, step, self.rank))
        completions, dt = self._generate(student, spec)
        rollout_s += dt
        out, i = [], 0
        for rows in micro_rows:
            j = i + len(rows)
            out.append(StepBatch(rows, student[i:j], teacher[i:j], completions[i:j]))
            i = j
        return out, rollout_s

    def micro_loss(self, mb: StepBatch, normalizer: float):
        side = self.method["pad_side"]
        s_batch = build(mb.student, mb.completions, self.pad_id, side).to(self.device)
        t_batch = build(mb.teacher, mb.completions, self.pad_id, side).to(self.device)
        with as_teacher(self.model, self.teacher):
            h_t = completion_hidden(self.model, t_batch)
        h_s = completion_hidden(self.model, s_batch)
        _, head = backbone_and_head(self.model)
        tokens = s_batch.completion_ids[s_batch.completion_mask]
        return chunked_loss(h_s, h_t, head, tokens, self.loss_spec, normalizer=normalizer,
                            chunk_size=self.cfg.loss_chunk_size)

    def _sum(self, values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        if self.P > 1:
            t = self.acc.reduce(t, reduction="sum")
        return t.tolist()

    def _average_gradients(self) -> None:
        if self.P == 1:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        flat = torch.cat([g.reshape(-1).float() for g in grads])
        torch.distributed.all_reduce(flat)
        flat /= self.P
        i = 0
        for p in self.params:
            n = p.numel()
            p.grad = flat[i: i + n].view_as(p).to(p.dtype)
            i += n

    def train_step(self, step: int) -> dict:
        self.memory.take()  # a new window: this step's peaks only
        t0 = time.perf_counter()
        batches, rollout_s = self.prepare(step, self._my_rows())
        rollout_peak = self.memory.take()  # the sampler awake (vLLM: its KV cache) next to the trainer
        tokens = [sum(count_tokens(c, self.pad_id) for c in mb.completions) for mb in batches]
        (n_global,) = self._sum([sum(tokens)])
        self.model.train()
        objective = loss_sum = kl_sum = clipped = 0.0
        for mb, n_mb in zip(batches, tokens):
            normalizer = micro_batch_normalizer(self.method["loss_weighting"], n_mb, len(batches), n_global, self.P)
            out = self.micro_loss(mb, normalizer)
            out.loss.backward()
            objective += out.loss_sum / normalizer
            loss_sum += out.loss_sum
            kl_sum += out.kl_sum
            clipped += out.clipped
        self._average_gradients()
        grad_norm, grad_norm_clipped = clip_gradients(self.params, self.hp["max_grad_norm"])
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.teacher == "ema":
            if self.ema_started:
                ema_update(self.model, self.hp["ema_decay"])
            else:  # the release initialises its EMA on the first optimizer step, without decay
                ema_snapshot(self.model)
                self.ema_started = True
        objective, loss_sum, kl_sum, clipped, rows = self._sum([objective, loss_sum, kl_sum, clipped,
                                                                sum(len(mb.completions) for mb in batches)])
        step_s = time.perf_counter() - t0
        train_peak = self.memory.take()  # the sampler asleep: what training itself needs
        n = max(1.0, n_global)
        return {
            # loss: the objective minimised (the mean over processes of each one's weighted sum)
            "step": step, "loss": objective / self.P, "grad_norm": grad_norm, "grad_norm_clipped": grad_norm_clipped,
            "learning_rate": lr, "kl": kl_sum / n, "frac_clipped": clipped / n,
            "completion_length": n_global / max(1.0, rows), "rollout_seconds": rollout_s,
            "step_seconds": step_s, "tokens_per_second": n_global / step_s if step_s > 0 else 0.0,
            "peak_memory_mib": max(rollout_peak, train_peak), "rollout_peak_memory_mib": rollout_peak,
            "train_peak_memory_mib": train_peak, "memory_source": self.memory.source, "on_policy": True,  # lmbda is inert
        }

    # --- the run --------------------------------------------------------------------------

    def save(self, name: str, step: int) -> None:
        if self.acc.is_main_process:
            checkpoint.save_adapter(self.model, self.cfg.output_dir, name,
                                    info={"step": step, "recipe": self.cfg.recipe_name, "hash": self.cfg.recipe_hash,
                                          "seed": self.cfg.seed, "base_model": self.cfg.profile.model})
        self.acc.wait_for_everyone()

    def replicas_in_sync(self) -> bool:
        """Every process holds the same adapter (they start seeded alike and apply averaged grads)."""
        if self.P == 1:
            return True
        mine = torch.stack([sum(p.detach().double().sum() for p in self.params),
                            sum(p.detach().double().abs().sum() for p in self.params)]).to(self.device)
        every = self.acc.gather(mine[None]).view(self.P, 2)
        return bool(torch.allclose(every, every[0:1].expand_as(every), rtol=1e-9, atol=0.0))

    def train(self) -> dict:
        cfg = self.cfg
        if self.acc.is_main_process:
            cfg.output_dir.mkdir(parents=True, exist_ok=True)
            (cfg.output_dir / "train_config.json").write_text(json.dumps(
                {**cfg.to_dict(), "lr_curve_head": lr_curve(cfg.optimizer_hparams, self.max_steps)[:5],
                 "rows_total": self.selection.rows_total, "rows_selected": self.selection.rows_selected,
                 "data_note": self.selection.note}, indent=1, default=str) + "\n")
        t0 = time.perf_counter()
        saved = set()
        for step in range(1, self.max_steps + 1):
            record = self.train_step(step)
            self.log.step(record, self.stream.epoch)
            if step % cfg.profile.save_steps == 0 or step == self.max_steps:
                self.save(f"checkpoint-{step}", step)
                saved.add(step)
        self.save("checkpoint-final", self.max_steps)
        runtime = time.perf_counter() - t0
        in_sync = self.replicas_in_sync()
        if not in_sync:
            self.log.info("warning: the processes' adapters differ; gradients were not averaged alike")
        extra = {"replicas_in_sync": in_sync, "rows_total": self.selection.rows_total, "rows_selected": self.selection.rows_selected,
                 "data_select": self.method["data_select"], "max_completion_length": self.max_new,
                 "teacher": self.teacher, "rollout_backend": self.backend.name, "num_processes": self.P,
                 "gradient_accumulation_steps": self.GA, "global_batch": self.B * self.GA * self.P,
                 "recipe": cfg.recipe_name, "recipe_hash": cfg.recipe_hash, "seed": cfg.seed,
                 "checkpoints": [f"checkpoint-{s}" for s in sorted(saved)] + ["checkpoint-final"],
                 "startup_seconds": self.startup}
        result = self.log.finish(runtime=runtime, samples=self.stream.consumed, epoch=self.stream.epoch, extra=extra)
        self.memory.close()
        self.backend.close()
        # accelerate's own teardown destroys the process group: left to the interpreter's exit,
        # gloo's threads can abort a finished run ("terminate called without an active exception");
        # the barrier first, so no process tears down while another is still in a collective
        self.acc.wait_for_everyone()
        self.acc.end_training()
        return result


def run(cfg: TrainConfig) -> dict:
    return OPSDTrainer(cfg).train()
