"""Fidelity: by default our trainer, evaluator and export do what the released OPSD code does.

Line numbers (`file.py:N`; a bare `:N` is in the file last named) refer to siyan-zhao/OPSD at
commit 590ec26c59e689a29840a501f65335578251b68c.

One test per point where the release and our first code differed. Each test types the released
string or behaviour and names where it comes from in the public release (github siyan-zhao/OPSD):
the file, the line and the function. Our own improvements are method knobs whose released value
is the default; the tests check the default, and that the knob really changes the behaviour.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO
from fixtures_tiny import one_thread, untrained_tiny_model  # noqa: F401  (pytest fixtures)

# Typed from the release; never imported from our code, so a drifting constant fails here.
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


# --- eval prompt: eval/evaluate_math.py:340-344, 358-360, evaluate_math500 ---------------------


def test_eval_prompt_is_the_released_one(untrained_tiny_model):
    """evaluate_math500 builds `f"{problem}\\n\\nPlease reason step by step, and put your final
    answer within \\\\boxed{{}}."` (eval/evaluate_math.py:340-342), one user message (:344), chat
    template with enable_thinking=True (:358-360; the default, :184 and --enable_thinking :573-578)."""
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


# --- the trainer ------------------------------------------------------------------------------

PROBLEM = "What is 2 + 3?"
SOLUTION = "2 + 3 = 5. The answer is \\boxed{5}."
TRACE = "We add the ones: 2 + 3 = 5. So the final answer is \\boxed{5}."
TRANSITION = ("\n\nAfter understanding the reference solution and the rationale behind each step, now articulate "
              "your own step-by-step reasoning that derives the same final answer to the problem below:\n")


def run_trainer(*args, timeout=120):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPSD_", "OPSDCTL_"))}
    if "OPSDCTL_CACHE_DIR" in os.environ:
        env["OPSDCTL_CACHE_DIR"] = os.environ["OPSDCTL_CACHE_DIR"]
    return subprocess.run([sys.executable, "-m", "trainer", *map(str, args)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


class Spy:
    """A rollout backend answering with canned completions, recording what it was asked."""

    name = "spy"

    def __init__(self, fixed=None):
        self.fixed = fixed or [[20, 21, 22, 23, 24, 25], [30, 31, 32]]  # lists dealt out row by row
        self.calls = []

    def sync_weights(self, model):
        pass

    def generate(self, prompts, spec):
        self.calls.append((prompts, spec))
        deal = self.fixed if isinstance(self.fixed[0], list) else [self.fixed]
        return [list(deal[i % len(deal)]) for i in range(len(prompts))]

    def close(self):
        pass


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    import json

    from opsdkit.tiny import make_rows

    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in make_rows(40, seed=5)))
    return str(path)


@pytest.fixture
def make(tmp_path, untrained_tiny_model, data_file, one_thread):  # noqa: F811
    """An OPSDTrainer on the random tiny model with canned rollouts, in this process."""
    from opsdctl.recipes import knobs
    from opsdctl.recipes.profiles import get_profile, with_overrides
    from trainer.config import TrainConfig
    from trainer.train import OPSDTrainer

    def _make(hp=None, method=None, *, steps=2, batch=2, accum=1, backend=None):
        hparams = {**knobs.default_hparams(), "max_completion_length": 6, "lora_r": 4, "lora_alpha": 8, **(hp or {})}
        prof = with_overrides(get_profile("tiny"), model=str(untrained_tiny_model), dataset=data_file,
                              max_steps=steps, per_device_train_batch_size=batch, gradient_accumulation_steps=accum,
                              save_steps=steps, learning_rate_scale=1.0)
        cfg = TrainConfig(profile=prof, hparams=hparams, method={**knobs.default_method(), **(method or {})},
                          seed=0, output_dir=tmp_path / "out", loss_chunk_size=7)
        return OPSDTrainer(cfg, backend=backend or Spy())

    return _make


@pytest.fixture(scope="module")
def tok(untrained_tiny_model):  # noqa: F811
    from opsdkit.modeling import load_tokenizer

    return load_tokenizer(str(untrained_tiny_model))


def released():
    from opsdctl.recipes import knobs

    return knobs.default_hparams(), knobs.default_method()


def row(trace=TRACE):
    from trainer.data import Row

    return Row(problem=PROBLEM, solution=SOLUTION, trace=trace, source="math")


def template(tok, text, thinking):
    return tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                   add_generation_prompt=True, enable_thinking=thinking)


def test_student_prompt_is_the_released_one(tok):
    """data_collator.py:52-58, SelfDistillationDataCollator.__call__: student_user_message =
    f"Problem: {problem}\\n\\nPlease reason step by step, and put your final answer within \\\\boxed{{}}."
    (data_collator.py:52), one user message (:53) through the chat template (:56-58). The public
    file passes no enable_thinking there; the workspace version the scorer re-trains with passes
    the thinking flags, both false in the baseline (the scorer's log; the next tests), so: thinking off."""
    from trainer import prompting

    hp, m = released()
    want = "Problem: What is 2 + 3?\n\nPlease reason step by step, and put your final answer within \\boxed{}."
    assert prompting.student_user(row(), m) == want
    assert prompting.student_prompt(tok, row(), hp, m) == template(tok, want, thinking=False)
    assert prompting.student_user(row(), {**m, "student_prompt": "boxed"}) == PROBLEM + "\n" + INSTRUCTION
    assert prompting.student_user(row(), {**m, "student_prompt": "plain"}) == PROBLEM


def test_teacher_prompt_is_the_released_one(tok):
    """data_collator.py:80-94, SelfDistillationDataCollator.__call__ (reason_first off, the else at
    :80): teacher_user_message (data_collator.py:82-87) =
    f"{problem}\\n\\nHere is a reference solution to this problem:\\n{solution}\\n" + transition_prompt
    (data_collator.py:28) + "\\nPlease reason step by step, ...", through the chat template (:88-93),
    thinking off as the scorer's workspace version passes it (see the student prompt's test)."""
    from trainer import prompting

    hp, m = released()
    want = (f"{PROBLEM}\n\nHere is a reference solution to this problem:\n{SOLUTION}\n{TRANSITION}\n"
            "Please reason step by step, and put your final answer within \\boxed{}.")
    assert prompting.teacher_user(row(), hp, m) == want
    assert prompting.teacher_prompt(tok, row(), hp, m) == template(tok, want, thinking=False)
    own = prompting.teacher_user(row(), hp, {**m, "teacher_prompt": "own-words"})
    assert own.endswith("Now solve the problem yourself, in your own words.\n" + INSTRUCTION) and TRANSITION not in own


def test_thinking_flags_are_both_off_in_the_baseline(tok):
    """The scorer prints `[modes] teacher_thinking=False student_thinking=False` for an
    empty recipe.env; recipes/baseline.toml is the release exactly."""
    from opsdctl.recipes import knobs
    from opsdctl.recipes.load import load_recipe
    from trainer import prompting

    hp, m = released()
    assert (hp["teacher_thinking"], hp["student_thinking"]) == (False, False)
    base = load_recipe("baseline", REPO / "recipes")
    assert base.hparams == knobs.default_hparams() and base.method == knobs.default_method()
    empty_think = "<think>\n\n</think>"
    assert empty_think in prompting.student_prompt(tok, row(), hp, m)
    assert empty_think in prompting.teacher_prompt(tok, row(), hp, m)


@pytest.mark.parametrize("key, value, released_file", [
    ("lmbda", 0.5, "training_step hard-codes on_policy = True"),  # opsd_trainer.py:1300
    ("lora_dropout", 0.05, "disable_dropout"),  # opsd_trainer.py:171-172
])
def test_knobs_the_release_ignores_are_refused_in_one_line(key, value, released_file, tmp_path):
    """opsd_trainer.py:1300, training_step: sets on_policy = True whatever lmbda is (stored at
    opsd_trainer.py:174, never read); opsd_trainer.py:171-172, OPSDTrainer.__init__: runs TRL's
    disable_dropout_in_model, so lora_dropout never acts. A recipe setting either to
    another value is refused (it would be a variant identical to the baseline)."""
    from opsdctl.errors import UserError
    from opsdctl.recipes import knobs

    for check in (lambda: knobs.check_hparams({key: value}, "r.toml"),
                  lambda: knobs.parse_recipe_env(f"{key}={value}\n", "recipe.env")):
        with pytest.raises(UserError) as err:
            check()
        line = str(err.value)
        assert "\n" not in line and key in line and "official re-training ignores it" in line
        assert released_file in line
    assert knobs.check_hparams({key: knobs.HPARAMS[key].default}, "r.toml") == {key: knobs.HPARAMS[key].default}
    env = tmp_path / "recipe.env"
    env.write_text(f"{key}={value}\n")
    proc = run_trainer("--profile", "tiny", "--recipe-env", env, "--seed", 1, "--output-dir", tmp_path / "o")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and key in proc.stderr
    assert not (tmp_path / "o").exists()


def test_lmbda_is_inert_every_step_samples_the_student(make):
    """opsd_trainer.py:1300, training_step: `on_policy = True`: no step trains on dataset solutions."""
    spy = Spy()
    tr = make(backend=spy, steps=3)
    for step in (1, 2, 3):
        assert tr.train_step(step)["on_policy"] is True
    assert len(spy.calls) == 3  # one rollout per step


def test_dropout_is_disabled_in_the_student(make):
    """opsd_trainer.py:171-172, OPSDTrainer.__init__:
    `if args.disable_dropout: disable_dropout_in_model(self.model)`
    (TRL's default is on): every dropout module has p = 0, so a training-mode forward is deterministic."""
    import torch

    from trainer.batch import build
    from trainer.model import completion_hidden

    tr = make({"lora_dropout": 0.3})  # past the knob check, the trainer still disables it
    drops = [mod for mod in tr.model.modules() if isinstance(mod, torch.nn.Dropout)]
    assert drops and all(d.p == 0.0 for d in drops)
    with torch.no_grad():
        for p in tr.params:
            p.normal_(0, 0.2)
    tr.model.train()
    b = build([[5, 6, 7]], [[10, 11, 12]], tr.pad_id)
    with torch.no_grad():
        torch.testing.assert_close(completion_hidden(tr.model, b), completion_hidden(tr.model, b), rtol=0, atol=0)


def test_micro_batch_weighting_in_the_training_step(make):
    """The same rule in OPSDTrainer.train_step: 1 row x 2 accumulation steps with completions of
    6 and 3 tokens; the logged loss is the mean of the two micro-batches' token means."""
    one, two = make(batch=1, accum=2), make(batch=1, accum=2)
    rec = one.train_step(1)
    batches, _ = two.prepare(1, two._my_rows())
    means = [two.micro_loss(mb, 1.0).loss_sum / sum(len(c) for c in mb.completions) for mb in batches]
    assert [len(mb.completions[0]) for mb in batches] == [6, 3]
    assert rec["loss"] == pytest.approx(sum(means) / 2, rel=1e-5)
    assert rec["loss"] != pytest.approx((means[0] * 6 + means[1] * 3) / 9, rel=1e-3)


def test_prompts_are_right_padded_with_the_completion_after_the_pads(make):
    """data_collator.py:32 (SelfDistillationDataCollator.__init__) sets tokenizer.padding_side = "right"
    and pads each batch's prompts to its longest (__call__, data_collator.py:103-115 and :170-179);
    opsd_trainer.py:1394, training_step appends the generation after the padded prompt
    (`torch.cat([teacher_prompts, generation_ids], dim=1)`) and passes no position ids (the forwards
    in compute_loss, opsd_trainer.py:624-627 and :669-672), so the
    pads are counted: completion token j of every row sits at position P + j."""
    from trainer.batch import build

    tr = make()
    _, m = released()
    assert m["pad_side"] == "right"
    pad = tr.pad_id
    b = build([[5, 6, 7], [8, 9]], [[10, 11], [12]], pad, m["pad_side"])
    assert b.input_ids.tolist() == [[5, 6, 7, 10, 11], [8, 9, pad, 12, pad]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 1, 0]]
    assert b.position_ids.tolist() == [[0, 1, 2, 3, 4]] * 2
    assert b.prompt_width == 3 and b.completion_mask.tolist() == [[True, True], [True, False]]
    left = build([[5, 6, 7], [8, 9]], [[10, 11], [12]], pad, "left")  # ours: contiguous
    assert left.input_ids.tolist()[1] == [pad, 8, 9, 12, pad] and left.position_ids.tolist()[1][1:4] == [0, 1, 2]


def test_pad_id_tokens_in_completions_are_masked(make):
    """opsd_trainer.py:1411-1412, training_step: `labels[labels == pad_token_id] = -100` and the
    attention masks are 0 wherever the ids equal the pad id (teacher: training_step, :1397-1399;
    student: generate_on_policy_outputs, :832-834, and _generate_on_policy_outputs_vllm, :1026-1028)
    (Qwen3's pad <|endoftext|> is also a stop token)."""
    from trainer.batch import build, count_tokens

    tr = make()
    pad = tr.pad_id
    assert tr.tokenizer.convert_ids_to_tokens(pad) == "<|endoftext|>" and pad in tr.stop_ids
    b = build([[5, 6]], [[10, 11, pad]], pad, "right")
    assert b.completion_mask.tolist() == [[True, True, False]] and b.attention_mask.tolist() == [[1, 1, 1, 1, 0]]
    assert count_tokens([10, 11, pad], pad) == 2
    spy = Spy(fixed=[10, 11, pad])
    tr = make(backend=spy)
    assert tr.train_step(1)["completion_length"] == 2  # the step counts and weighs 2 tokens per row


def test_reason_first_has_the_released_layout_and_budget(make, tok):
    """data_collator.py:63-74 and :146-152, SelfDistillationDataCollator.__call__: reasoning_user_message
    (data_collator.py:63-70: `Problem: {problem}\\n\\nHere is a correct reasoning
    to this problem:=== Reference Reasoning Start ===\\n{solution}\\n=== Reference Reasoning End ===\\n\\n`
    + reason_first_prompt, :21-26) through the chat template (:71-74), and transition_text (:146: `\\n` +
    transition_prompt + `\\nPlease reason ...`) tokenized raw (:147-152); opsd_trainer.py:1339-1347,
    training_step: the teacher prompt is
    [reasoning prompt][the model's reasoning][transition], each padded tensor concatenated; the
    reasoning is sampled with max_reasoning_length = 4096 (opsd_trainer.py:249-251, OPSDTrainer.__init__)."""
    from opsdctl.recipes.profiles import get_profile
    from trainer import prompting
    from trainer.batch import build
    from trainer.config import TrainConfig

    hp, m = released()
    hp = {**hp, "reason_first": True}
    request = ("Problem: What is 2 + 3?\n\nHere is a correct reasoning to this problem:"
               f"=== Reference Reasoning Start ===\n{SOLUTION}\n=== Reference Reasoning End ===\n\n"
               "\n\nThe reference reasoning above arrives at the correct answer. Please analyze this solution and "
               "explain the key reasoning steps and problem-solving strategies employed. Do NOT use <think> tags. "
               "Do NOT derive your own solution. Simply analyze and explain the reference solution provided above.\n")
    assert prompting.teacher_user(row(), hp, m) == request
    assert prompting.teacher_prompt(tok, row(), hp, m) == template(tok, request, thinking=False)
    from opsdkit.prompts import reason_first_transition

    assert reason_first_transition() == "\n" + TRANSITION + "\n" + INSTRUCTION
    cfg = TrainConfig(profile=get_profile("qwen3-1.7b"), hparams=hp, method=m, seed=0, output_dir=REPO)
    assert cfg.rationale_max_tokens == 4096
    from opsdctl.errors import UserError
    from opsdctl.recipes import knobs

    with pytest.raises(UserError, match="only the released layout"):  # no reason-first form of ours
        knobs.check_invariants(hp, "r.toml", {**m, "teacher_prompt": "own-words"})

    spy = Spy(fixed=[40, 41, 42])
    tr = make({"reason_first": True}, backend=spy)
    batches, _ = tr.prepare(1, tr._my_rows())
    (analysis_prompts, _), _ = spy.calls
    teacher = batches[0].teacher
    for r, pieces, asked in zip(batches[0].rows, teacher, analysis_prompts):
        want = prompting.encode(tr.tokenizer, [prompting.teacher_prompt(tr.tokenizer, r, tr.hp, tr.method),
                                               reason_first_transition()])
        assert pieces == (want[0], [40, 41, 42], want[1]) and asked == want[0]
    b = build(teacher, batches[0].completions, tr.pad_id, "right")
    widths = [max(len(p[k]) for p in teacher) for k in range(3)]
    short = min(range(2), key=lambda i: len(teacher[i][0]))
    row_ids = b.input_ids[short].tolist()
    assert row_ids[widths[0]: widths[0] + 3] == [40, 41, 42]  # the analysis starts after the padded request
    assert b.prompt_width == sum(widths)


def test_trace_context_reads_COT_Reason_and_never_falls_back(tmp_path, tok):
    """The released dataset (siyanzhao/Openthoughts_math_30k_opsd, opsd_train.py:244) holds its long trace in
    `COT_Reason` (the dataset's trace column); teacher_context = trace or both must be built from it, or refused."""
    import json

    from opsdctl.errors import UserError
    from trainer import data, prompting

    rows = [{"problem": PROBLEM, "solution": SOLUTION, "COT_Reason": TRACE, "source": "math"}]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sel = data.load_selection(str(path), "none", teacher_context="trace")
    assert sel.columns["trace"] == "COT_Reason" and sel.rows[0].trace == TRACE
    hp, m = released()
    text = prompting.teacher_user(sel.rows[0], hp, {**m, "teacher_context": "trace"})
    assert TRACE in text and SOLUTION not in text
    no_trace = tmp_path / "n.jsonl"
    no_trace.write_text(json.dumps({"problem": PROBLEM, "solution": SOLUTION}) + "\n")
    for context in ("trace", "both"):
        with pytest.raises(UserError, match="COT_Reason"):
            data.load_selection(str(no_trace), "none", teacher_context=context)
    assert data.load_selection(str(no_trace), "none").rows_selected == 1  # the solution needs no trace
    empty = tmp_path / "e.jsonl"
    empty.write_text(json.dumps({**rows[0], "COT_Reason": "  "}) + "\n")
    with pytest.raises(UserError, match="empty COT_Reason"):
        data.load_selection(str(empty), "none", teacher_context="both")
    with pytest.raises(UserError, match="no reasoning trace"):  # and never silently in the prompt either
        prompting.teacher_user(row(trace=None), hp, {**m, "teacher_context": "trace"})
    from opsdkit.tiny import TRACE_COLUMN

    assert TRACE_COLUMN == "COT_Reason"  # the tiny profile's data uses the released name


def test_ema_teacher_is_a_snapshot_after_the_first_step(make):
    """opsd_trainer.py:466-539, _update_ema (called by EMAUpdateCallback.on_step_end after each
    optimizer step, opsd_trainer.py:90-93): the first call copies the student's trainable weights
    and returns without a decay step (:516-529); later calls do
    ema = decay * ema + (1 - decay) * student (:539)."""
    import torch

    from trainer.teacher import EMA, STUDENT, lora_pairs

    tr = make({"use_ema_teacher": True, "fixed_teacher": False, "ema_decay": 0.75, "learning_rate": 1e-2})
    tr.train_step(1)
    s1 = [s.detach().clone() for _, s in lora_pairs(tr.model, EMA, STUDENT)]
    assert any(x.abs().sum() > 0 for x in s1)
    for (e, s) in lora_pairs(tr.model, EMA, STUDENT):
        torch.testing.assert_close(e, s, rtol=0, atol=0)  # a snapshot, no decay
    tr.train_step(2)
    for (e, s), prev in zip(lora_pairs(tr.model, EMA, STUDENT), s1):
        torch.testing.assert_close(e, 0.75 * prev + 0.25 * s)


# --- one step's math at any process count -------------------------------------------------------


class RowSpy(Spy):
    """Completions that depend on the prompt alone (3-8 tokens), so a row gets the same rollout
    whichever process samples it and whatever else is in the call."""

    def generate(self, prompts, spec):
        self.calls.append((prompts, spec))
        out = []
        for p in prompts:
            h = sum((i + 1) * t for i, t in enumerate(p)) % 9973
            out.append([30 + (h * (j + 3)) % 250 for j in range(3 + h % 6)])
        return out


class Collective:
    """Ranks in threads of one process: sum-reduce a tensor across them, in rank order (so every
    rank gets the same bits), as gloo / NCCL sum it across processes."""

    def __init__(self, n):
        import threading

        self.n, self.barrier, self.slots, self.local = n, threading.Barrier(n), [None] * n, threading.local()

    def all_reduce(self, tensor, *args, **kwargs):
        rank = self.local.rank
        self.slots[rank] = tensor.clone()
        self.barrier.wait()
        total = self.slots[0].clone()
        for other in self.slots[1:]:
            total += other
        self.barrier.wait()  # every rank has read the slots before any writes the next reduce
        tensor.copy_(total)


class ThreadAccelerator:
    """What OPSDTrainer asks of accelerate's Accelerator, for rank `rank` of a Collective."""

    def __init__(self, group, rank):
        import torch

        self.group, self.device = group, torch.device("cpu")
        self.num_processes, self.process_index, self.is_main_process = group.n, rank, rank == 0

    def reduce(self, tensor, reduction="sum"):
        out = tensor.clone()
        self.group.all_reduce(out)
        return out / self.num_processes if reduction == "mean" else out


@pytest.mark.parametrize("weighting", ["micro_batch", "token"])
def test_one_process_x_8_and_4_processes_x_2_take_the_same_rows_and_compute_the_same_step(
        weighting, tmp_path, untrained_tiny_model, data_file, one_thread, monkeypatch):  # noqa: F811
    """The released run is 4 processes x 4 rows x 2 accumulation (a global batch of 32); accelerate
    shards the sampler's batches of 4 over the processes (process r takes batches r, r + 4, ...), the
    HF Trainer divides each micro-batch's loss by the accumulation steps and DDP averages the
    processes' gradients. With the same profile on 1 process the trainer keeps the global batch
    (accumulation 2 x 4 = 8) and the step is the same computation: the same 32 rows in the same
    eight micro-batches of 4, the same loss and the same LoRA gradients (float32, summed in another
    order: rtol 1e-5), for both loss weightings; and the step after, from the updated weights."""
    import threading

    import torch

    from opsdctl.recipes import knobs
    from opsdctl.recipes.profiles import get_profile, with_overrides
    from trainer.config import TrainConfig
    from trainer.train import OPSDTrainer

    prof = with_overrides(get_profile("tiny"), model=str(untrained_tiny_model), dataset=data_file, max_steps=2,
                          per_device_train_batch_size=4, gradient_accumulation_steps=2, num_processes=4,
                          save_steps=2, learning_rate_scale=1.0)  # the released layout: 4 x 4 x 2
    hp = {**knobs.default_hparams(), "max_completion_length": 8, "lora_r": 4, "lora_alpha": 8, "learning_rate": 1e-3}

    def trainer(name, accelerator=None):
        cfg = TrainConfig(profile=prof, hparams=hp, method={**knobs.default_method(), "loss_weighting": weighting},
                          seed=3, output_dir=tmp_path / name, loss_chunk_size=7)
        tr = OPSDTrainer(cfg, backend=RowSpy(), accelerator=accelerator)
        tr.seen_rows, tr.grads = [], []
        prepare = tr.prepare

        def keep_rows(n, micro_rows):
            tr.seen_rows.append([[r.problem for r in rows] for rows in micro_rows])
            return prepare(n, micro_rows)

        tr.prepare = keep_rows
        # the clipped, averaged gradients the optimizer applies
        tr.optimizer.register_step_pre_hook(lambda *_: tr.grads.append([p.grad.detach().clone() for p in tr.params]))
        return tr

    one = trainer("one")
    assert (one.P, one.GA) == (1, 8)
    one_records = [one.train_step(s) for s in (1, 2)]

    group = Collective(4)
    ranks = [trainer(f"rank{r}", ThreadAccelerator(group, r)) for r in range(4)]
    assert {(t.P, t.GA) for t in ranks} == {(4, 2)}
    monkeypatch.setattr(torch.distributed, "all_reduce", group.all_reduce)
    records, errors = [[] for _ in ranks], []

    def run(rank):
        group.local.rank = rank
        try:
            for s in (1, 2):
                records[rank].append(ranks[rank].train_step(s))
        except BaseException as exc:  # a failed rank must not leave the others at the barrier
            errors.append(exc)
            group.barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors

    for s in range(2):
        # the same 32 rows, and micro-batch k of the step (k = m x 4 + r) is the same 4 rows
        mine = [ranks[r].seen_rows[s][m] for m in range(2) for r in range(4)]
        assert mine == one.seen_rows[s] and sum(map(len, mine)) == 32
        for r in range(4):
            assert records[r][s]["loss"] == pytest.approx(one_records[s]["loss"], rel=1e-5)
            assert records[r][s]["grad_norm"] == pytest.approx(one_records[s]["grad_norm"], rel=1e-5)
            assert records[r][s]["completion_length"] == pytest.approx(one_records[s]["completion_length"])
            for g4, g1 in zip(ranks[r].grads[s], one.grads[s]):
                torch.testing.assert_close(g4, g1, rtol=1e-5, atol=1e-9)
    assert one_records[0]["loss"] != pytest.approx(one_records[1]["loss"], rel=1e-3)  # the steps differ
