"""Command line -> one validated TrainConfig, before anything heavy is imported or loaded.

Knobs are validated by opsdctl.recipes.knobs (the single source of truth), again here, so a recipe
written by hand is refused exactly as opsdctl would refuse it: one line on stderr, exit 2.

Hyper-parameters: --recipe JSON (opsdctl's resolved recipe) or --recipe-env (the official
KEY=VALUE file); keys a recipe.env leaves out take the released defaults.
Method knobs, per key, first found wins: --recipe JSON [method] > --method-defaults TOML
[method] > trainer/method_defaults.toml (if present: the code's defaults for an official
re-run) > opsdctl.recipes.knobs.METHOD_KNOBS defaults. OPSD_* environment variables are deliberately not
read: the official re-training does not set them.
Budget knobs come from the profile (--model, --dataset, --max-steps ... override it for tests
and benchmarks), never from a recipe.

`--print-prompts --row N [--json]` trains nothing: it prints row N (0-based, of the profile's or
--dataset's file) as the student and the teacher see it, their user messages and their texts
after the chat template, for the given recipe (or the released one). With reason_first the
teacher text shows where the model's sampled analysis goes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from opsdctl.errors import EXIT_USER_ERROR, UserError
from opsdctl.recipes import knobs
from opsdctl.recipes.profiles import PROFILES, get_profile, with_overrides
from trainer.config import TrainConfig  # noqa: F401  (built here; tests and tools import it from the CLI)

CODE_METHOD_DEFAULTS = Path(__file__).with_name("method_defaults.toml")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's default prints the whole usage)
        raise UserError(f"python -m trainer: {message}; see python -m trainer --help")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m trainer", description="On-Policy Self-Distillation trainer (LoRA).")
    p.add_argument("--profile", required=True, help=f"fixed setting: {', '.join(PROFILES)}")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--recipe", type=Path, help="resolved recipe JSON written by opsdctl")
    src.add_argument("--recipe-env", type=Path, help="official recipe.env (whitelisted KEY=VALUE lines)")
    p.add_argument("--method-defaults", type=Path, help="[method] TOML (opsdctl export-recipe --method-defaults)")
    p.add_argument("--seed", type=int)
    p.add_argument("--output-dir", type=Path)
    g = p.add_argument_group("inspecting prompts (trains nothing)")
    g.add_argument("--print-prompts", action="store_true",
                   help="print one training row's student and teacher prompts, after the chat template")
    g.add_argument("--row", type=int, default=0, help="with --print-prompts: the row, 0-based (default 0)")
    g.add_argument("--json", action="store_true",
                   help="with --print-prompts: one JSON object (student_user, teacher_user, student_text, teacher_text)")
    g = p.add_argument_group("profile overrides (tests, benchmarks)")
    g.add_argument("--model")
    g.add_argument("--dataset")
    g.add_argument("--max-steps", type=int)
    g.add_argument("--per-device-batch", type=int)
    g.add_argument("--grad-accum", type=int)
    g.add_argument("--save-steps", type=int)
    g.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--rollout-backend", choices=("auto", "hf", "vllm"), default="auto")
    p.add_argument("--loss-chunk-size", type=int, default=512, help="completion positions per loss chunk")
    for role in ("problem", "solution", "trace", "source", "length"):
        p.add_argument(f"--{role}-column", help=f"dataset column holding the {role}")
    return p


def read_json_recipe(path: Path) -> tuple[dict, dict, dict]:
    """(hparams, method, meta) of opsdctl's resolved recipe JSON."""
    where = str(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{where}: recipe file not found; pass the {{recipe_json}} file opsdctl wrote") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}:{exc.lineno}: not valid JSON ({exc.msg}); pass opsdctl's resolved recipe") from None
    if not isinstance(data, dict) or not isinstance(data.get("hparams"), dict):
        raise UserError(f"{where}: no \"hparams\" table; expected {{\"name\", \"hash\", \"hparams\": {{...}}, \"method\": {{...}}}}")
    method = data.get("method") or {}
    if not isinstance(method, dict):
        raise UserError(f"{where}: \"method\" must be a table of method knobs")
    hparams = knobs.check_hparams(data["hparams"], f"{where}: hparams")
    method = knobs.check_method(method, f"{where}: method")
    meta = {"name": data.get("name") or path.stem, "hash": data.get("hash")}
    return hparams, method, meta


def read_method_toml(path: Path) -> dict:
    import tomllib

    where = str(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{where}: method defaults file not found; write it with "
                        "opsdctl export-recipe --method-defaults PATH") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{where}: not valid TOML ({' '.join(str(exc).split())})") from None
    extra = [k for k in data if k != "method"]
    if extra:
        raise UserError(f"{where}: {extra[0]}: only a [method] table belongs in a method-defaults file; remove it")
    table = data.get("method", {})
    if not isinstance(table, dict):
        raise UserError(f"{where}: method must be a [method] table")
    return knobs.check_method(table, f"{where}: [method]")


def _positive(name: str, value, lo_open: float = 0.0, hi: float | None = None):
    if value is None:
        return
    if value <= lo_open or (hi is not None and value > hi):
        rule = f"> {lo_open:g}" + (f" and <= {hi:g}" if hi is not None else "")
        raise UserError(f"--{name} {value}: must be {rule}")


def resolve(argv: list[str] | None = None, args: argparse.Namespace | None = None) -> TrainConfig:
    args = args or parser().parse_args(argv)
    if not args.print_prompts:
        missing = [flag for flag, v in (("--recipe or --recipe-env", args.recipe or args.recipe_env),
                                        ("--seed", args.seed), ("--output-dir", args.output_dir)) if v is None]
        if missing:
            raise UserError(f"python -m trainer: {', '.join(missing)} required to train; "
                            "see python -m trainer --help")
    profile = get_profile(args.profile, "--profile")
    for name in ("max-steps", "per-device-batch", "grad-accum", "save-steps", "loss-chunk-size"):
        _positive(name, getattr(args, name.replace("-", "_")))
    _positive("gpu-memory-utilization", args.gpu_memory_utilization, 0.0, 1.0)
    profile = with_overrides(profile, model=args.model, dataset=args.dataset, max_steps=args.max_steps,
                             per_device_train_batch_size=args.per_device_batch,
                             gradient_accumulation_steps=args.grad_accum, save_steps=args.save_steps,
                             gpu_memory_utilization=args.gpu_memory_utilization)
    sources: dict[str, str] = {}
    notes: list[str] = []
    meta = {"name": None, "hash": None}
    if args.recipe is not None:
        given, json_method, meta = read_json_recipe(args.recipe)
        origin = str(args.recipe)
    elif args.recipe_env is None:  # --print-prompts without a recipe: the released one
        given, json_method, origin = {}, {}, "released recipe"
        meta["name"] = "released"
    else:
        where = str(args.recipe_env)
        try:
            text = args.recipe_env.read_text()
        except FileNotFoundError:
            raise UserError(f"{where}: recipe.env not found; write it with opsdctl export-recipe") from None
        given, json_method = knobs.parse_recipe_env(text, where), {}
        meta["name"] = args.recipe_env.stem
        origin = where
    hparams = knobs.default_hparams()
    hparams.update(given)
    for k in hparams:
        sources[k] = origin if k in given else "released default"
    missing = [k for k in knobs.HPARAMS if k not in given]
    if missing:
        notes.append(f"{origin}: {len(missing)} keys unset, released defaults used: {', '.join(missing)}")

    method = knobs.default_method()
    for k in method:
        sources[k] = "code default (opsdctl.recipes.knobs)"
    layers = []
    if CODE_METHOD_DEFAULTS.exists():
        layers.append((str(CODE_METHOD_DEFAULTS), read_method_toml(CODE_METHOD_DEFAULTS)))
    if args.method_defaults is not None:
        layers.append((str(args.method_defaults), read_method_toml(args.method_defaults)))
    layers.append((origin, json_method))
    for where, table in layers:  # lowest precedence first
        for k, v in table.items():
            method[k] = v
            sources[k] = where
    knobs.check_invariants(hparams, origin, method)

    cfg = TrainConfig(profile=profile, hparams=hparams, method=method, seed=args.seed if args.seed is not None else 0,
                      output_dir=args.output_dir or Path("."), recipe_name=meta["name"] or "unnamed",
                      recipe_hash=meta["hash"], sources=sources, rollout_backend=args.rollout_backend,
                      loss_chunk_size=args.loss_chunk_size,
                      keep_global_batch=args.per_device_batch is None and args.grad_accum is None,
                      columns={r: c for r, c in (("problem", args.problem_column),
                                                 ("solution", args.solution_column),
                                                 ("trace", args.trace_column), ("source", args.source_column),
                                                 ("num_tokens", args.length_column)) if c},
                      notes=notes)
    if cfg.max_completion_length != hparams["max_completion_length"]:
        notes.append(f"profile {profile.name}: max_completion_length {hparams['max_completion_length']} capped "
                     f"to {cfg.max_completion_length} (completion_length_cap)")
    if profile.learning_rate_scale != 1.0:
        notes.append(f"profile {profile.name}: learning_rate {hparams['learning_rate']!r} scaled by "
                     f"{profile.learning_rate_scale:g} (learning_rate_scale) -> {cfg.optimizer_hparams['learning_rate']!r}")
    if hparams["lr_scheduler_type"] == "constant" and hparams["warmup_ratio"] > 0:
        notes.append("lr_scheduler_type=constant ignores warmup_ratio (as transformers does); "
                     "use constant_with_warmup to warm up")
    return cfg


def prompts_of_row(cfg: TrainConfig, row: int) -> dict:
    """Row `row` of the training data as the student and the teacher see it (no model loaded)."""
    from opsdkit.modeling import load_tokenizer
    from trainer import data, prompting

    location = cfg.profile.dataset
    table = data.load_table(location)
    columns = data.find_columns(list(table.column_names), cfg.columns, where=f"dataset {location}")
    if not 0 <= row < len(table):
        raise UserError(f"--row {row}: dataset {location} has {len(table)} rows; pick one of 0..{len(table) - 1}")
    (r,) = data.to_rows(table.select([row]), columns)
    data.check_traces([r], columns, cfg.method["teacher_context"], f"dataset {location} row {row}")
    tok = load_tokenizer(cfg.profile.model)
    hp, method = cfg.hparams, cfg.method
    return {"row": row, "dataset": location, "recipe": cfg.recipe_name,
            "student_user": prompting.student_user(r, method),
            "teacher_user": prompting.teacher_user(r, hp, method),
            "student_text": prompting.student_prompt(tok, r, hp, method),
            "teacher_text": prompting.teacher_display(tok, r, hp, method),
            "reason_first": hp["reason_first"], "student_thinking": hp["student_thinking"],
            "teacher_thinking": hp["teacher_thinking"],
            "knobs": {k: method[k] for k in ("student_prompt", "teacher_prompt", "teacher_context")}}


def render_prompts(doc: dict) -> str:
    head = (f"row {doc['row']} of {doc['dataset']} (recipe {doc['recipe']}; student_thinking="
            f"{str(doc['student_thinking']).lower()} teacher_thinking={str(doc['teacher_thinking']).lower()} "
            + " ".join(f"{k}={v}" for k, v in doc["knobs"].items()) + ")")
    parts = [head]
    for key, title in (("student_user", "student user message"), ("student_text", "student text (chat template)"),
                       ("teacher_user", "teacher user message"), ("teacher_text", "teacher text (chat template)")):
        parts += [f"===== {title} =====", doc[key]]
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        cfg = resolve(args=args)
        if args.print_prompts:
            doc = prompts_of_row(cfg, args.row)
            sys.stdout.write(json.dumps(doc, ensure_ascii=False) + "\n" if args.json else render_prompts(doc))
            return 0
        from trainer.train import (
            run,  # heavy imports only after the inputs are known good
        )

        run(cfg)
    except UserError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # a finished worker of several: every process passed the trainer's last barrier, destroyed its
        # process group and closed its files. The interpreter's own teardown can still run gloo's C++
        # destructors in an order that aborts the finished run ("terminate called without an active
        # exception", about one full test suite in three), so the worker leaves without it
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
