"""The stage contract (DEVELOPERS.md): render a command template, build its environment, start it.

A stage is a command line run by /bin/sh in its own session (so its whole process tree is one
process group opsdctl can stop), with cwd = the chain's code snapshot, stdout+stderr appended to
`<runs_dir>/<chain_id>/<stage>.log`, and an environment that carries the recipe's knobs.
Each placeholder is substituted shell-quoted; `{{` and `}}` are literal braces, and a `$` before
`{` (shell `${VAR}`) is left to the shell.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping

from opsdctl.contract import eval_request
from opsdctl.recipes import knobs
from opsdctl.recipes.profiles import get_profile
from opsdctl.store import credentials
from opsdctl.templates import (  # noqa: F401
    PLACEHOLDERS,
    STAGE_PLACEHOLDERS,
    STAGES,
    check_template,
    grad_accum,
    render,
    uses,
)

ENV_CHAIN_ID = "OPSDCTL_CHAIN_ID"
ENV_STAGE_DIR = "OPSDCTL_STAGE_DIR"
ENV_STAGE_TOKEN = "OPSDCTL_STAGE_TOKEN"
ENV_VLLM_CACHE = "VLLM_CACHE_ROOT"
VLLM_CACHE_DIR = "vllm-cache"  # under runs_dir: one compile cache for every stage of the session


def vllm_cache_root(runs_dir: Path) -> Path:
    return Path(runs_dir) / VLLM_CACHE_DIR


def layout_values(template: str, profile: str, num_gpus: int) -> dict:
    """`{grad_accum}` when the template uses it: the profile's global batch kept on the chain's GPUs
    (a UserError line when it does not divide; nothing asked when the template does not use it)."""
    if not uses(template, "grad_accum"):
        return {}
    prof = get_profile(profile, "the chain's profile")
    return {"grad_accum": grad_accum(prof.global_batch, prof.per_device_train_batch_size, num_gpus)}


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
    runs_dir: Path | None = None,
    base: Mapping[str, str] | None = None,
    store_url: str | None = None,
) -> dict[str, str]:
    # A stage runs the queuer's code: it never sees the store's credentials (PGPASSWORD, a
    # variable holding the password or the URL), only what the stage contract gives it.
    env = credentials.scrub_env(os.environ if base is None else base, store_url)
    # Which draw of eval samples a stage takes is its chain's, set for a re-evaluation's eval
    # stage alone (eval_request.apply_env): one in the worker's shell would pass for a re-eval.
    env.pop(eval_request.ENV_DRAW, None)
    if runs_dir is not None and not env.get(ENV_VLLM_CACHE):
        # vLLM's torch.compile artefacts are keyed by model and engine config: with one cache
        # for every stage only a session's first engine of each kind compiles (~30 s each);
        # a VLLM_CACHE_ROOT the user set wins.
        env[ENV_VLLM_CACHE] = str(vllm_cache_root(runs_dir).resolve())
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


ENV_GO_FD = "OPSD_GO_FD"  # a pre-started stage waits on this pipe for the go (eval/hold.py)


def spawn(command: str, cwd: Path, env: Mapping[str, str], log_path: Path, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
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
            pass_fds=pass_fds,
        )


def python_executable() -> str:
    return sys.executable
