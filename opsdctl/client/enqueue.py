"""`opsdctl queue`: recipes -> variants (by content hash) -> queued chains, with a code snapshot.

Everything that can be wrong with the input (config, recipe files, names, versions) is found
before the store is written; the store write is one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional, Sequence

from opsdctl.config import Config, export_path
from opsdctl.errors import UserError
from opsdctl.recipes import partial
from opsdctl.fsutil import unwritable_dir
from opsdctl.recipes.load import Recipe, load_recipe, load_recipe_env
from opsdctl.recipes.profiles import get_profile
from opsdctl.daemon import disk_reserve, frozen_stages
from opsdctl.identity import snapshot as snap
from opsdctl.daemon.env_errors import environment_problem
from opsdctl.identity.snapshot_lock import snapshot_lock
from opsdctl.store import chain_rows
from opsdctl.store.engine import Store, get_chain, next_repeat, next_seq, variants_named
from opsdctl.store.models import Chain, CodeSnapshot, Variant, variant_label
from opsdctl.store.open_read import open_reader
from opsdctl.store.states import State


@dataclass(frozen=True)
class QueuedChain:
    chain_id: int
    variant: str
    seed: int
    repeat: int
    partial: Optional[dict] = None  # {"num_problems", "k"} of a partial eval, None = full
    eval_only: bool = False
    checkpoint: Optional[str] = None  # what an eval-only chain evaluates
    eval_draw: int = 0  # a re-eval's draw of fresh samples (0: a checkpoint's first eval)

    def to_json(self) -> dict:
        return {"chain_id": self.chain_id, "variant": self.variant, "seed": self.seed, "repeat": self.repeat,
                "partial": self.partial, "eval_only": self.eval_only, "checkpoint": self.checkpoint,
                "eval_draw": self.eval_draw}

    @classmethod
    def of(cls, chain: Chain, variant: Variant) -> "QueuedChain":
        return cls(chain.id, variant.label, chain.seed, chain.repeat, partial.of_chain(chain).to_json(),
                   bool(chain.eval_only), chain.checkpoint, int(chain.eval_draw or 0))


@dataclass(frozen=True)
class QueueResult:
    chains: list[QueuedChain]
    notes: list[str]  # e.g. "token-clip: new version 2 (content changed)"
    snapshot: snap.Snapshot
    warnings: list[str] = field(default_factory=list)  # e.g. a snapshot that stored 300 MB


def never_snapshotted(cfg: Config) -> list[Path]:
    """Paths a code snapshot must never contain, so that neither they nor their changes enter
    a chain's code identity: the runs dir, the store file and its sidecars, and the control
    plane's own inputs and outputs (opsdctl.toml, the recipes dir, the budget countdown file,
    the auto-exported recipe.env, the file recipe_env_path overwrites for each train). Editing
    the config, adding a recipe or a timer tick must not split one candidate into two."""
    out = [cfg.runs_dir, cfg.recipes_dir]
    if cfg.path is not None:
        out.append(cfg.path)
    if cfg.budget.remaining_file is not None:
        out.append(cfg.budget.remaining_file)
    exported = export_path(cfg)
    if exported is not None:
        out.append(exported)
    rel = cfg.section("stages.train").get("recipe_env_path")
    if rel:  # the variant's recipe.env replaces it for every train: its own content never runs
        out.append(cfg.code_dir / rel)
    if cfg.db.startswith("sqlite"):
        from sqlalchemy.engine import make_url

        db = Path(make_url(cfg.db).database)
        out += [db] + [Path(str(db) + s) for s in ("-wal", "-shm", "-journal", ".worker.lock", ".init.lock", disk_reserve.SUFFIX)]
    return out


def snapshot_globs(cfg: Config) -> list[str]:
    """The `[snapshot] exclude` globs, and the countdown's own directory: a countdown that rewrites
    atomically leaves `remaining_secs.tmp` (and `elapsed_secs`) beside its file, and a snapshot
    that caught one would split a candidate's code identity. At code_dir's top, its siblings
    named after it (`remaining_secs.tmp`, `.remaining_secs.XXXX`) are left out instead."""
    globs = list(cfg.section("snapshot").get("exclude") or [])
    remaining = cfg.budget.remaining_file
    if remaining is not None:
        try:
            rel = remaining.resolve().relative_to(cfg.code_dir.resolve())
        except ValueError:
            return globs  # outside code_dir: nothing of it can enter a snapshot
        if rel.parent != Path("."):
            globs.append("/" + rel.parent.as_posix() + "/")
        else:
            globs += ["/" + _glob_literal(rel.name) + "*", "/." + _glob_literal(rel.name) + "*"]
    return globs


def _glob_literal(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def queue_recipes(
    cfg: Config,
    store_factory,
    refs: Sequence[str],
    *,
    repeats: int = 1,
    seed: int = 0,
    same_seed: bool = False,
    priority: int = 0,
    force: bool = False,
    partial_spec: Optional[str] = None,
    env_file: Optional[str] = None,
    env_name: Optional[str] = None,
) -> QueueResult:
    """`env_file` (`queue --env FILE [--name N]`): a recipe.env queued as one more recipe."""
    if not refs and env_file is None:
        raise UserError("queue: name at least one recipe (a path, or a name under recipes/), or give "
                        "--env RECIPE_ENV or --eval-only CHECKPOINT_DIR|base")
    if repeats < 1:
        raise UserError(f"--repeats {repeats}: must be at least 1")
    setting = partial.parse(partial_spec, get_profile(cfg.profile))
    # 1. Validate every recipe before anything is written.
    recipes: list[Recipe] = []
    for ref in refs:
        recipes.append(load_recipe(ref, cfg.recipes_dir, cfg.extra_method_knobs))
    if env_file is not None:
        recipes.append(load_recipe_env(env_file, env_name))
    names = [r.name for r in recipes]
    for r in recipes:
        if names.count(r.name) > 1 and len({x.hash for x in recipes if x.name == r.name}) > 1:
            raise UserError(f"queue: two different recipes are both named {r.name!r}; rename one")
    # 2. A name already recorded with other content is refused before any work (checked again,
    #    race-free, inside the write transaction).
    store: Store = store_factory()
    if not force:
        reader = open_reader(store)
        for recipe in recipes:
            versions = reader.variants_named(recipe.name)
            if versions and all(v.hash != recipe.hash for v in versions):
                _refuse_changed(versions[-1], recipe)
    # 3. Freeze the code (outside the store transaction: git can take a moment), under the lock
    #    that keeps `opsdctl gc` from removing the snapshot before its chains are recorded.
    #    The worker writes every chain's logs under runs_dir: refuse now if it cannot.
    why = unwritable_dir(cfg.runs_dir)
    if why is not None:
        raise UserError(f"{cfg.where}: runs_dir {cfg.runs_dir}: cannot write there ({why}); "
                        "point runs_dir at a writable directory")
    with snapshot_lock(cfg.runs_dir):
        frozen = _freeze(cfg)
        # 4. One transaction: variants, snapshot row, chains.
        return _record_queue(cfg, store, recipes, frozen, repeats=repeats, seed=seed, same_seed=same_seed,
                             priority=priority, force=force, setting=setting)


def _freeze(cfg: Config) -> snap.Snapshot:
    try:
        return snap.take(cfg.code_dir, cfg.runs_dir, exclude=never_snapshotted(cfg), enabled=cfg.snapshot_code,
                         patterns=snapshot_globs(cfg))
    except OSError as exc:  # a full disk under runs_dir, say: one line, nothing queued
        problem = environment_problem(exc)
        if problem is None:
            raise
        raise UserError(f"queue: could not freeze the code into {cfg.runs_dir}: {problem}; nothing was queued") from None


def _record_queue(cfg: Config, store: Store, recipes: list[Recipe], frozen: snap.Snapshot, *, repeats: int,
                  seed: int, same_seed: bool, priority: int, force: bool,
                  setting: partial.EvalSetting = partial.FULL) -> QueueResult:
    notes: list[str] = []
    out: list[QueuedChain] = []
    spec = frozen_stages.spec_of(cfg)  # the stage settings these chains will run with
    spec_hash = frozen_stages.commands_hash(spec)
    with store.write() as session:
        snapshot_row = _snapshot_row(session, frozen)
        runs = chain_rows.Frozen(cfg.profile, snapshot_row.id, frozen.path, spec, spec_hash)
        seen: dict[str, Variant] = {}
        for recipe in recipes:
            variant = seen.get(recipe.hash) or _register_variant(session, recipe, force, notes)
            if recipe.hash not in seen and (twin := twin_note(session, variant)):
                notes.append(twin)
            seen[recipe.hash] = variant
            first = next_repeat(session, variant.id)
            seq = next_seq(session)
            for i in range(repeats):
                repeat = first + i
                chain = chain_rows.training(session, variant.id, runs, seed=seed if same_seed else seed + repeat,
                                            repeat=repeat, priority=priority, seq=seq + i,
                                            eval_problems=setting.problems, eval_k=setting.k)
                out.append(QueuedChain.of(chain, variant))
        if setting.partial:
            base = _baseline_partial(cfg, session, recipes, setting, snapshot_row=snapshot_row, code_dir=frozen.path,
                                     spec=spec, spec_hash=spec_hash, seed=seed)
            if base is not None:
                out.append(base)
                notes.append(f"queued chain {base.chain_id}: {base.variant} with the same {setting.text()} eval, so "
                             "the screen is read against the baseline on the same problems (once per setting)")
    return QueueResult(out, notes, frozen, snapshot_warnings(cfg, frozen))


def _baseline_partial(cfg: Config, session, recipes: list[Recipe], setting: partial.EvalSetting, *, snapshot_row,
                      code_dir: str, spec: dict, spec_hash: str, seed: int) -> Optional[QueuedChain]:
    """One chain of the baseline with this partial eval, when the baseline has a variant in the store,
    is not among the recipes queued, and has never had a chain with this setting. It runs on the
    code of the baseline's latest chain (its own code), else on the code frozen now."""
    from sqlalchemy import select

    name = (cfg.baseline_variant or "").split("@")[0]
    versions = variants_named(session, name) if name else []
    if not versions or any(r.name == name for r in recipes):
        return None
    ids = [v.id for v in versions]
    chains = list(session.scalars(select(Chain).where(Chain.variant_id.in_(ids)).order_by(Chain.id)))
    if any(c.eval_problems == setting.problems and c.eval_k == setting.k for c in chains):
        return None
    variant = versions[-1]
    last = next((c for c in reversed(chains) if c.variant_id == variant.id and not c.eval_only), None)
    runs = (replace(chain_rows.Frozen.of(last), profile=cfg.profile) if last is not None
            else chain_rows.Frozen(cfg.profile, snapshot_row.id, code_dir, spec, spec_hash))
    chain = chain_rows.training(session, variant.id, runs, seed=seed, repeat=next_repeat(session, variant.id),
                                priority=0, eval_problems=setting.problems, eval_k=setting.k)
    return QueuedChain.of(chain, variant)


def snapshot_warnings(cfg: Config, frozen: snap.Snapshot) -> list[str]:
    """A snapshot that stored more than `snapshot_warn_mib` new MiB: say so, and what was big."""
    limit = cfg.section("").get("snapshot_warn_mib", 100.0) * 2**20
    if not limit or frozen.added_bytes <= limit:
        return []
    big = ", ".join(f"{rel} {_mib(n)}" for n, rel in frozen.largest)
    where = ("each code change materializes the whole git tree" if frozen.kind == "git"
             else "unchanged files are stored once; changed ones again")
    return [f"code snapshot {frozen.key[:12]} stored {_mib(frozen.added_bytes)} of new files (largest: {big}); "
            f"{where}: keep checkpoints and data out of code_dir ({frozen.source_dir}) and run `opsdctl gc` "
            "to remove snapshots no chain needs"]


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB"


def _snapshot_row(session, frozen: snap.Snapshot) -> CodeSnapshot:
    from sqlalchemy import select

    row = session.scalars(
        select(CodeSnapshot).where(
            CodeSnapshot.kind == frozen.kind, CodeSnapshot.key == frozen.key, CodeSnapshot.prefix == frozen.prefix
        )
    ).first()
    if row is not None:
        return row
    row = CodeSnapshot(
        kind=frozen.kind,
        key=frozen.key,
        commit=frozen.commit,
        head=frozen.head,
        dirty=frozen.dirty,
        diffstat=frozen.diffstat,
        source_dir=frozen.source_dir,
        prefix=frozen.prefix,
        path=frozen.path,
    )
    session.add(row)
    session.flush()
    return row


def _register_variant(session, recipe: Recipe, force: bool, notes: list[str]) -> Variant:
    versions = variants_named(session, recipe.name)
    for v in versions:
        if v.hash == recipe.hash:
            return v  # same content: reuse
    if versions and not force:
        _refuse_changed(versions[-1], recipe)
    version = versions[-1].version + 1 if versions else 1
    variant = Variant(
        name=recipe.name,
        version=version,
        hash=recipe.hash,
        description=recipe.description,
        hparams=recipe.hparams,
        method=recipe.method,
        source=str(recipe.path),
    )
    session.add(variant)
    session.flush()
    if version > 1:
        notes.append(f"{recipe.name}: recorded as {variant.label} (content differs from earlier versions)")
    return variant


def twin_note(session, variant: Variant) -> Optional[str]:
    """Queue-time flag for a variant whose knobs equal an older one's under another name: on the
    same code its runs count as that one's (opsdctl.stats.candidates), so say so every time."""
    from sqlalchemy import select

    twin = session.scalars(
        select(Variant).where(Variant.hash == variant.hash, Variant.id != variant.id, Variant.id < variant.id)
        .order_by(Variant.id)
    ).first()
    if twin is None:
        return None
    return (f"{variant.label}: same knobs as {twin.label}; queue it as {twin.label}? On the same code its runs "
            f"count as {twin.label}'s (one candidate in compare); only a code change makes it a candidate of its own")


def _refuse_changed(latest: Variant, recipe: Recipe) -> None:
    raise UserError(
        f"{recipe.path}: variant {latest.label} is already recorded with different content "
        f"({_diff_keys(latest, recipe)}); rename the recipe, or pass --force to record it as "
        f"{variant_label(recipe.name, latest.version + 1)}"
    )


def _diff_keys(old: Variant, recipe: Recipe) -> str:
    diffs = [
        f"{k} {old.hparams.get(k)!r} -> {v!r}" for k, v in recipe.hparams.items() if old.hparams.get(k) != v
    ] + [f"{k} {old.method.get(k)!r} -> {v!r}" for k, v in recipe.method.items() if old.method.get(k) != v]
    diffs += [f"{k} removed" for k in old.method if k not in recipe.method]
    if not diffs:
        return "hash differs"
    return ", ".join(diffs[:3]) + (f", +{len(diffs) - 3} more" if len(diffs) > 3 else "")


def requeue_chain(store: Store, chain_id: int, priority: Optional[int] = None,
                  runs_dir: Optional[Path] = None, current: Optional[Config] = None,
                  recipes_dir: Optional[Path] = None) -> QueuedChain:
    """A fresh queued copy of a finished chain (same variant, seed, repeat and code snapshot);
    `runs_dir` given: under the snapshot lock, so a concurrent `gc` cannot take its code away, and
    refused when that snapshot is gone (the copy would fail), naming the `queue` line that takes a
    fresh one. `current` given (`--current-commands`): the stage settings opsdctl.toml holds now,
    not the ones frozen with the old chain."""
    if runs_dir is not None:
        with snapshot_lock(runs_dir):
            return _requeue(store, chain_id, priority, current, runs_dir, recipes_dir)
    return _requeue(store, chain_id, priority, current, None, recipes_dir)


def _requeue(store: Store, chain_id: int, priority: Optional[int], current: Optional[Config],
             runs_dir: Optional[Path], recipes_dir: Optional[Path]) -> QueuedChain:
    with store.write() as session:
        old = get_chain(session, chain_id)
        if old.state in (State.QUEUED.value, State.RUNNING.value):
            raise UserError(f"chain {chain_id} is {old.state}; only a finished chain can be re-queued")
        code = session.get(CodeSnapshot, old.snapshot_id) if old.snapshot_id is not None and runs_dir else None
        why = snap.gone(code.kind, code.key, code.source_dir, runs_dir) if code is not None else None
        if why is not None:
            again = queue_again(session.get(Variant, old.variant_id), old.seed, recipes_dir)
            raise UserError(f"chain {chain_id}: {why}, and a re-queue runs the same snapshot; queue it again from "
                            f"the code as it is now: `{again}`")
        new = chain_rows.copy(session, old, priority)
        if current is not None:
            take_current_commands(new, old, current)
        return QueuedChain.of(new, session.get(Variant, new.variant_id))


def queue_again(variant: Variant, seed: int, recipes_dir: Optional[Path]) -> str:
    """The `opsdctl queue` line that queues `variant` again at `seed`, with a fresh code snapshot:
    by name when that finds its recipe file, else by the file it was queued from."""
    import shlex

    source = Path(variant.source) if variant.source else None
    if source is not None and source.suffix == ".env":
        what = f"--env {shlex.quote(str(source))} --name {shlex.quote(variant.name)}"
    elif source is None or _finds(variant.name, source, recipes_dir):
        what = shlex.quote(variant.name)
    else:
        what = shlex.quote(str(source))
    return f"opsdctl queue {what} --seed {seed} --same-seed"  # --same-seed: exactly that seed, whatever the repeat


def _finds(name: str, source: Path, recipes_dir: Optional[Path]) -> bool:
    from opsdctl.recipes.load import find_recipe

    if recipes_dir is None:
        return False
    try:
        return find_recipe(name, recipes_dir) == source.resolve()
    except UserError:
        return False


def take_current_commands(new: Chain, old: Chain, cfg: Config) -> None:
    new.stage_spec = frozen_stages.rerun_spec(old.stage_spec, cfg, eval_only=bool(new.eval_only))
    new.commands_hash = frozen_stages.commands_hash(new.stage_spec)
