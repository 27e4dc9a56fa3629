"""The stage contract (design.md): render a command template, build its environment, start it.

A stage is a command line run by /bin/sh in its own session (so its whole process tree is one
process group opsdctl can stop), with cwd = the chain's code snapshot, stdout+stderr appended to
`<runs_dir>/<chain_id>/<stage>.log`, and an environment that carries the recipe's knobs.
Each placeholder is substituted shell-quoted; `{{` and `}}` are literal braces, and a `$` before
`{` (shell `${VAR}`) is left to the shell.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Mapping

from opsdctl import knobs
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
)
# The train stage has no checkpoint yet; its `checkpoint` template may use the rest.
STAGE_PLACEHOLDERS = {
    "train": tuple(p for p in PLACEHOLDERS if p != "checkpoint"),
    "eval": PLACEHOLDERS,
}

_TOKEN = re.compile(r"\{\{|\}\}|\$\{[^}]*\}|\{([^{}]*)\}|[{}]")

ENV_CHAIN_ID = "OPSDCTL_CHAIN_ID"
ENV_STAGE_DIR = "OPSDCTL_STAGE_DIR"
ENV_STAGE_TOKEN = "OPSDCTL_STAGE_TOKEN"


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


def stage_env(
    *,
    hparams: dict,
    method: dict,
    chain_id: int,
    stage: str,
    stage_dir: Path,
    run_dir: Path,
    token: str,
    gpus: tuple[int, ...],
    code_dir: Path,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update(knobs.knob_env(hparams, method))
    env[ENV_CHAIN_ID] = str(chain_id)
    env[ENV_STAGE_DIR] = str(stage_dir)
    env[ENV_STAGE_TOKEN] = token
    env["OPSDCTL_STAGE"] = stage
    env["OPSDCTL_RUN_DIR"] = str(run_dir)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(code_dir) + (os.pathsep + old if old else "")
    env.setdefault("PYTHONUNBUFFERED", "1")  # progress lines reach the log as they happen
    return env


def spawn(command: str, cwd: Path, env: Mapping[str, str], log_path: Path) -> subprocess.Popen:
    """Start `command` under /bin/sh in a new session, output appended to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab", buffering=0) as log:
        return subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=str(cwd),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


def python_executable() -> str:
    return sys.executable
