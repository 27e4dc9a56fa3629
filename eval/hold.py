"""Started ahead of its turn: import on the CPU while training runs, then wait for the go.

The opsdctl worker may start the eval stage while its chain's train stage still runs
(`[stages.eval] prestart = true`), so the interpreter start and the heavy imports (torch,
transformers, vLLM: about 30 s on an H200 host, benchmarks/results/startup_h200_vllm.json)
happen behind training instead of on an idle GPU. `OPSD_GO_FD` names the read end of a pipe
from the worker: one byte `1` means go (training has ended and the GPU is ours); end of file
means the worker is gone or dropped us, and we exit without touching anything.

Until the go, nothing may touch the GPU (training owns it) or the checkpoint (it is not written
yet): the evaluator only starts its worker pool, whose processes import torch, transformers and
the backend (no CUDA call), and waits here.
"""

from __future__ import annotations

import os
import time
from typing import Optional

GO_FD_ENV = "OPSD_GO_FD"
GO = b"1"


class NoGo(Exception):
    """The worker closed the pipe without a go: the chain ended before its evaluation."""


def go_fd() -> Optional[int]:
    """The pipe to wait on, when this evaluation was started ahead of its turn."""
    text = os.environ.get(GO_FD_ENV, "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def wait_for_go(fd: int) -> float:
    """Block until the worker says go; returns the seconds held. Raises NoGo on end of file."""
    t0 = time.monotonic()
    try:
        data = os.read(fd, 1)
    finally:
        os.close(fd)
    os.environ.pop(GO_FD_ENV, None)  # our own children were never part of the handshake
    if data != GO:
        raise NoGo("the opsdctl worker ended the chain before its evaluation (no go)")
    return time.monotonic() - t0
