"""Partial evaluations (`queue --partial 15x4`): fewer problems or samples than the full protocol.

A partial eval is what researchers run to screen an idea cheaply (`VAL_N=4 NUM_PROBLEMS=15`); its
standard error is 4-5 points, so its score is screening evidence, never pooled with full runs and
never a settled verdict. One `EvalSetting` per chain: None fields mean the profile's protocol.

It reaches the eval stage three ways (all of them, so any script can pick one up):
  placeholders  {num_problems} {k}        (the full protocol's values for a full chain)
  environment   NUM_PROBLEMS, VAL_N       (set for a partial chain, removed for a full one, so a
                                           value left in the worker's shell never leaks in)
  our evaluator --num-problems / --k      (the starter eval command passes the placeholders)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from opsdctl.errors import UserError
from opsdctl.recipes.profiles import Profile

ENV_PROBLEMS = "NUM_PROBLEMS"
ENV_K = "VAL_N"
_SPEC = re.compile(r"^\s*(\d+)\s*[xX*]\s*(\d+)\s*$")


@dataclass(frozen=True)
class EvalSetting:
    """The evaluation a chain asks for: problems x samples, None = the profile's full protocol."""

    problems: Optional[int] = None
    k: Optional[int] = None

    @property
    def partial(self) -> bool:
        return self.problems is not None or self.k is not None

    def text(self) -> str:
        return f"{self.problems}x{self.k}" if self.partial else "full"

    def resolved(self, profile: Profile) -> tuple[int, int]:
        """(problems, k) with the profile's full protocol filled in."""
        full_n = profile.eval_num_problems or profile.benchmark_problems
        return (self.problems or full_n, self.k or profile.eval_k)

    def to_json(self) -> Optional[dict]:
        return {"num_problems": self.problems, "k": self.k} if self.partial else None


FULL = EvalSetting()


def of_chain(chain) -> EvalSetting:
    """The setting a chain row (opsdctl.store.models.Chain) was queued with."""
    if chain.eval_problems is None and chain.eval_k is None:
        return FULL
    return EvalSetting(chain.eval_problems, chain.eval_k)


def parse(spec: Optional[str], profile: Profile, where: str = "--partial") -> EvalSetting:
    """`15x4` (problems x samples per problem) checked against the profile's benchmark and k."""
    if spec is None:
        return FULL
    m = _SPEC.match(spec)
    if not m:
        raise UserError(f"{where} {spec!r}: write PROBLEMSxSAMPLES, e.g. --partial 15x4 "
                        f"(15 problems, 4 samples each)")
    problems, k = int(m.group(1)), int(m.group(2))
    full_n, full_k = FULL.resolved(profile)
    if problems < 1 or k < 1:
        raise UserError(f"{where} {spec}: problems and samples must be at least 1")
    if problems > full_n:
        raise UserError(f"{where} {spec}: the {profile.name} benchmark has {full_n} problems; ask for at most {full_n}")
    if k > full_k:
        raise UserError(f"{where} {spec}: the {profile.name} protocol samples {full_k} per problem; "
                        f"a partial eval asks for at most {full_k}")
    if (problems, k) == (full_n, full_k):
        raise UserError(f"{where} {spec}: that is the full evaluation ({full_n}x{full_k}); drop --partial")
    return EvalSetting(problems, k)


def placeholder_values(setting: EvalSetting, profile: Profile) -> dict[str, int]:
    n, k = setting.resolved(profile)
    return {"num_problems": n, "k": k}


def apply_env(env: dict, setting: EvalSetting, profile: Profile) -> dict:
    """NUM_PROBLEMS / VAL_N for a partial chain; neither for a full one (the script's own default)."""
    env.pop(ENV_PROBLEMS, None)
    env.pop(ENV_K, None)
    if setting.partial:
        n, k = setting.resolved(profile)
        env[ENV_PROBLEMS], env[ENV_K] = str(n), str(k)
    return env


def run_is_partial(chain, score=None) -> bool:
    """A chain's run is partial when it was queued partial or its evaluator said so."""
    return of_chain(chain).partial or bool(score is not None and score.partial)
