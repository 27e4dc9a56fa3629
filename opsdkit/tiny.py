"""The `tiny` profile's world, built offline: a real small problem rather than noise.

- generated arithmetic problems with worked solutions, long traces and integer answers
  (a training set with `math` (one step) and `arith` (two steps) sources, and a benchmark); the
  training file names its columns as the released dataset does (`COT_Reason` for the trace);
- a byte-level BPE tokenizer trained on that text, with a Qwen3-style chat template;
- a tiny Qwen3-architecture model given a short supervised warm start, so it solves some
  problems and OPSD has something to improve.

The warm-started model and its tokenizer ship in the package (`opsdkit/tiny_model/`, about 600 KB,
made by `python -m opsdkit.tiny --ship`), so a fresh machine does not train it: the first
`opsdctl demo` spends its minutes on the demo, and every machine runs the very same weights (a
warm start's floats differ a little between CPUs). The data are generated, deterministically, in
about a second. Without the shipped files (a source tree without them, `--ship` itself) the warm
start runs here, on one thread: on a 2-core machine under load, two threads that wait on each other
took 3.1 s a step against 0.48 s (docs/benchmarks.md).

Everything lands in the user's cache dir (`OPSDCTL_CACHE_DIR`, else `$XDG_CACHE_HOME/opsdctl`,
else `~/.cache/opsdctl`), built once under a file lock; partial builds a killed process left
behind are removed under the same lock (never one another process is writing).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

TINY_VERSION = 4  # 3: released prompts in the warm start, the trace column named COT_Reason; 4: shipped weights
N_TRAIN = 3000
N_BENCH = 30
VOCAB_SIZE = 320
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
TRACE_COLUMN = "COT_Reason"  # the long reasoning trace's column in siyanzhao/Openthoughts_math_30k_opsd

# Model shape: Qwen3 architecture, about a hundred thousand parameters.
TINY_SHAPE = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=1024)
# Sized so the model solves about a third of the benchmark at temperature 1 (avg@16 34%), room for a
# recipe to help or hurt; 200 or 300 steps left it near 7%. 600 steps are about 150 CPU seconds.
WARM_START_STEPS = 600
WARM_START_BATCH = 32
WARM_START_LR = 3e-3
WARM_START_SUB_BATCH = 16
WARM_START_THREADS = 1  # as fast as two on an idle 2-core machine, six times faster on a loaded one
SHIPPED = Path(__file__).resolve().parent / "tiny_model"  # the warm-started model + tokenizer
SHIPPED_INFO = "opsdctl_tiny.json"  # in SHIPPED: how it was made (version, steps, loss, library versions)

# A Qwen3-like chat template: thinking off inserts an empty think block, as Qwen3 does.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\n\n</think>\n\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)


@dataclass(frozen=True)
class TinyAssets:
    root: Path
    model_dir: Path  # model + tokenizer, loadable with from_pretrained
    train_file: Path  # jsonl: problem, solution, COT_Reason, source, num_tokens, answer
    bench_file: Path  # jsonl: id, problem, answer


def cache_root() -> Path:
    base = os.environ.get("OPSDCTL_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "opsdctl"


def resolve(location: str, cache_dir: Path | None = None) -> str:
    """Map `tiny://model|train|bench` to local paths (building them if needed); pass others through."""
    if not location.startswith("tiny://"):
        return location
    what = location[len("tiny://"):]
    assets = ensure_tiny_assets(cache_dir)
    paths = {"model": assets.model_dir, "train": assets.train_file, "bench": assets.bench_file}
    if what not in paths:
        raise ValueError(f"{location}: unknown tiny asset; use tiny://model, tiny://train or tiny://bench")
    return str(paths[what])


# --- data ---------------------------------------------------------------------------------


def _op(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _carry_words(a: int, op: str, b: int) -> str:
    """A long, step-by-step account of one operation (the `trace` column)."""
    r = _op(a, op, b)
    if op == "*":
        return f"{a} * {b}: {a} added {b} times gives {r}."
    ones = f"ones {a % 10} {op} {b % 10}"
    tens = f"tens {a // 10} {op} {b // 10}"
    return f"{a} {op} {b}: {ones}, {tens}, so {a} {op} {b} = {r}."


def make_problem(rng: random.Random, source: str) -> dict:
    if source == "math":
        op = rng.choice("+-")
        a, b = rng.randint(2, 19), rng.randint(1, 9)
        ans = _op(a, op, b)
        problem = f"What is {a} {op} {b}?"
        solution = f"{a} {op} {b} = {ans}. The answer is \\boxed{{{ans}}}."
        trace = f"We need {a} {op} {b}. {_carry_words(a, op, b)} So the final answer is \\boxed{{{ans}}}."
    else:
        op1, op2 = rng.choice("+-"), rng.choice("+-")
        a, b, c = rng.randint(2, 19), rng.randint(1, 9), rng.randint(1, 9)
        mid = _op(a, op1, b)
        ans = _op(mid, op2, c)
        problem = f"Compute {a} {op1} {b} {op2} {c}."
        solution = f"{a} {op1} {b} = {mid}. {mid} {op2} {c} = {ans}. The answer is \\boxed{{{ans}}}."
        trace = (f"First {_carry_words(a, op1, b)} Then {_carry_words(mid, op2, c)} "
                 f"So the final answer is \\boxed{{{ans}}}.")
    return {"problem": problem, "solution": solution, TRACE_COLUMN: trace, "source": source, "answer": str(ans)}


def make_rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [make_problem(rng, "math" if rng.random() < 0.4 else "arith") for _ in range(n)]


def make_benchmark(n: int = N_BENCH, seed: int = 2024) -> list[dict]:
    rows = make_rows(n, seed)
    return [{"id": f"tiny-{i + 1:03d}", "problem": r["problem"], "answer": r["answer"]} for i, r in enumerate(rows)]


# --- tokenizer ----------------------------------------------------------------------------


def train_tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Digits one by one: arithmetic is learnable when numbers are spelled digit by digit.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   padding_side="left", model_max_length=TINY_SHAPE["max_position_embeddings"])
    fast.chat_template = CHAT_TEMPLATE
    return fast


# --- model --------------------------------------------------------------------------------


def tiny_config(tokenizer):
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=len(tokenizer), tie_word_embeddings=True, rope_theta=10000.0,
                       eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                       bos_token_id=None, **TINY_SHAPE)


def _sft_examples(rows: list[dict], tokenizer) -> list[tuple[list[int], int]]:
    """(token ids, prompt length) pairs in the released prompts: the training student's (thinking
    off), the evaluation's (thinking on), and the teacher's holding the solution (thinking off), so
    the base model both solves and reads references."""
    from opsdkit.prompts import chat_prompt, eval_text, student_text, teacher_text

    out = []
    for i, r in enumerate(rows):
        kind = i % 3
        if kind == 0:
            prompt = chat_prompt(tokenizer, student_text(r["problem"]), thinking=False)
            target = r["solution"]
        elif kind == 1:
            prompt = chat_prompt(tokenizer, eval_text(r["problem"]), thinking=True)
            target = f"{r['solution'].rsplit(' The answer', 1)[0]}\n</think>\n\nThe answer is \\boxed{{{r['answer']}}}."
        else:
            prompt = chat_prompt(tokenizer, teacher_text(r["problem"], solution=r["solution"]), thinking=False)
            target = r["solution"]
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        t = tokenizer(target + "<|im_end|>", add_special_tokens=False)["input_ids"]
        out.append((p + t, len(p)))
    return out


def padded(examples: list[tuple[list[int], int]], pad: int):
    """Right-padded (input_ids, labels, attention_mask) with labels on the answer tokens only."""
    import torch

    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for j, (ids, plen) in enumerate(examples):  # right padding is fine for teacher forcing
        input_ids[j, : len(ids)] = torch.tensor(ids)
        labels[j, plen: len(ids)] = torch.tensor(ids[plen:])
        mask[j, : len(ids)] = 1
    return input_ids, labels, mask


def accumulate_batch_loss(model, batch: list[tuple[list[int], int]], pad: int,
                          sub_batch: int = WARM_START_SUB_BATCH) -> float:
    """Backpropagate the batch's mean loss over all its answer tokens (what one padded batch's
    `.loss` is) and return it. It is summed over length-sorted sub-batches, so that a short
    example is not padded to the longest one (teacher prompts are ~3x longer): a quarter less
    time for the same gradient (tests/integration/test_tiny_assets.py)."""
    import torch

    n_tokens = sum(len(ids) - plen for ids, plen in batch)
    ordered = sorted(batch, key=lambda e: len(e[0]))
    total = 0.0
    for i in range(0, len(ordered), sub_batch):
        input_ids, labels, mask = padded(ordered[i: i + sub_batch], pad)
        logits = model(input_ids=input_ids, attention_mask=mask).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                                 ignore_index=-100, reduction="sum") / n_tokens
        loss.backward()
        total += loss.item()
    return total


def warm_start(model, tokenizer, rows: list[dict], *, steps: int = WARM_START_STEPS, seed: int = 0,
               log=print) -> list[float]:
    """A short supervised warm start (loss on the answer tokens only), on WARM_START_THREADS
    threads. Returns the loss curve."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(WARM_START_THREADS)
    try:
        return _warm_start(model, tokenizer, rows, steps, seed, log)
    finally:
        torch.set_num_threads(threads)


def _warm_start(model, tokenizer, rows: list[dict], steps: int, seed: int, log) -> list[float]:
    import torch

    torch.manual_seed(seed)
    examples = _sft_examples(rows, tokenizer)
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=WARM_START_LR, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * max(0.05, 1 - s / steps))
    pad = tokenizer.pad_token_id
    model.train()
    losses = []
    for step in range(steps):
        batch = rng.sample(examples, WARM_START_BATCH)
        opt.zero_grad(set_to_none=True)
        total = accumulate_batch_loss(model, batch, pad)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(total)
        if log and (step + 1) % 40 == 0:
            log(f"tiny warm start: step {step + 1}/{steps} loss {sum(losses[-40:]) / 40:.3f}")
    model.eval()
    return losses


# --- build and cache ----------------------------------------------------------------------


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def _tokenizer_texts(train_rows: list[dict]) -> list[str]:
    from opsdkit.prompts import BOXED_INSTRUCTION, TRANSITION

    return ([r[k] for r in train_rows for k in ("problem", "solution", TRACE_COLUMN)]
            + [BOXED_INSTRUCTION, "Problem:", "Here is a reference solution to this problem:", TRANSITION])


def _write_data(dest: Path, count_tokens) -> list[dict]:
    """train.jsonl (with each trace's token count) and bench.jsonl; returns the training rows."""
    train_rows = make_rows(N_TRAIN, seed=1)
    for r in train_rows:
        r["num_tokens"] = count_tokens(r[TRACE_COLUMN])
    _write_jsonl(dest / "train.jsonl", train_rows)
    _write_jsonl(dest / "bench.jsonl", make_benchmark())
    return train_rows


def shipped_info(shipped: Path = SHIPPED) -> dict | None:
    """How the shipped model was made, or None when the package holds none of this version."""
    try:
        info = json.loads((shipped / SHIPPED_INFO).read_text())
    except (OSError, ValueError):
        return None
    return info if info.get("version") == TINY_VERSION and (shipped / "model.safetensors").is_file() else None


def build_tiny_assets(dest: Path, *, log=print, use_shipped: bool = True) -> None:
    """The assets in `dest`: the shipped model and tokenizer with the data generated beside them,
    or (none shipped, or use_shipped False) a tokenizer trained and a model warm-started here."""
    t0 = time.time()
    dest.mkdir(parents=True, exist_ok=True)
    made = shipped_info() if use_shipped else None
    if made is not None:
        from tokenizers import Tokenizer

        shutil.copytree(SHIPPED, dest / "model", ignore=shutil.ignore_patterns(SHIPPED_INFO, "__pycache__"))
        tok = Tokenizer.from_file(str(dest / "model" / "tokenizer.json"))
        _write_data(dest, lambda text: len(tok.encode(text, add_special_tokens=False).ids))
        info = {**made, "source": f"shipped ({SHIPPED})"}
    else:
        info = _train_here(dest, log)
    info["seconds"] = round(time.time() - t0, 1)
    (dest / "info.json").write_text(json.dumps(info, indent=1))
    if log:
        log(f"tiny assets made in {info['seconds']} s ({info['parameters']} parameters, {info['source']})")


def _train_here(dest: Path, log) -> dict:
    """Train the tokenizer and warm-start the model into dest/model; what info.json says of it."""
    import torch
    import transformers
    from transformers import Qwen3ForCausalLM

    t0 = time.time()
    rows = make_rows(N_TRAIN, seed=1)
    tokenizer = train_tokenizer(_tokenizer_texts(rows))
    train_rows = _write_data(dest, lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"]))
    torch.manual_seed(0)
    with torch.random.fork_rng():
        model = Qwen3ForCausalLM(tiny_config(tokenizer))
        losses = warm_start(model, tokenizer, train_rows, log=log)
    model.save_pretrained(dest / "model")
    tokenizer.save_pretrained(dest / "model")
    return {"version": TINY_VERSION, "parameters": sum(p.numel() for p in model.parameters()),
            "warm_start_steps": len(losses), "warm_start_final_loss": sum(losses[-20:]) / 20,
            "warm_start_seconds": round(time.time() - t0, 1), "warm_start_threads": WARM_START_THREADS,
            "torch": torch.__version__, "transformers": transformers.__version__, "source": "trained here"}


def remove_stale_builds(root: Path, log=print) -> list[Path]:
    """Remove the `.tiny-v*-*` directories killed builds left in the cache. A build writes one only
    while it holds its version's lock, so one whose lock can be taken at once is nobody's; one whose
    lock is held is being written now and is kept. Returns what was removed."""
    from filelock import FileLock, Timeout

    removed = []
    for partial in sorted(root.glob(".tiny-v*-*")):
        version = partial.name[len(".tiny-v"):].split("-", 1)[0]
        if not partial.is_dir() or not version.isdigit():
            continue
        try:
            with FileLock(str(root / f"tiny-v{version}.lock"), timeout=0):
                shutil.rmtree(partial, ignore_errors=True)
        except Timeout:
            continue  # another process is building that version right now
        removed.append(partial)
        if log:
            log(f"tiny assets: removed {partial.name}, a build that did not finish")
    return removed


def ensure_tiny_assets(cache_dir: Path | None = None, *, log=print) -> TinyAssets:
    """Return the cached tiny assets, building them once (safe across concurrent processes)."""
    from filelock import FileLock

    root = Path(cache_dir) if cache_dir else cache_root()
    final = root / f"tiny-v{TINY_VERSION}"
    assets = TinyAssets(final, final / "model", final / "train.jsonl", final / "bench.jsonl")
    if (final / "info.json").exists():
        return assets
    root.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(root, log)  # before taking our own lock: our version's partials go too
    with FileLock(str(root / f"tiny-v{TINY_VERSION}.lock")):
        if (final / "info.json").exists():
            return assets
        tmp = Path(tempfile.mkdtemp(prefix=f".tiny-v{TINY_VERSION}-", dir=root))
        try:
            build_tiny_assets(tmp, log=log)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return assets


def ship(log=print) -> Path:
    """Warm-start the model here and put it, with its tokenizer, in the package (SHIPPED): what a
    change to the model, its data or TINY_VERSION needs, committed with that change."""
    with tempfile.TemporaryDirectory() as tmp:
        build_tiny_assets(Path(tmp), log=log, use_shipped=False)
        info = json.loads((Path(tmp) / "info.json").read_text())
        info.pop("source")
        shutil.rmtree(SHIPPED, ignore_errors=True)
        shutil.copytree(Path(tmp) / "model", SHIPPED)
        (SHIPPED / SHIPPED_INFO).write_text(json.dumps(info, indent=1) + "\n")
    return SHIPPED


def build_untrained_tiny(dest: Path, *, seed: int = 0) -> Path:
    """A tiny model of the same shape and tokenizer with random weights and no warm start
    (seconds to build): for unit tests that need a real model, not a skilled one."""
    import torch
    from transformers import Qwen3ForCausalLM

    dest = Path(dest)
    rows = make_rows(400, seed=1)
    tokenizer = train_tokenizer([r[k] for r in rows for k in ("problem", "solution", TRACE_COLUMN)])
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(tiny_config(tokenizer))
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


if __name__ == "__main__":  # python -m opsdkit.tiny [--ship]: build (once) and say where
    import sys

    say = lambda line: print(line, flush=True)  # noqa: E731
    if sys.argv[1:] == ["--ship"]:
        print(f"shipped: {ship(log=say)}", flush=True)
        sys.exit(0)
    a = ensure_tiny_assets(log=say)
    info = json.loads((a.root / "info.json").read_text())
    print(f"tiny assets ready: {info['parameters']:,}-parameter Qwen3 model at {a.model_dir}", flush=True)
