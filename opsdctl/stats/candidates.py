"""Candidates: what compare treats as one thing being tested.

In the research logs the method lives in the code as much as in the knobs: the trainer and the
data collator are edited between runs. So a candidate is not a variant name but the identity

    (knob hash, code tree, stage commands)

- the knob hash, not the name: a variant with another's knobs under another name, run on the same
  code with the same commands, is the same experiment; its runs join that candidate (and it is not
  another member of the Bonferroni family);
- the code tree the checkpoint was trained with (the git tree, or the hash of the copied files);
- the identity of the stage commands the chain ran (None until chains record them).
The base model and outside checkpoints (eval-only chains) have no training code: their identity is
the name alone.

`--pool-code` drops the code tree and commands from the identity on purpose (and compare says so).

Labels: an identity is named by the variant that ran in it (the baseline's name when the
baseline is among them, else the first to run); when one name covers several identities, the one
that ran first keeps the plain name and the others get the code's short id, e.g.
`token-clip @3f2a1c` (plus `cmd <id>` when only the commands differ). A chain that has not run
yet gets the label of its identity if that identity has runs, else the same rule.

Pure functions of plain values; opsdctl.stats.scores feeds them from the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

SHORT = 6  # characters of a code tree id in a label: `token-clip @3f2a1c`


@dataclass(frozen=True)
class Identity:
    hash: str  # the variant's knob hash (or its name, for base / outside checkpoints)
    code: Optional[str] = None  # code tree key; None when pooled or not applicable
    commands: Optional[str] = None  # stage-command identity; None when pooled or unknown

    def short(self) -> str:
        return short_code(self.code)


def short_code(code: Optional[str]) -> str:
    if not code:
        return "-"
    return "live" if code.startswith("/") else code[:SHORT]


def identity(knob_hash: str, code: Optional[str], commands: Optional[str] = None, *, kind: str = "recipe",
             pool_code: bool = False) -> Identity:
    """The candidate identity of one run (see the module docstring)."""
    if kind != "recipe" or pool_code:
        return Identity(knob_hash)
    return Identity(knob_hash, code, commands)


@dataclass(frozen=True)
class Run:
    """What labelling needs of one run: its chain id (run order), variant label and identity."""

    chain_id: int
    variant: str
    identity: Identity


def assign_labels(runs: Iterable[Run], prefer: Optional[str] = None) -> dict[Identity, str]:
    """A label per identity (module docstring); `prefer`: the baseline's label."""
    first: dict[Identity, int] = {}
    names: dict[Identity, list[str]] = {}
    for r in sorted(runs, key=lambda r: r.chain_id):
        first.setdefault(r.identity, r.chain_id)
        seen = names.setdefault(r.identity, [])
        if r.variant not in seen:
            seen.append(r.variant)
    named: dict[str, list[Identity]] = {}
    for ident in sorted(first, key=first.get):
        name = prefer if prefer is not None and prefer in names[ident] else names[ident][0]
        named.setdefault(name, []).append(ident)
    out: dict[Identity, str] = {}
    for name, idents in named.items():
        out[idents[0]] = name
        for ident in idents[1:]:
            out[ident] = _suffixed(name, ident, idents[0])
    return out


def label_for(ident: Identity, variant: str, labels: dict[Identity, str]) -> str:
    """The label of a run or queued chain of `variant` with `ident`, given the labels of the runs."""
    if ident in labels:
        return labels[ident]
    taken = [i for i, name in labels.items() if name == variant]
    return variant if not taken else _suffixed(variant, ident, taken[0])


def _suffixed(name: str, ident: Identity, first: Identity) -> str:
    text = f"{name} @{ident.short()}"
    if ident.code == first.code and ident.commands != first.commands:
        text += f" cmd {(ident.commands or '-')[:SHORT]}"
    return text


def _code_of(state) -> Optional[str]:
    return state[0] if isinstance(state, tuple) else state


def _state_words(state) -> str:
    """`@3f2a1c`, or `@3f2a1c cmd 9e8d7c` for a (code tree, commands) pair with commands."""
    if isinstance(state, tuple):
        code, cmds = state
        return f"@{short_code(code)}" + (f" cmd {cmds[:SHORT]}" if cmds else "")
    return f"@{short_code(state)}"


def notes(runs: Sequence[Run], labels: dict[Identity, str], pool_code: bool, pooled_codes: dict[str, set]) -> list[str]:
    """What compare should say about candidates: variants split by code, names merged by knobs,
    and, with --pool-code, what was pooled. `pooled_codes`: variant label -> the code states
    (code tree, or (code tree, commands)) it ran on."""
    out: list[str] = []
    by_variant: dict[str, list[str]] = {}
    by_label: dict[str, list[str]] = {}
    for r in sorted(runs, key=lambda r: r.chain_id):
        lab = labels[r.identity]
        if lab not in by_variant.setdefault(r.variant, []):
            by_variant[r.variant].append(lab)
        if r.variant not in by_label.setdefault(lab, []):
            by_label[lab].append(r.variant)
    if pool_code:
        for variant, states in pooled_codes.items():
            if len(states) > 1:
                shown = ", ".join(_state_words(c) for c in sorted(states, key=str))
                trees = len({_code_of(c) for c in states})
                what = f"{trees} code trees" if trees == len(states) else f"{len(states)} code states"
                out.append(f"--pool-code: {variant}'s runs on {what} ({shown}) are pooled as one candidate")
    else:
        for variant, labs in by_variant.items():
            if len(labs) > 1:
                out.append(f"{variant} ran on {len(labs)} code states: compared as {len(labs)} candidates "
                           f"({', '.join(labs)}); --pool-code merges them")
    for lab, variants in by_label.items():
        others = [v for v in variants if v != lab.split(" @")[0]]
        if others:
            out.append(f"{', '.join(others)}: same knobs as {lab} on the same code; counted as {lab} "
                       "(one candidate)")
    return out
