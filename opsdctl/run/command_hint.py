"""What a chain's failure line says when it failed on its stage command.

Stage commands are frozen when a chain is queued (opsdctl.run.frozen_stages), so fixing a broken
command in opsdctl.toml does not fix the chains queued before; `requeue --current-commands` does.
The line says so when the command could not run at all (the shell's 126/127) or when opsdctl.toml
now holds another command for that stage.
"""

from __future__ import annotations

from typing import Optional

from opsdctl.config import Config
from opsdctl.run.frozen_stages import differences

NOT_RUN = {126: "could not be executed", 127: "was not found"}  # /bin/sh's exit codes


def failure_hint(chain_id: int, stage: str, rc: Optional[int], spec: Optional[dict], cfg_now: Config,
                 eval_only_possible: bool) -> str:
    """'' or '; ...' to append to the failure reason of a stage that exited `rc`."""
    changed = f"[stages.{stage}] command" in differences(spec, cfg_now)
    if rc not in NOT_RUN and not changed:
        return ""
    fix = f"opsdctl requeue {chain_id}{' --eval-only' if eval_only_possible else ''} --current-commands"
    if changed:
        return f"; opsdctl.toml has another [stages.{stage}] command since it was queued: `{fix}` runs it"
    return f"; its command {NOT_RUN[rc]} (exit {rc}): fix [stages.{stage}] command in opsdctl.toml, then `{fix}`"
