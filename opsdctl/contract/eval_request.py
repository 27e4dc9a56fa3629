"""What a chain's eval stage is asked to do: which checkpoint, how many problems x samples, which
fresh draw of samples.

The local executor calls these around the stage contract: the placeholders and environment of a
partial chain (opsdctl.recipes.partial), the draw of a re-evaluation, the stages an eval-only
chain runs, and the check that flags a partial chain's score partial whatever the script reported
(a FINAL line says nothing about being partial) and notes when the script ignored the request.
"""

from __future__ import annotations

from typing import Optional

from opsdctl.recipes import partial
from opsdctl.recipes.profiles import get_profile
from opsdctl.templates import STAGES

# A re-evaluation of a scored checkpoint (chain.eval_draw 1, 2, ...) must sample afresh: the eval
# stage gets the draw here and our evaluator seeds its samples from it (eval.plan.draw_seed).
ENV_DRAW = "OPSD_EVAL_DRAW"


def chain_stages(chain) -> tuple[str, ...]:
    """train then eval; an eval-only chain has the eval alone."""
    return ("eval",) if chain.eval_only else STAGES


def first_checkpoint(chain) -> Optional[str]:
    """The checkpoint the eval stage starts from before any stage ran (eval-only chains)."""
    return chain.checkpoint if chain.eval_only else None


def placeholders(chain) -> dict:
    return partial.placeholder_values(partial.of_chain(chain), get_profile(chain.profile))


def apply_env(env: dict, chain) -> dict:
    """NUM_PROBLEMS / VAL_N of a partial chain, OPSD_EVAL_DRAW of a re-evaluation (the stage's
    environment holds none from the worker's shell: daemon.stages.stage_env)."""
    if chain.eval_draw:
        env[ENV_DRAW] = str(chain.eval_draw)
    return partial.apply_env(env, partial.of_chain(chain), get_profile(chain.profile))


def flag_result(result, chain) -> Optional[str]:
    """Mark a partial chain's result partial; say so when the script ran something else."""
    setting = partial.of_chain(chain)
    if not setting.partial:
        return None
    result.partial = True
    want = setting.resolved(get_profile(chain.profile))
    if (result.n_problems, result.k) != want:
        return (f"asked for a partial eval of {want[0]} problems x {want[1]} samples but the eval reported "
                f"{result.n_problems} x {result.k}: does the eval command pass {{num_problems}} {{k}} or read "
                f"NUM_PROBLEMS / VAL_N? (kept as partial)")
    return None
