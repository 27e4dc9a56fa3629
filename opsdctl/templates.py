"""Stage command templates: the placeholders each stage knows, and their grammar.

Config checks a template when it loads (unknown placeholders, stray braces); the worker renders
it when a stage starts (opsdctl.run.stages). Each placeholder is substituted shell-quoted; `{{`
and `}}` are literal braces, and a `$` before `{` (shell `${VAR}`) is left to the shell.
"""

from __future__ import annotations

import re
import shlex
from typing import Mapping

from opsdctl.errors import UserError

STAGES = ("train", "eval")

PLACEHOLDERS = (
    "chain_id",
    "variant",
    "seed",
    "run_dir",
    "stage_dir",
    "code_dir",
    "recipe_env",
    "recipe_json",
    "checkpoint",
    "gpus",
    "num_gpus",
    "python",
    "profile",
    "num_problems",
    "k",
)
# Known only to the eval stage: the train stage's result, and the evaluation asked for
# (problems x samples: the full protocol, or a chain's `--partial`).
EVAL_ONLY = ("checkpoint", "num_problems", "k")
# The train stage has no checkpoint yet; its `checkpoint` template may use the rest.
STAGE_PLACEHOLDERS = {
    "train": tuple(p for p in PLACEHOLDERS if p not in EVAL_ONLY),
    "eval": PLACEHOLDERS,
}

# A [notify] command's placeholders: what happened, to which chain, in one line and as JSON.
NOTIFY_PLACEHOLDERS = ("event", "event_id", "chain_id", "variant", "state", "message", "json")

_TOKEN = re.compile(r"\{\{|\}\}|\$\{[^}]*\}|\{([^{}]*)\}|[{}]")

def check_template(template: str, allowed: tuple[str, ...], where: str) -> None:
    """Refuse unknown placeholders and stray braces in one line, at config load time."""
    for m in _TOKEN.finditer(template):
        text = m.group(0)
        if text in ("{{", "}}") or text.startswith("${"):
            continue
        name = m.group(1)
        if name is None:
            raise UserError(
                f"{where}: stray {text!r} at column {m.start() + 1}; write {{{{ or }}}} for a literal brace"
            )
        if name == "checkpoint" and name not in allowed:
            raise UserError(f"{where}: {{checkpoint}} is only known in the eval stage (it is the train stage's result)")
        if name in EVAL_ONLY and name not in allowed:
            raise UserError(f"{where}: {{{name}}} is only known in the eval stage (the evaluation's problems x samples)")
        if not name.isidentifier():
            raise UserError(
                f"{where}: {text!r} at column {m.start() + 1} is not a placeholder; "
                "write {{ and }} for literal braces"
            )
        if name not in allowed:
            import difflib

            close = difflib.get_close_matches(name, allowed, n=1)
            hint = f" (did you mean {{{close[0]}}}?)" if close else ""
            raise UserError(
                f"{where}: unknown placeholder {{{name}}}{hint}; known: "
                + ", ".join("{" + p + "}" for p in allowed)
                + "; write {{ and }} for literal braces"
            )


def render(template: str, values: Mapping[str, object], quote: bool = True) -> str:
    """Substitute placeholders; values are shell-quoted unless `quote` is False (paths)."""

    def sub(m: re.Match) -> str:
        text = m.group(0)
        if text == "{{":
            return "{"
        if text == "}}":
            return "}"
        if text.startswith("${"):
            return text
        name = m.group(1)
        if name is None or name not in values:
            raise KeyError(f"placeholder {text} has no value here")
        value = str(values[name])
        return shlex.quote(value) if quote else value

    return _TOKEN.sub(sub, template)
