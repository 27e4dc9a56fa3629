"""Table cells several commands' views share: a chain state in its colour, the knobs a recipe
changes, a number or a dash."""

from __future__ import annotations

from types import MappingProxyType

STATE_STYLE = MappingProxyType({
    "queued": "cyan",
    "running": "bold yellow",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "magenta",
    "interrupted": "dark_orange",
    "skipped": "dim",
    "stopped-futile": "blue",
})


def state_cell(state: str) -> str:
    return f"[{STATE_STYLE.get(state, 'white')}]{state}[/]"


def changes_text(changes: dict) -> str:
    from opsdctl.recipes.knobs import format_value

    return ", ".join(f"{k}={format_value(v)}" for k, v in changes.items()) or "(released recipe)"


def num(x, fmt: str) -> str:
    return "-" if x is None else fmt.format(x)


def eval_words(c) -> str:
    """', partial eval 15 x 4' / ', eval only of DIR' for the lines of queue and requeue."""
    from opsdctl.cli.console import escape

    out = ""
    if c.eval_only:
        out += f", eval only of {escape(c.checkpoint or '')}"
    if getattr(c, "eval_draw", 0):
        out += f", fresh samples (draw {c.eval_draw}, pooled with its other evals)"
    if c.partial:
        out += f", [yellow]partial eval {c.partial['num_problems']} x {c.partial['k']}[/yellow] (screening only)"
    return out


def settle_cell(e, long: bool = False) -> str:
    """The runs that would settle a compare entry's question, short: '+2 runs', '+1 (worse)',
    '+47 each' (the baseline needs runs too), 'out of reach', 'settled', '-'; `long` (compare
    --explain): '+1 run (worse)', 'baseline too: +47 each'. `e`: a typed
    opsdctl.stats.report.Entry or its `compare --json` dict (the dashboard's)."""
    get = e.get if isinstance(e, dict) else (lambda k: getattr(e, k, None))

    def runs(k: int) -> str:
        return f"+{k} run" + ("s" if k > 1 else "")

    if get("runs_needed") is not None:
        return runs(get("runs_needed"))
    if get("runs_needed_worse") is not None:
        worse = get("runs_needed_worse")
        return (runs(worse) if long else f"+{worse}") + " (worse)"
    if get("needs_baseline_runs"):
        both = get("runs_needed_both_arms")
        short = f"+{both} each" if both else "out of reach"
        return f"baseline too: {short}" if long else short
    return "settled" if get("verdict") in ("better", "worse") else "-"
