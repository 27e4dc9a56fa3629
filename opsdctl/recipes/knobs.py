"""The knobs a recipe may set, their types and ranges: the one source of truth.

Three kinds of knob:
- hyper-parameters (HPARAMS): the whitelist the official re-training honours from `recipe.env`;
- method knobs (METHOD_KNOBS): code-level choices that only count as our trainer's defaults;
- budget knobs (BUDGET_KNOBS): fixed by the benchmark, never settable from a recipe.

opsdctl validates recipes with this module and the trainer validates its inputs with it again,
so a hand-written recipe.env with a typo is refused the same way in both places.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from opsdctl.errors import UserError

LR_SCHEDULERS = (
    "constant",
    "constant_with_warmup",
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "inverse_sqrt",
)


@dataclass(frozen=True)
class Knob:
    name: str
    kind: type  # bool, int, float or str
    default: Any
    lo: float | None = None  # inclusive unless lo_open
    hi: float | None = None  # inclusive unless hi_open
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple[str, ...] | None = None
    help: str = ""
    # Set for a key the official re-training reads but never uses: only its released value (the
    # default) is accepted, because a dev run with any other value would predict nothing.
    inert: str | None = None

    def rule(self) -> str:
        """The allowed values, in words, for error messages and docs."""
        if self.kind is bool:
            return "true or false"
        if self.choices:
            return "one of " + ", ".join(self.choices)
        parts = []
        if self.lo is not None:
            parts.append(f"{'>' if self.lo_open else '>='} {_fmt_number(self.lo)}")
        if self.hi is not None:
            parts.append(f"{'<' if self.hi_open else '<='} {_fmt_number(self.hi)}")
        kind = {int: "an integer", float: "a number", str: "a string"}[self.kind]
        return kind + (" " + " and ".join(parts) if parts else "")

    def check(self, value: Any, where: str) -> Any:
        """Return the value normalised to the knob's type, or raise a one-line UserError."""
        bad = f"{where}: {self.name} = {value!r}: must be {self.rule()}"
        if self.kind is bool:
            if not isinstance(value, bool):
                raise UserError(f"{bad}; write {self.name} = true or false")
            return value
        if self.kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise UserError(f"{bad}; write a whole number such as {self.default}")
            if abs(value) > INT_LIMIT:  # a knob without its own upper bound still has this one
                raise UserError(f"{where}: {self.name} = {_short(value)}: must be {self.rule()} and at most {INT_LIMIT}")
        elif self.kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UserError(f"{bad}; write a number such as {_fmt_number(self.default)}")
            try:
                value = float(value)
            except OverflowError:  # an integer no float holds
                raise UserError(f"{where}: {self.name} = {_short(value)}: must be {self.rule()}") from None
            if not math.isfinite(value):
                raise UserError(f"{bad}; write a finite number")
        elif self.kind is str:
            if not isinstance(value, str):
                raise UserError(f"{bad}; write a quoted string")
            if self.choices and value not in self.choices:
                raise UserError(f"{bad}; pick one of the listed values")
            return value
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            raise UserError(f"{bad}; raise it into range")
        if self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi):
            raise UserError(f"{bad}; lower it into range")
        if self.inert and value != self.default:
            raise UserError(f"{where}: {self.name} = {value!r}: the official re-training ignores it ({self.inert}), "
                            f"so a dev run with it predicts nothing; remove the key (it trains as "
                            f"{self.name} = {_fmt_number(self.default)})")
        return value


INT_LIMIT = 2**31 - 1


def _short(value: int) -> str:
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}... ({len(text)} digits)"


def _fmt_number(x: float) -> str:
    return repr(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


def _k(name, kind, default, **kw) -> tuple[str, Knob]:
    return name, Knob(name=name, kind=kind, default=default, **kw)


# The whitelist the official re-training honours, in the order recipe.env files are written. Defaults are the
# released Qwen3-1.7B recipe (the baseline), so an unset key means "as released".
HPARAMS: dict[str, Knob] = dict(
    [
        _k("learning_rate", float, 5e-6, lo=0.0, lo_open=True, hi=1.0, hi_open=True, help="AdamW peak learning rate"),
        _k("lr_scheduler_type", str, "constant", choices=LR_SCHEDULERS, help="learning-rate schedule"),
        _k("warmup_ratio", float, 0.0, lo=0.0, hi=1.0, help="fraction of steps spent warming up"),
        _k("weight_decay", float, 0.0, lo=0.0, hi=1.0, help="AdamW weight decay"),
        _k("max_grad_norm", float, 0.1, lo=0.0, help="gradient clipping norm (0 = off)"),
        _k("lora_r", int, 64, lo=1, hi=256, help="LoRA rank"),
        _k("lora_alpha", int, 128, lo=1, hi=4096, help="LoRA scaling numerator"),
        _k("lora_dropout", float, 0.0, lo=0.0, hi=1.0, hi_open=True, help="LoRA dropout (inert: dropout is disabled)",
           inert="opsd_trainer.py disables dropout in the student (TRL disable_dropout)"),
        _k("beta", float, 0.0, lo=0.0, hi=1.0, help="generalized JSD mix: 0 = KL(teacher||student), 1 = reverse"),
        _k("jsd_token_clip", float, 0.05, lo=0.0, help="per-token divergence clip tau (0 = off)"),
        _k("top_k_loss", int, 0, lo=0, help="restrict the divergence to the teacher's top-k tokens (0 = full vocabulary)"),
        _k("temperature", float, 1.1, lo=0.0, lo_open=True, hi=10.0, help="rollout and loss temperature"),
        _k("top_p", float, 0.95, lo=0.0, lo_open=True, hi=1.0, help="rollout nucleus sampling"),
        _k("top_k", int, 20, lo=-1, help="rollout top-k (0 or -1 = off)"),
        _k("lmbda", float, 1.0, lo=0.0, hi=1.0, help="on-policy fraction (inert: every step is on-policy)",
           inert="opsd_trainer.py training_step hard-codes on_policy = True"),
        _k("max_completion_length", int, 1024, lo=1, hi=4096, help="rollout length cap in tokens"),
        _k("ema_decay", float, 0.999, lo=0.0, hi=1.0, hi_open=True, help="EMA teacher decay"),
        _k("fixed_teacher", bool, True, help="teacher = base model with the adapter disabled"),
        _k("use_ema_teacher", bool, False, help="teacher = exponential moving average of the student"),
        _k("use_tinker_loss", bool, False, help="sampled-token objective with advantage log pT - log pS"),
        _k("reason_first", bool, False, help="the teacher first writes an analysis of the reference, then teaches"),
        _k("teacher_thinking", bool, False, help="Qwen3 thinking mode in the teacher prompt"),
        _k("student_thinking", bool, False, help="Qwen3 thinking mode in the student prompt"),
    ]
)

# Code-level method knobs: they reach our trainer as defaults (OPSD_<KNOB> env or a
# method-defaults TOML), never through recipe.env.
METHOD_KNOBS: dict[str, Knob] = dict(
    [
        _k("clip_mode", str, "entry", choices=("entry", "token"),
           help="entry: clamp each vocabulary term at tau (released); token: scale each position to total <= tau"),
        _k("data_select", str, "none", choices=("none", "hard", "nomath"),
           help="training rows: all; drop the `math` source and keep the longer half of traces; drop `math` only"),
        _k("teacher_context", str, "solution", choices=("solution", "trace", "both"),
           help="privileged context in the teacher prompt: the solution (released), the COT_Reason trace, or both"),
        _k("student_prompt", str, "released", choices=("released", "boxed", "plain"),
           help="released: 'Problem: {problem}' + the boxed instruction; boxed: the problem, a newline, the "
                "instruction; plain: the problem alone"),
        _k("teacher_prompt", str, "released", choices=("released", "own-words"),
           help="released: the reference, the released transition sentence, the instruction; own-words: "
                "the reference, then 'Now solve the problem yourself, in your own words.'"),
        _k("pad_side", str, "right", choices=("right", "left"),
           help="right: prompts right-padded, the completion after the pads, positions counted over pads "
                "(released); left: prompt and completion contiguous, positions from the mask"),
        _k("loss_weighting", str, "micro_batch", choices=("micro_batch", "token"),
           help="micro_batch: each micro-batch's mean over its own tokens, every micro-batch weighs the same "
                "(released); token: every completion token of the step weighs the same"),
    ]
)

# Fixed by the benchmark: a recipe that sets one is refused.
BUDGET_KNOBS = frozenset(
    {
        "max_steps",
        "num_train_epochs",
        "per_device_train_batch_size",
        "per_device_eval_batch_size",
        "gradient_accumulation_steps",
        "num_processes",
        "model_name_or_path",
        "model",
        "dataset",
        "dataset_name",
        "train_dataset",
        "seed",
        "save_steps",
    }
)


def default_hparams() -> dict[str, Any]:
    return {name: knob.default for name, knob in HPARAMS.items()}


def default_method() -> dict[str, Any]:
    return {name: knob.default for name, knob in METHOD_KNOBS.items()}


def refuse_budget_knob(key: str, where: str) -> None:
    if key in BUDGET_KNOBS:
        raise UserError(
            f"{where}: {key}: is a budget knob fixed by the benchmark, not a recipe choice; "
            "remove it (the profile in opsdctl.toml sets it)"
        )


def check_hparams(values: dict[str, Any], where: str) -> dict[str, Any]:
    """Validate a partial [hparams] table; return it normalised, in whitelist order."""
    out = {}
    for key, value in values.items():
        refuse_budget_knob(key, where)
        if key not in HPARAMS:
            hint = _closest(key, HPARAMS)
            raise UserError(
                f"{where}: {key}: is not a whitelisted hyper-parameter (the official re-training "
                f"ignores it){hint}; code-level knobs go under [method]"
            )
        out[key] = HPARAMS[key].check(value, where)
    return {k: out[k] for k in HPARAMS if k in out}


def check_method(values: dict[str, Any], where: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """Validate a [method] table. `extra` names knobs a user's own train script reads."""
    out = {}
    for key, value in values.items():
        refuse_budget_knob(key, where)
        if key in HPARAMS:
            raise UserError(f"{where}: {key}: is a hyper-parameter; move it to [hparams]")
        if key in METHOD_KNOBS:
            out[key] = METHOD_KNOBS[key].check(value, where)
        elif key in extra:
            if isinstance(value, (dict, list)) or value is None or not isinstance(value, (str, int, float, bool)):
                raise UserError(f"{where}: {key}: method knobs must be scalars (string, number, true/false)")
            if isinstance(value, float) and not math.isfinite(value):
                raise UserError(f"{where}: {key} = {value!r}: must be a finite number")
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT_LIMIT:
                raise UserError(f"{where}: {key} = {_short(value)}: integers are at most {INT_LIMIT}")
            out[key] = value
        else:
            raise UserError(
                f"{where}: {key}: unknown method knob{_closest(key, METHOD_KNOBS)}; known: "
                f"{', '.join(METHOD_KNOBS)}; a knob your own train script reads goes in "
                "opsdctl.toml `extra_method_knobs`"
            )
    return out


def check_invariants(hparams: dict[str, Any], where: str, method: dict[str, Any] | None = None) -> None:
    """Rules that involve several keys of a fully resolved recipe."""
    if hparams.get("use_ema_teacher") and hparams.get("fixed_teacher"):
        raise UserError(
            f"{where}: use_ema_teacher = true and fixed_teacher = true: pick one teacher; "
            "set fixed_teacher = false to use the EMA teacher"
        )
    if method and hparams.get("reason_first") and method.get("teacher_prompt", "released") != "released":
        raise UserError(
            f"{where}: reason_first = true with teacher_prompt = {method['teacher_prompt']!r}: reason_first has "
            "only the released layout; set teacher_prompt = \"released\" or reason_first = false"
        )


def _closest(key: str, names) -> str:
    import difflib

    match = difflib.get_close_matches(key, list(names), n=1)
    return f" (did you mean {match[0]}?)" if match else ""


# --- recipe.env ---------------------------------------------------------------------------


def format_value(value: Any) -> str:
    """How a knob value is written in recipe.env and OPSD_<KNOB> variables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def format_recipe_env(hparams: dict[str, Any], header: list[str] = ()) -> str:
    lines = [f"# {h}" for h in header]
    lines += [f"{k}={format_value(hparams[k])}" for k in HPARAMS if k in hparams]
    return "\n".join(lines) + "\n"


def parse_value(knob: Knob, text: str, where: str) -> Any:
    raw = text.strip().strip('"').strip("'")
    if knob.kind is bool:
        low = raw.lower()
        if low not in ("true", "false"):
            raise UserError(f"{where}: {knob.name} = {raw!r}: must be true or false")
        return low == "true"
    if knob.kind is int:
        try:
            return knob.check(int(raw), where)
        except ValueError:
            raise UserError(f"{where}: {knob.name} = {raw!r}: must be {knob.rule()}") from None
    if knob.kind is float:
        try:
            return knob.check(float(raw), where)
        except ValueError:
            raise UserError(f"{where}: {knob.name} = {raw!r}: must be {knob.rule()}") from None
    return knob.check(raw, where)


def parse_recipe_env(text: str, where: str) -> dict[str, Any]:
    """Parse `KEY=VALUE` lines strictly: unknown keys, bad values and duplicates are refused."""
    out: dict[str, Any] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        loc = f"{where}:{lineno}"
        if "=" not in line:
            raise UserError(f"{loc}: {line!r}: expected KEY=VALUE")
        key, _, value = line.partition("=")
        key = key.strip()
        if key.startswith("export "):
            key = key[len("export "):].strip()
        refuse_budget_knob(key, loc)
        if key not in HPARAMS:
            raise UserError(
                f"{loc}: {key}: is not a whitelisted hyper-parameter{_closest(key, HPARAMS)}; "
                "the official re-training would ignore it"
            )
        if key in out:
            raise UserError(f"{loc}: {key}: is set twice; keep one line")
        out[key] = parse_value(HPARAMS[key], value, loc)
    return {k: out[k] for k in HPARAMS if k in out}


def knob_env(hparams: dict[str, Any], method: dict[str, Any]) -> dict[str, str]:
    """The OPSD_<KNOB> environment of the stage contract."""
    env = {f"OPSD_{k.upper()}": format_value(v) for k, v in hparams.items()}
    env.update({f"OPSD_{k.upper()}": format_value(v) for k, v in method.items()})
    return env
