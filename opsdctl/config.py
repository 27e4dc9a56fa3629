"""opsdctl.toml: find, load, validate; and the commented starter config `opsdctl init` writes.

Every key is declared in SCHEMA below (type, default, rule); an unknown key or a wrong type is
refused with one line naming the file, the key and the rule. Relative paths (db, runs_dir,
code_dir, recipes_dir, budget.remaining_file) resolve against the config file's directory,
so a command works the same from any working directory.
"""

from __future__ import annotations

import datetime as dt
import difflib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from opsdctl.errors import UserError
from opsdctl.recipes import knobs
from opsdctl.recipes.profiles import PROFILES, get_profile
from opsdctl.recipes.toml_file import read_toml_file
from opsdctl.templates import NOTIFY_PLACEHOLDERS, STAGE_PLACEHOLDERS, check_template

CONFIG_NAME = "opsdctl.toml"
ENV_CONFIG = "OPSDCTL_CONFIG"
DEFAULT_CHECKPOINT = "{stage_dir}/checkpoint-final"


# --- value checkers: (value, where) -> normalised value, or UserError ----------------------


def _type_name(v: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "a table"}.get(type(v), type(v).__name__)


def _bad(where: str, value: Any, rule: str) -> UserError:
    return UserError(f"{where} = {value!r}: must be {rule} (got {_type_name(value)})")


def _str(value, where):
    if not isinstance(value, str):
        raise _bad(where, value, "a quoted string")
    return value


def _nonempty_str(value, where):
    value = _str(value, where)
    if not value.strip():
        raise UserError(f"{where}: must not be empty")
    return value


def _bool(value, where):
    if not isinstance(value, bool):
        raise _bad(where, value, "true or false")
    return value


# Upper bounds that no sane setting reaches: they turn `hours = 1e300` or a 30-digit integer
# into one clear line instead of an overflow somewhere later. Every numeric key has one.
INT_MAX = 2**31 - 1
YEAR_HOURS = 366 * 24
YEAR_MINUTES = YEAR_HOURS * 60
HOUR_SECONDS = 3600.0


def _int(lo: Optional[int] = None, hi: int = INT_MAX) -> Callable:
    rule = "an integer " + (f">= {lo} and " if lo is not None else "") + f"<= {hi}"

    def check(value, where):
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(where, value, rule)
        if (lo is not None and value < lo) or value > hi:
            shown = value if len(str(value)) <= 24 else f"{str(value)[:12]}... ({len(str(value))} digits)"
            raise UserError(f"{where} = {shown}: must be {rule}")
        return value

    return check


def _number(lo: Optional[float] = None, positive: bool = False, hi: float = 1e9, unit: str = "") -> Callable:
    """A finite number in range; NaN and +-inf are refused (TOML spells them nan and inf)."""
    low = " > 0" if positive else f" >= {lo:g}" if lo is not None else ""
    rule = f"a finite number{low}{' and' if low else ''} <= {hi:g}{unit}"

    def check(value, where):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(where, value, rule)
        try:
            value = float(value)
        except OverflowError:  # an integer beyond any float
            raise UserError(f"{where}: an integer of {len(str(value))} digits: must be {rule}") from None
        if (not math.isfinite(value) or (positive and value <= 0) or (lo is not None and value < lo)
                or value > hi):
            raise UserError(f"{where} = {value:g}: must be {rule}")
        return value

    return check


# [planner]'s choices; opsdctl.plan.policy names them, `worker --policy/--objective` checks against them
PLANNER_POLICIES = ("fifo", "adaptive")
PLANNER_OBJECTIVES = ("submission", "verdicts")


def _choice(*options: str) -> Callable:
    def check(value, where):
        if value not in options:
            raise UserError(f"{where} = {value!r}: must be one of " + ", ".join(repr(o) for o in options))
        return value

    return check


def _executor(value, where):
    if value not in ("local", "ray"):
        raise UserError(f'{where} = {value!r}: must be "local" (this machine) or "ray" (a Ray cluster)')
    return value


def _str_list(value, where):
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise _bad(where, value, "an array of strings")
    return list(value)


def _globs(value, where):
    import re

    from opsdctl.fsutil import glob_regex

    patterns = _str_list(value, where)
    for p in patterns:
        try:
            if not p.strip("/"):
                raise re.error("empty")
            glob_regex(p)
        except re.error:
            raise _bad(where, p, "a path glob such as \"*.ckpt\" or \"outputs/**\"") from None
    return patterns


def _devices(value, where):
    if value == "all":
        return "all"
    if isinstance(value, list) and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1024 for x in value):
        if len(set(value)) != len(value):
            raise UserError(f"{where} = {value!r}: lists a GPU twice")
        return list(value)
    raise UserError(f'{where} = {value!r}: must be "all" or an array of CUDA indices such as [0, 1, 2, 3] ([] = no GPUs)')


def _deadline(value, where):
    if isinstance(value, dt.datetime):
        when = value
    elif isinstance(value, str):
        try:
            when = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise UserError(f"{where} = {value!r}: must be an ISO time such as 2025-06-01T18:30:00+02:00") from None
    else:
        raise _bad(where, value, "an ISO time such as 2025-06-01T18:30:00+02:00")
    if when.tzinfo is None:
        when = when.astimezone()  # local time
    return when


def _reference(value, where):
    if not isinstance(value, dict):
        raise _bad(where, value, "a table such as { mean = 54.22, sd = 1.48, n = 5 }")
    return _check_table(value, REFERENCE_SCHEMA, where + ".", required=("mean", "sd", "n"))


def _metrics(value, where):
    """[stages.train.metrics]: name -> a regex with exactly one group that captures a number."""
    import re

    if not isinstance(value, dict):
        raise _bad(where, value, "a table of name = 'regex with one (number) group'")
    out = {}
    for name, pattern in value.items():
        at = f"{where}.{name}"
        if not name.isidentifier() or name in ("step", "learning_rate"):
            raise UserError(f"{at}: {name!r} cannot name a metric (a plain identifier other than step and "
                            "learning_rate, e.g. kl, frac_clipped)")
        if not isinstance(pattern, str):
            raise _bad(at, pattern, "a regex string such as 'KL\\(T\\|\\|S\\)=([0-9.eE+-]+)'")
        try:
            groups = re.compile(pattern).groups
        except re.error as exc:
            raise UserError(f"{at} = {pattern!r}: not a valid regex ({exc}); write it in single quotes "
                            "so backslashes stay as they are") from None
        except (RecursionError, OverflowError):  # "((((...))))" 1000 deep
            raise UserError(f"{at}: the regex is nested too deeply to compile; simplify it") from None
        if groups != 1:
            raise UserError(f"{at} = {pattern!r}: has {groups} groups; it needs exactly one, around the number "
                            "(use (?:...) for the others), e.g. 'tau=([0-9.eE+-]+)'")
        out[name] = pattern
    return out


def _family(value, where):
    """`[compare] family`: "all", "since:ISO-TIME", or a list of variant names."""
    if isinstance(value, list):
        if not value or not all(isinstance(x, str) and x.strip() for x in value):
            raise _bad(where, value, 'a non-empty list of variant names, "all" or "since:2025-06-01"')
        return [x.strip() for x in value]
    if isinstance(value, str):
        text = value.strip()
        if text == "all":
            return text
        if text.startswith("since:"):
            _deadline(text[len("since:"):], where)  # an ISO time, checked now
            return text
    raise _bad(where, value, 'a list of variant names, "all" or "since:2025-06-01T00:00:00"')


def _relative_path(value, where):
    value = _nonempty_str(value, where)
    parts = Path(value).parts
    if Path(value).is_absolute() or ".." in parts or value.endswith("/"):
        raise UserError(f"{where} = {value!r}: must be a file path relative to the code dir, without '..' "
                        "(e.g. submission/recipe.env)")
    return Path(value).as_posix()


def _expect(value, where):
    import re

    if not isinstance(value, dict):
        raise _bad(where, value, 'a table of knob = "regex with one (group)"')
    out = {}
    for knob, pattern in value.items():
        here = f"{where}.{knob}"
        if not isinstance(pattern, str):
            raise _bad(here, pattern, 'a regex string with one (group), e.g. "lr=([0-9.e+-]+)"')
        try:
            groups = re.compile(pattern).groups
        except re.error as exc:
            raise UserError(f"{here} = {pattern!r}: not a valid regex ({exc}); fix the pattern") from None
        if groups != 1:
            raise UserError(f"{here} = {pattern!r}: must have exactly one (group), the value; it has {groups}")
        out[knob] = pattern
    return out


def _notify_command(value, where):
    value = _nonempty_str(value, where)
    check_template(value, NOTIFY_PLACEHOLDERS, where)
    return value


def _webhook(value, where):
    from urllib.parse import urlsplit

    value = _nonempty_str(value, where)
    url = urlsplit(value)
    if url.scheme not in ("http", "https") or not url.hostname:
        # the URL itself may hold a secret: name the rule, not the value
        raise UserError(f"{where}: must be an http:// or https:// URL (got a value starting {value[:8]!r}); "
                        "e.g. https://hooks.slack.com/services/...")
    return value


def _env_name(value, where):
    value = _nonempty_str(value, where)
    if not value.replace("_", "a").isalnum() or value[0].isdigit():
        raise _bad(where, value, "an environment variable name such as OPSDCTL_WEBHOOK")
    return value


def _notify_events(value, where):
    from opsdctl.store.outbox import EventKind

    known = [k.value for k in EventKind]
    value = _str_list(value, where)
    for name in value:
        if name not in known:
            raise UserError(f"{where}: unknown event {name!r}; known: {', '.join(known)}")
    return value


@dataclass(frozen=True)
class Key:
    check: Callable
    default: Any = None
    help: str = ""


REFERENCE_SCHEMA = {
    "mean": Key(_number(lo=0, hi=100), help="published baseline score, points (e.g. 54.22)"),
    "sd": Key(_number(positive=True, hi=100), help="run-to-run standard deviation, points (e.g. 1.48)"),
    "n": Key(_int(lo=1, hi=1_000_000), help="number of runs behind mean and sd (e.g. 5)"),
    "prior": Key(_bool, True, help="use sd as a prior for the pooled noise estimate"),
    "offset_sd": Key(_number(lo=0), 1.0, help="how far your setup may sit from the published one, points (1 sd)"),
}

# Section name -> key -> Key. "" is the top level. Later features add their keys here.
SCHEMA: dict[str, dict[str, Key]] = {
    "": {
        "profile": Key(_str, "tiny", "named profile: " + ", ".join(PROFILES)),
        "db": Key(_nonempty_str, "sqlite:///runs.db", "SQLAlchemy URL of the store"),
        "runs_dir": Key(_nonempty_str, "runs", "where chain logs, stage outputs and code snapshots go"),
        "code_dir": Key(_nonempty_str, ".", "the code the stages run (snapshotted at queue time)"),
        "recipes_dir": Key(_nonempty_str, "recipes", "where recipe names are looked up"),
        "snapshot_code": Key(_bool, True, "run each chain in a copy of the code as it was when queued"),
        "snapshot_warn_mib": Key(_number(lo=0, hi=1e9), 100.0, "warn when a code snapshot stores more than this many new MiB (0 = never)"),
        "extra_method_knobs": Key(_str_list, [], "method knobs your own train script reads (OPSD_<KNOB>)"),
        "executor": Key(_executor, "local", '"local", or "ray": run chains on a Ray cluster (docs/cluster.md)'),
        "ray_address": Key(_nonempty_str, None, 'with "ray": "auto", "ray://head:10001"...; unset starts a local Ray'),
        "gpus_per_chain": Key(_int(lo=0, hi=1024), None, "GPUs each chain gets: the local worker runs devices / gpus_per_chain "
                              'chains at once on disjoint GPUs; with "ray", all on one node [default: the devices count]'),
    },
    "snapshot": {
        "exclude": Key(_globs, [], "globs kept out of every code snapshot, relative to code_dir, as in .gitignore "
                       '(e.g. ["*.ckpt", "outputs/"]); the countdown\'s directory is always left out'),
    },
    "budget": {
        "remaining_file": Key(_nonempty_str, None, "file holding the seconds left (re-read each time)"),
        "deadline": Key(_deadline, None, "ISO time the budget ends"),
        "hours": Key(_number(positive=True, hi=YEAR_HOURS, unit=" (a year)"), None, "hours from the first worker start"),
        "margin_minutes": Key(_number(lo=0, hi=YEAR_MINUTES, unit=" (a year)"), 5.0, "kept free at the end"),
    },
    "gpus": {
        "devices": Key(_devices, [], '"all", or CUDA indices; [] runs without GPUs'),
        "min_free_mib": Key(_int(lo=0, hi=2**30), 0, "free memory each GPU needs before a stage starts"),
        "gpu_wait_minutes": Key(_number(positive=True, hi=YEAR_MINUTES, unit=" (a year)"), 30.0, "how long a stage waits for its GPUs, then the chain is skipped"),
        "release_wait_minutes": Key(_number(lo=0, hi=YEAR_MINUTES, unit=" (a year)"), 3.0, "after a stage, how long to wait for its processes' GPU memory to be freed"),
        "sample_seconds": Key(_number(lo=0, hi=3600), 1.0, "how often the worker samples a stage's GPU memory and utilisation (NVML; 0 = off)"),
    },
    "planner": {
        "policy": Key(_choice(*PLANNER_POLICIES), "fifo", "fifo: queue order; adaptive: settle the most questions first"),
        "futility": Key(_bool, False, "stop an evaluation at a look (k = 4, 8 of 12) when it cannot beat the baseline"),
        "auto_repeat": Key(_bool, False, "adaptive: let the worker queue the repeat `advise` ranks first itself"),
        "auto_repeat_max": Key(_int(lo=0, hi=10_000), None, "at most this many auto-repeat chains per worker run "
                               "[default: no cap: the worker queues while a repeat has value and fits]"),
        "auto_repeat_first": Key(_bool, False, "auto-repeat chains may run before chains you queued earlier "
                                 "(off: your queue first)"),
        "try_every_variant": Key(_bool, False, "adaptive: give every queued variant its first run before any repeat "
                                 "(off: the `advise` ranking may leave an idea untried when a repeat is worth more)"),
        "objective": Key(_choice(*PLANNER_OBJECTIVES), "submission", "adaptive: spend the budget on the submission's "
                         "expected official score (`advise`'s ranking), or on verdicts (fewer ideas, more runs each)"),
        "train_minutes": Key(_number(positive=True, hi=YEAR_MINUTES, unit=" (a year)"), None, "train duration before any history [default: the profile's]"),
        "eval_minutes": Key(_number(positive=True, hi=YEAR_MINUTES, unit=" (a year)"), None, "eval duration before any history [default: the profile's]"),
    },
    "stages.train": {
        "command": Key(_nonempty_str, None, "train command template"),
        "checkpoint": Key(_nonempty_str, DEFAULT_CHECKPOINT, "where the train stage leaves its checkpoint"),
        "recipe_env_path": Key(_relative_path, None, "the file your train script reads its recipe from, relative to "
                               "the code dir (e.g. submission/recipe.env): the variant's recipe.env is put there"),
        "expect": Key(_expect, {}, "knob -> regex with one group: where the train log shows the value it used"),
        "timeout_minutes": Key(_number(positive=True, hi=YEAR_MINUTES, unit=" (a year)"), None, "stop the stage after this long"),
        "metrics": Key(_metrics, {}, "name -> regex with one numeric group, read from the train log per step"),
        "gpus": Key(_int(lo=1, hi=1024), None, "GPUs this stage gets (local executor) [default: gpus_per_chain]"),
    },
    "stages.eval": {
        "command": Key(_nonempty_str, None, "eval command template"),
        "prestart": Key(_bool, None, "start the eval while its train stage runs, to wait for the go on OPSD_GO_FD "
                        "(its imports off the idle GPU) [default: on for the built-in evaluator, off otherwise]"),
        "timeout_minutes": Key(_number(positive=True, hi=YEAR_MINUTES, unit=" (a year)"), None, "stop the stage after this long"),
        "gpus": Key(_int(lo=1, hi=1024), None, "GPUs this stage gets (local executor) [default: gpus_per_chain]"),
    },
    "baseline": {
        "variant": Key(_nonempty_str, None, "the variant others are compared with"),
        "reference": Key(_reference, None, "published baseline {mean, sd, n, prior, offset_sd}"),
    },
    "compare": {
        "family": Key(_family, "all", 'what the verdicts correct for: "all" (every candidate in the store), '
                      '"since:2025-06-01" (candidates first queued since then), or ["a", "b", ...]'),
    },
    "export": {
        "path": Key(_nonempty_str, None, "the worker writes the best variant's recipe.env here near the deadline (unset: off)"),
        "minutes_before_deadline": Key(_number(lo=0, hi=YEAR_MINUTES, unit=" (a year)"), 10.0,
                                       "start writing it this long before the budget ends, then on every change of leader"),
    },
    "notify": {
        "command": Key(_notify_command, None, "run on each event: a template of {event} {event_id} {chain_id} {variant} "
                       "{state} {message} {json}, each shell-quoted"),
        "webhook": Key(_webhook, None, "POST each event as JSON ({text, content, event, ...}) to this URL"),
        "webhook_env": Key(_env_name, None, "the environment variable holding the webhook URL (keeps a secret URL out of this file)"),
        "events": Key(_notify_events, None, "only these event kinds [default: all]"),
        "timeout_seconds": Key(_number(positive=True, hi=HOUR_SECONDS, unit=" (an hour)"), 10.0,
                               "a hook running longer is stopped and logged"),
        "budget_minutes": Key(_number(lo=0, hi=YEAR_MINUTES, unit=" (a year)"), 30.0,
                              "budget.nearly_spent fires once when this little usable time is left"),
    },
    "host": {
        "ram_gib_per_chain": Key(_number(lo=0, hi=1e6), None, "host RAM one chain's processes take, GiB; the worker "
                                 "refuses more chains at once than the host holds (0 = no check) [default: the profile's]"),
        "cpus_per_chain": Key(_number(lo=0, hi=1e6), None, "CPU cores one chain keeps busy (0 = no check) "
                              "[default: the profile's]"),
    },
    "queue": {
        "seed": Key(_int(lo=0, hi=2**31 - 1), None, "seed of the first repeat [default: the profile's: 42 for qwen3-1.7b, 0 for tiny]"),
        "same_seed": Key(_bool, None, "every repeat at that seed, as the scorer re-trains [default: the profile's]"),
    },
    "worker": {
        "poll_seconds": Key(_number(positive=True, hi=HOUR_SECONDS, unit=" (an hour)"), 2.0, "how often an idle worker looks for work"),
        "kill_grace_seconds": Key(_number(lo=0, hi=HOUR_SECONDS, unit=" (an hour)"), 15.0, "TERM -> KILL grace when stopping a stage"),
    },
}


def _check_table(table: dict, schema: dict[str, Key], prefix: str, required=()) -> dict:
    out = {}
    for key, value in table.items():
        where = f"{prefix}{key}"
        if key not in schema:
            close = difflib.get_close_matches(key, list(schema), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise UserError(f"{where}: unknown key{hint}; known: {', '.join(schema)}")
        out[key] = schema[key].check(value, where)
    for key in required:
        if key not in out:
            raise UserError(f"{prefix}{key}: missing (required)")
    for key, spec in schema.items():
        out.setdefault(key, spec.default if not isinstance(spec.default, list) else list(spec.default))
    return out


# --- the loaded config --------------------------------------------------------------------


@dataclass(frozen=True)
class StageConfig:
    name: str
    command: str
    checkpoint: Optional[str] = None  # train only
    timeout_minutes: Optional[float] = None
    metrics: tuple[tuple[str, str], ...] = ()  # train only: (name, regex) read from its log
    prestart: bool = False  # eval only: started while its train stage runs, held until the go (eval.hold)


@dataclass(frozen=True)
class Reference:
    """The published baseline: `[baseline] reference = {mean, sd, n}` (points)."""

    mean: float
    sd: float
    n: int
    prior: bool = True  # use (sd, n - 1) as the prior on the run-to-run sigma
    offset_sd: float = 1.0  # sd of the offset between the user's setup and the published one, points


@dataclass(frozen=True)
class BudgetConfig:
    remaining_file: Optional[Path] = None
    deadline: Optional[dt.datetime] = None  # aware
    hours: Optional[float] = None
    margin_minutes: float = 5.0

    @property
    def kind(self) -> str:
        if self.remaining_file is not None:
            return "remaining_file"
        if self.deadline is not None:
            return "deadline"
        if self.hours is not None:
            return "hours"
        return "none"


@dataclass(frozen=True)
class Config:
    path: Optional[Path]  # None: built in memory (tests, `init`)
    base_dir: Path
    profile: str
    db: str
    runs_dir: Path
    code_dir: Path
    recipes_dir: Path
    snapshot_code: bool
    extra_method_knobs: tuple[str, ...]
    budget: BudgetConfig
    devices: Any  # "all" | list[int]
    min_free_mib: int
    stages: dict[str, StageConfig]
    baseline_variant: Optional[str]
    reference: Optional[Reference]
    poll_seconds: float
    kill_grace_seconds: float
    sections: dict[str, dict] = field(default_factory=dict)  # every validated section, by name
    warnings: tuple[str, ...] = ()  # said once at load (stderr), never fatal

    @property
    def where(self) -> str:
        return str(self.path) if self.path else CONFIG_NAME

    def section(self, name: str) -> dict:
        return self.sections.get(name, {})

    def seed_policy(self) -> tuple[int, bool]:
        """(first seed, same seed for every repeat) of `queue`: [queue], else the profile's."""
        prof = PROFILES[self.profile]
        q = self.section("queue")
        seed = q.get("seed")
        same = q.get("same_seed")
        return (prof.repeat_seed if seed is None else seed, prof.repeat_same_seed if same is None else same)


def export_path(cfg: "Config") -> Optional[Path]:
    """`[export] path`, resolved against the config file's directory (None: auto-export off)."""
    raw = cfg.section("export").get("path")
    if not raw:
        return None
    path = Path(raw).expanduser()
    return path if path.is_absolute() else (cfg.base_dir / path).resolve()


def find_config(explicit: Optional[str] = None) -> Path:
    """--config, else $OPSDCTL_CONFIG, else ./opsdctl.toml."""
    chosen = explicit or os.environ.get(ENV_CONFIG)
    if chosen:
        path = Path(chosen).expanduser()
        if path.is_dir():
            path = path / CONFIG_NAME
        if not path.is_file():
            raise UserError(f"{path}: config file not found; check --config / ${ENV_CONFIG}, or run `opsdctl init`")
        return path.resolve()
    path = Path.cwd() / CONFIG_NAME
    if not path.is_file():
        raise UserError(
            f"no {CONFIG_NAME} in {Path.cwd()}; run `opsdctl init` here, or pass --config PATH (or set ${ENV_CONFIG})"
        )
    return path.resolve()


def check_gpu_layout(n_devices: int, per_chain: Optional[int], stage_gpus: dict, executor: str, where: str,
                     shared_recipe: bool = False) -> int:
    """The GPU layout rule, one place (config load, and the worker once `devices = "all"` is counted):
    slots are disjoint groups of `gpus_per_chain` devices, so it must divide the devices count; a
    stage's own `gpus = k` is an aligned block of k, so k must divide it too; chains at once need
    their own recipe file (`shared_recipe`: recipe_env_path without snapshot_code). Returns how
    many chains the local worker runs at once: devices / the smallest stage's GPUs (1 without GPUs)."""
    if executor == "ray":
        for stage in stage_gpus:
            raise UserError(f'{where}: [stages.{stage}] gpus is for the local executor; with executor = "ray" '
                            "every stage of a chain gets its gpus_per_chain GPUs on one node: remove it")
        return 1
    if n_devices == 0:
        if per_chain:
            raise UserError(f"{where}: gpus_per_chain = {per_chain} but [gpus] devices = []: list the GPUs to share "
                            "out (devices = [0, 1, 2, 3]), or remove gpus_per_chain")
        for stage, k in stage_gpus.items():
            raise UserError(f"{where}: [stages.{stage}] gpus = {k} but [gpus] devices = []: list the GPUs, or "
                            f"remove [stages.{stage}] gpus")
        return 1
    divisors = ", ".join(str(d) for d in range(1, n_devices + 1) if n_devices % d == 0)
    if per_chain is not None and not 1 <= per_chain <= n_devices:
        raise UserError(f"{where}: gpus_per_chain = {per_chain}: must be between 1 and the {n_devices} device(s) "
                        f"of [gpus] devices ({divisors})")
    if per_chain is not None and n_devices % per_chain:
        raise UserError(f"{where}: gpus_per_chain = {per_chain} does not divide the {n_devices} devices of [gpus] "
                        f"devices: chains run on disjoint groups of gpus_per_chain GPUs; pick one of {divisors}")
    for stage, k in stage_gpus.items():
        if k > n_devices or n_devices % k:
            raise UserError(f"{where}: [stages.{stage}] gpus = {k} does not divide the {n_devices} device(s) of "
                            f"[gpus] devices: a stage runs on an aligned block of its GPUs; pick one of {divisors}")
    widths = [stage_gpus.get(stage, per_chain or n_devices) for stage in ("train", "eval")]
    at_once = n_devices // min(widths)
    if shared_recipe and at_once > 1:
        raise UserError(f"{where}: [stages.train] recipe_env_path with {at_once} chains at once (gpus_per_chain, "
                        "[stages.*] gpus) needs snapshot_code = true: they would share one recipe file in code_dir")
    return at_once


def load_config(path: Path) -> Config:
    path = Path(path)
    raw = read_toml_file(path.resolve())  # unreadable, not UTF-8, invalid or too deep: one line
    return config_from_dict(raw, path.parent.resolve(), path=path.resolve())


def config_from_dict(raw: dict, base_dir: Path, path: Optional[Path] = None) -> Config:
    where = str(path) if path else CONFIG_NAME
    raw = dict(raw)
    # Split the document into schema sections ("stages" holds sub-tables).
    tables: dict[str, dict] = {}
    top = {}
    for key, value in raw.items():
        if key == "stages":
            if not isinstance(value, dict):
                raise UserError(f"{where}: stages: must be a table ([stages.train], [stages.eval])")
            for stage, sub in value.items():
                name = f"stages.{stage}"
                if name not in SCHEMA:
                    raise UserError(f"{where}: [stages.{stage}]: unknown stage; stages are train and eval")
                if not isinstance(sub, dict):
                    raise UserError(f"{where}: [stages.{stage}]: must be a table")
                tables[name] = sub
        elif key in SCHEMA and key != "":
            if not isinstance(value, dict):
                raise UserError(f"{where}: {key}: must be a table ([{key}])")
            tables[key] = value
        elif isinstance(value, dict) and key not in SCHEMA[""]:
            close = difflib.get_close_matches(key, [k for k in SCHEMA if k], n=1)
            hint = f" (did you mean [{close[0]}]?)" if close else ""
            raise UserError(f"{where}: [{key}]: unknown section{hint}; known: " + ", ".join(f"[{k}]" for k in SCHEMA if k))
        else:
            top[key] = value

    sections = {"": _check_table(top, SCHEMA[""], f"{where}: ")}
    for name, schema in SCHEMA.items():
        if name:
            sections[name] = _check_table(tables.get(name, {}), schema, f"{where}: [{name}] ")

    base = sections[""]
    profile = get_profile(base["profile"], f"{where}: profile")
    for knob in base["extra_method_knobs"]:
        if knob in knobs.HPARAMS or knob in knobs.METHOD_KNOBS or knob in knobs.BUDGET_KNOBS:
            raise UserError(f"{where}: extra_method_knobs: {knob!r} is already a known knob; remove it")
        if not knob.isidentifier():
            raise UserError(f"{where}: extra_method_knobs: {knob!r} must be a plain identifier (letters, digits, _)")

    extra = set(base["extra_method_knobs"])
    for knob in sections["stages.train"]["expect"]:
        if knob not in knobs.HPARAMS and knob not in knobs.METHOD_KNOBS and knob not in extra:
            raise UserError(f"{where}: [stages.train.expect] {knob}: not a recipe knob{knobs_hint(knob, extra)}; "
                            "expect maps a knob to the log pattern that shows its value")
    stage_gpus = {stage: sections[f"stages.{stage}"]["gpus"] for stage in ("train", "eval")
                  if sections[f"stages.{stage}"]["gpus"] is not None}
    shared_recipe = bool(sections["stages.train"]["recipe_env_path"]) and not base["snapshot_code"]
    if shared_recipe and base["executor"] == "ray":
        raise UserError(f"{where}: [stages.train] recipe_env_path with executor = \"ray\" needs snapshot_code = true: "
                        "chains running at once would share one recipe file in code_dir")
    if sections["gpus"]["devices"] != "all":  # "all" is counted when the worker starts (the same check)
        check_gpu_layout(len(sections["gpus"]["devices"]), base["gpus_per_chain"], stage_gpus, base["executor"],
                         where, shared_recipe)

    budget_raw = sections["budget"]
    chosen = [k for k in ("remaining_file", "deadline", "hours") if budget_raw[k] is not None]
    if len(chosen) > 1:
        raise UserError(f"{where}: [budget] sets {' and '.join(chosen)}: pick one source of the time left")
    budget = BudgetConfig(
        remaining_file=_resolve(base_dir, budget_raw["remaining_file"]) if budget_raw["remaining_file"] else None,
        deadline=budget_raw["deadline"],
        hours=budget_raw["hours"],
        margin_minutes=budget_raw["margin_minutes"],
    )

    starter = starter_stage_commands(profile.name)
    stages = {}
    for stage in ("train", "eval"):
        sec = sections[f"stages.{stage}"]
        command = sec["command"] or starter[stage]
        check_template(command, STAGE_PLACEHOLDERS[stage], f"{where}: [stages.{stage}] command")
        checkpoint = sec.get("checkpoint")
        if stage == "train":
            check_template(checkpoint, STAGE_PLACEHOLDERS["train"], f"{where}: [stages.train] checkpoint", shell=False)
        # only a command that honours OPSD_GO_FD may start early: ours does; a user's script must say so
        prestart = sec.get("prestart")
        prestart = bool(BUILTIN_EVALUATOR.match(command)) if prestart is None else prestart
        stages[stage] = StageConfig(stage, command, checkpoint if stage == "train" else None, sec["timeout_minutes"],
                                    tuple((sec.get("metrics") or {}).items()), prestart=stage == "eval" and prestart)

    warnings = []
    if budget.remaining_file is not None and not budget.remaining_file.is_file():
        warnings.append(f"{where}: [budget] remaining_file {budget.remaining_file} does not exist: the worker "
                        "starts no chain until it can read the seconds left from it")

    ref = sections["baseline"]["reference"]
    reference = Reference(ref["mean"], ref["sd"], ref["n"], ref["prior"], ref["offset_sd"]) if ref else None

    return Config(
        path=path,
        base_dir=base_dir,
        profile=profile.name,
        db=_resolve_db(base["db"], base_dir, where),
        runs_dir=_resolve(base_dir, base["runs_dir"]),
        code_dir=_resolve(base_dir, base["code_dir"]),
        recipes_dir=_resolve(base_dir, base["recipes_dir"]),
        snapshot_code=base["snapshot_code"],
        extra_method_knobs=tuple(base["extra_method_knobs"]),
        budget=budget,
        devices=sections["gpus"]["devices"],
        min_free_mib=sections["gpus"]["min_free_mib"],
        stages=stages,
        baseline_variant=sections["baseline"]["variant"],
        reference=reference,
        poll_seconds=sections["worker"]["poll_seconds"],
        kill_grace_seconds=sections["worker"]["kill_grace_seconds"],
        sections=sections,
        warnings=tuple(warnings),
    )


def knobs_hint(name: str, extra=()) -> str:
    close = difflib.get_close_matches(name, [*knobs.HPARAMS, *knobs.METHOD_KNOBS, *extra], n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _resolve(base_dir: Path, value: str) -> Path:
    p = Path(value).expanduser()
    return (p if p.is_absolute() else base_dir / p).resolve()


def _resolve_db(url: str, base_dir: Path, where: str) -> str:
    from opsdctl.store.urls import sqlite_file, sqlite_url

    plain = sqlite_file(url)  # the common case, without importing SQLAlchemy (status starts fast)
    if plain:
        path = Path(plain).expanduser()
        resolved = sqlite_url(str((path if path.is_absolute() else base_dir / path).resolve()))
        if resolved is not None:
            return resolved
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        from opsdctl.store.credentials import mask_url

        shown = mask_url(url)  # never echo a password
        raise UserError(f"{where}: db = {shown!r}: not a database URL; write e.g. sqlite:///runs.db or "
                        "postgresql+psycopg://user@host/db (password from PGPASSWORD)") from None
    if parsed.get_backend_name() != "sqlite":
        from opsdctl.store.credentials import mask_url, url_password

        if "@" in (url_password(url) or ""):
            raise UserError(f"{where}: db = {mask_url(url)!r}: the password holds an unencoded '@', which ends it "
                            "early; write it as %40, or leave it out of the URL and set PGPASSWORD")
        return url
    db = parsed.database
    if not db or db == ":memory:":
        raise UserError(f"{where}: db = {url!r}: an in-memory SQLite store cannot be shared; name a file")
    path = Path(db).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    return parsed.set(database=str(path.resolve())).render_as_string(hide_password=False)


# --- starter config -----------------------------------------------------------------------


# `{python} -m eval ...` (any interpreter, any flags): our evaluator, which honours OPSD_GO_FD
BUILTIN_EVALUATOR = re.compile(r"\s*\S*python[\d.]*\S*\s+-m\s+eval(\s|$)")


def starter_stage_commands(profile: str) -> dict[str, str]:
    train_args = "-m trainer --profile {profile} --recipe {recipe_json} --seed {seed} --output-dir {stage_dir}"
    if profile == "tiny":
        train = "{python} " + train_args
    else:
        train = "{python} -m accelerate.commands.launch --num_processes {num_gpus} " + train_args
    evaluate = ("{python} -m eval --profile {profile} --adapter {checkpoint} --num-problems {num_problems} --k {k} "
                "--output-dir {stage_dir} --gpus {gpus}")
    return {"train": train, "eval": evaluate}


def starter_config(profile: str = "tiny") -> str:
    prof = get_profile(profile, "--profile")
    cmds = starter_stage_commands(prof.name)
    gpu = prof.name != "tiny"
    devices = "[0, 1, 2, 3]" if gpu else "[]"
    min_free = "70000" if gpu else "0"
    if prof.repeat_same_seed:
        seeding = (f"seed = {prof.repeat_seed}                         # the scorer's protocol: it re-trains a recipe 5 times at seed "
                   f"{prof.repeat_seed} and\nsame_seed = true                  #   averages, so repeats here run at that one seed "
                   "too (their spread is\n                                  #   vLLM sampling and CUDA nondeterminism, as the scorer's)")
    else:
        seeding = (f"seed = {prof.repeat_seed}                          # repeat r runs seed S + r: this profile trains "
                   "deterministically on\nsame_seed = false                 #   CPU, so one seed would repeat one score")
    recipe_env = (
        'recipe_env_path = "submission/recipe.env"   # the variant\'s recipe.env goes here for each train stage'
        if gpu else '# recipe_env_path = "submission/recipe.env"   # where your own train script reads its recipe'
    )
    reference = (
        "reference = { mean = 54.22, sd = 1.48, n = 5 }   # published: mean of 5 re-trains, 1-sigma 1.48"
        if gpu
        else "# reference = { mean = 54.22, sd = 1.48, n = 5 }   # a published baseline, if you have one"
    )
    return f'''# opsdctl.toml: written by `opsdctl init --profile {prof.name}`. Relative paths resolve against
# this file's directory. Every key is checked: a typo is refused with one line.

profile = "{prof.name}"                # fixed setting: model, data, benchmark, step budget ({", ".join(PROFILES)})
db = "sqlite:///runs.db"          # the store (any SQLAlchemy URL)
runs_dir = "runs"                 # logs, stage outputs, code snapshots: runs/<chain_id>/<stage>.log
code_dir = "."                    # the code the stages run
recipes_dir = "recipes"           # `opsdctl queue NAME` looks for recipes/NAME.toml
snapshot_code = true              # run each chain in a copy of the code as it was when queued
snapshot_warn_mib = 100           # warn when a snapshot stores more new MiB than this (keep outputs out of code_dir)
extra_method_knobs = []           # method knobs your own train script reads, e.g. ["my_clip"]
executor = "local"                # or "ray": chains on a Ray cluster, one per free node slot (docs/cluster.md)
# ray_address = "auto"            # with "ray": "auto" (this machine is in the cluster), "ray://head:10001"
# gpus_per_chain = 1              # GPUs per chain: devices / gpus_per_chain chains run at once, each on its
                                  #   own GPUs (with "ray": all on one node) [default: the devices count]

[snapshot]
exclude = []                      # globs kept out of every snapshot, as in .gitignore: ["*.ckpt", "outputs/"]

[budget]                          # the time left: pick at most one source
# remaining_file = ".timer/remaining_secs"   # one integer of seconds, re-read each time
# deadline = "2025-06-01T18:30:00+02:00"
# hours = 6                                  # counted from the first worker start
margin_minutes = 5                # kept free at the end

[gpus]
devices = {devices}                   # "all", or CUDA indices; [] runs without GPUs
min_free_mib = {min_free}                # each granted GPU needs this much free memory
gpu_wait_minutes = 30             # a stage waits this long for free GPUs, then its chain is skipped
release_wait_minutes = 3          # after a stage, wait this long for its own GPU memory to be freed

[planner]
policy = "fifo"                   # or "adaptive": first runs of new variants, then the repeats that settle verdicts
futility = false                  # stop an evaluation early at k = 4 or 8 of 12 when it cannot beat the baseline
auto_repeat = false               # adaptive: the worker may queue extra repeats of undecided candidates
                                  #   (after the chains you queued; auto_repeat_first = true: before them)
# auto_repeat_max = 6             # cap the chains auto-repeat queues per worker run [default: no cap]
try_every_variant = false         # adaptive: first runs of every queued variant before any repeat (off: an idea
                                  #   may stay untried when its runs would settle more on the leaders)
objective = "submission"          # adaptive: bet on the submission (`advise`'s ranking), or "verdicts": hold the
                                  #   ideas tried to what the session can settle (with auto_repeat_first = true)
# train_minutes = 19              # durations before any history [default: the profile's]
# eval_minutes = 27

# Stage command templates. Placeholders are substituted shell-quoted, so write them bare (never
# inside '...', "...", a here-document or an eval: refused):
# {{chain_id}} {{variant}} {{seed}} {{run_dir}} {{stage_dir}} {{code_dir}} {{recipe_env}} {{recipe_json}}
# {{checkpoint}} {{num_problems}} {{k}} (eval) {{grad_accum}} (train) {{gpus}} {{num_gpus}} {{python}} {{profile}}.
# Write {{{{ and }}}} for literal braces. A `queue --partial 15x4` chain's eval also gets NUM_PROBLEMS=15 VAL_N=4.
# Each stage runs in its own process group with cwd = the code snapshot, its output in
# runs/<chain_id>/<stage>.log, and OPSD_<KNOB> variables for every recipe knob.
[stages.train]
command = "{cmds["train"]}"
checkpoint = "{DEFAULT_CHECKPOINT}"   # must exist when the stage exits 0
# gpus = 4                        # this stage's GPUs [default: gpus_per_chain]; {{num_gpus}} and {{gpus}} say them
{recipe_env}
                                  #   (relative to the chain's code snapshot; what was there is put back after)
# timeout_minutes = 40
# After each train stage its log is compared with the recipe: the learning rate and schedule of the
# HF dict lines, [modes] teacher_thinking=... lines; a value that differs fails the chain, and a log
# that shows none of them makes `show` say "not verified".
# [stages.train.expect]           # more: knob = 'regex with one (group)' matching the value in the log
# lora_r = 'lora_r=(\\d+)'

[stages.eval]                     # score: <stage_dir>/result.json, else the log's last FINAL line
command = "{cmds["eval"]}"
# timeout_minutes = 60
# gpus = 1                        # e.g. each evaluation on one GPU while a train stage takes four
# prestart = true                 # start it while training runs; it imports, then waits for the go on
                                  #   OPSD_GO_FD [default: on for the built-in evaluator, off for your own]

[baseline]
variant = "baseline"              # the variant every other one is compared with
{reference}
# The published mean may not be your setup's: reference.offset_sd (default 1.0 point) is the sd
# of that offset, added to every verdict against it; one or two local baseline runs remove most of it.

[compare]
family = "all"                    # verdicts correct over every candidate tried in the store; or
                                  #   "since:2025-06-01" (queued since then), or ["a", "b", ...]

[host]                            # what one chain's processes take from this machine: the worker refuses to
# ram_gib_per_chain = 16          #   run more chains at once than its RAM and CPUs hold (0 = no check)
# cpus_per_chain = 2              #   [default: the profile's, measured in docs/benchmarks.md]

[queue]                           # how repeats are seeded; `queue --seed S`, --same-seed, --seed-per-repeat override
{seeding}

[worker]
poll_seconds = 2                  # how often an idle worker looks for queued chains
kill_grace_seconds = 15           # TERM, then KILL after this long, when stopping a stage
'''
