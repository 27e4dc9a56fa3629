"""Stage command templates: the placeholders each stage knows, and their grammar.

Config checks a template when it loads (unknown placeholders, stray braces); the worker renders
it when a stage starts (opsdctl.daemon.stages). Each placeholder is substituted shell-quoted; `{{`
and `}}` are literal braces, and a `$` before `{` (shell `${VAR}`) is left to the shell. A
placeholder inside the template's own quotes, a here-document or an `eval` is refused
(check_quoting): there the shell would read opsdctl's quoting away and a value could run as code.
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
    "grad_accum",
)
# Known only to the eval stage: the train stage's result, and the evaluation asked for
# (problems x samples: the full protocol, or a chain's `--partial`).
EVAL_ONLY = ("checkpoint", "num_problems", "k")
# Known only to the train stage: the accumulation steps that keep the profile's global batch on
# the chain's GPUs, for training scripts whose process count is a flag (`grad_accum`).
TRAIN_ONLY = ("grad_accum",)
# The train stage has no checkpoint yet; its `checkpoint` template may use the rest.
STAGE_PLACEHOLDERS = {
    "train": tuple(p for p in PLACEHOLDERS if p not in EVAL_ONLY),
    "eval": tuple(p for p in PLACEHOLDERS if p not in TRAIN_ONLY),
}

# A [notify] command's placeholders: what happened, to which chain, in one line and as JSON.
NOTIFY_PLACEHOLDERS = ("event", "event_id", "chain_id", "variant", "state", "message", "json")

_TOKEN = re.compile(r"\{\{|\}\}|\$\{[^}]*\}|\{([^{}]*)\}|[{}]")

def check_template(template: str, allowed: tuple[str, ...], where: str, shell: bool = True) -> None:
    """Refuse unknown placeholders and stray braces in one line, at config load time; in a shell
    command (`shell`), also a placeholder the shell would not read as a plain word (quoting)."""
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
        if name in TRAIN_ONLY and name not in allowed:
            raise UserError(f"{where}: {{{name}}} is only known in the train stage (the accumulation steps of "
                            "the chain's training processes)")
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


    if shell:
        check_quoting(template, where)


def uses(template: str, name: str) -> bool:
    """Whether the template has the placeholder `name` (not a literal `{{name}}`)."""
    return any(m.group(1) == name for m in _TOKEN.finditer(template))


def grad_accum(global_batch: int, per_device: int, num_gpus: int) -> int:
    """`{grad_accum}`: the accumulation steps that keep `global_batch` rows a step on `num_gpus`
    processes of `per_device` rows each (the official 32 = 4 x 4 x 2: 8 on one GPU, 4 on two)."""
    rows = per_device * num_gpus
    if num_gpus < 1 or global_batch % rows:
        fits = [n for n in range(1, global_batch // per_device + 1) if global_batch % (per_device * n) == 0]
        raise UserError(f"{{grad_accum}}: the global batch of {global_batch} rows does not split over {num_gpus} "
                        f"GPU(s) of {per_device} rows each; give a chain one of {', '.join(map(str, fits))} GPUs "
                        f"(gpus_per_chain), or leave {{grad_accum}} out of the train command")
    return global_batch // rows


_QUOTES = {"'": "'...' quotes", '"': '"..." quotes', "heredoc": "a here-document", "eval": "an eval command"}


def check_quoting(template: str, where: str) -> None:
    """Refuse a placeholder inside '...' or "..." quotes or a here-document, in one line.

    Each value is substituted shell-quoted, which is only right where the shell reads a plain
    word: inside the user's own quotes opsdctl's quotes would end theirs, and a name or a
    directory such as `q$(touch PWNED)` would run as shell code. Command substitutions and
    backquotes start a new command, where quoting works again, so they are allowed."""
    spans = {m.start(): m for m in _TOKEN.finditer(template)}
    stack: list[str] = []  # open contexts: "'", '"', "`", "$(" (empty: the top level)
    heredocs: list[str] = []  # delimiters whose bodies start at the next newline
    evaluated = False  # in the arguments of an `eval`
    i, n = 0, len(template)
    while i < n:
        ctx = stack[-1] if stack else ""
        if ctx == "heredoc":  # a whole body line at a time
            end = template.find("\n", i)
            end = n if end < 0 else end
            if template[i:end].lstrip("\t") == heredocs[0]:
                heredocs.pop(0)
                stack.pop()
                if heredocs:
                    stack.append("heredoc")
            else:
                inside = [spans[k] for k in range(i, end) if k in spans and spans[k].group(1) is not None]
                if inside:
                    _refuse_quoted(inside[0], ctx, where)
            i = end + 1
            continue
        m = spans.get(i)
        if m is not None:
            if m.group(1) is not None and (ctx in _QUOTES or evaluated):
                _refuse_quoted(m, ctx if ctx in _QUOTES else "eval", where)
            i = m.end()
            continue
        c = template[i]
        if ctx == "'":
            if c == "'":
                stack.pop()
        elif c == "\\":
            i += 1  # the next character is literal
        elif ctx in ('"', "`") and c == ctx:
            stack.pop()
        elif template.startswith("$(", i):
            stack.append("$(")
            i += 1
        elif c == "`":
            stack.append(c)
        elif ctx == '"':
            pass  # nothing else opens or closes inside double quotes
        elif ctx == "$(" and c == ")":
            stack.pop()
        elif c in "'\"":
            stack.append(c)
        elif c in ";&|\n" and evaluated:
            evaluated = False
        elif ctx in ("", "$(") and re.match(r"eval[ \t]", template[i:]) and template[:i].rstrip(" \t")[-1:] in "\n;&|(":
            evaluated = True  # eval re-reads its arguments as shell code: opsdctl's quotes are gone by then
        elif c == "#" and (i == 0 or template[i - 1] in " \t\n;&|("):
            end = template.find("\n", i)  # a comment: nothing in it runs
            i = (n if end < 0 else end) - 1
        elif template.startswith("<<", i) and not template.startswith("<<<", i):
            word = re.match(r"<<-?[ \t]*(['\"]?)([^\s'\"<>;&|()]+)\1", template[i:])
            if word:
                heredocs.append(word.group(2))
                i += word.end() - 1
        elif c == "\n" and heredocs:
            stack.append("heredoc")
        i += 1


def _refuse_quoted(m: re.Match, ctx: str, where: str) -> None:
    raise UserError(
        f"{where}: {m.group(0)} at column {m.start() + 1} sits inside {_QUOTES[ctx]}; opsdctl quotes every value "
        f"itself, so a placeholder must be a bare word of its own (there, a value could run as shell code)")


def placeholders_in(template: str) -> set[str]:
    """The placeholder names a template uses."""
    return {m.group(1) for m in _TOKEN.finditer(template) if m.group(1)}


GPU_COUNT_PLACEHOLDERS = ("gpus", "num_gpus")  # a command with one of these follows the GPUs it is given


def takes_gpu_count(template: str) -> bool:
    """Does a stage command follow the GPUs it is granted ({gpus} or {num_gpus}), so that it may
    run on a wider slot than its layout's?"""
    return bool(placeholders_in(template) & set(GPU_COUNT_PLACEHOLDERS))


def render(template: str, values: Mapping[str, object], quote: bool = True) -> str:
    """Substitute placeholders; values are shell-quoted unless `quote` is False (paths).
    A shell template is checked for quoted placeholders again here: a chain's command was
    frozen when it was queued, possibly by an older opsdctl that did not check."""
    if quote:
        check_quoting(template, "stage command")

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
