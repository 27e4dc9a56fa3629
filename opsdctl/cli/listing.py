"""Small read-only views: variants, recipe files, chain logs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional, TextIO

from opsdctl.config import Config
from opsdctl.errors import UserError
from opsdctl.recipes import knobs, partial
from opsdctl.recipes.load import load_recipe, shipped_recipes_dir
from opsdctl.store.engine import (
    Store,
    all_variants,
    chains_of_variant,
    get_chain,
    score_of,
    stage_of,
    stages_of,
)
from opsdctl.store.states import State


def recipe_changes(hparams: dict, method: dict) -> dict:
    """Knobs that differ from the released recipe (knobs.py defaults)."""
    dh, dm = knobs.default_hparams(), knobs.default_method()
    out = {k: v for k, v in hparams.items() if dh.get(k) != v}
    out.update({k: v for k, v in method.items() if dm.get(k, object()) != v})
    return out


def list_variants(store: Store) -> list[dict]:
    rows = []
    with store.read() as s:
        for v in all_variants(s):
            chains = chains_of_variant(s, v.id)
            scored = [(c, score_of(s, c.id)) for c in chains if c.state == State.SUCCEEDED.value]
            scored = [(c, x) for c, x in scored if x is not None]
            scores = [x.avg_at_k for c, x in scored if not partial.run_is_partial(c, x)]
            partial_scores = [{"chain_id": c.id, "score": x.avg_at_k, "n_problems": x.n_problems, "k": x.k}
                              for c, x in scored if partial.run_is_partial(c, x)]
            rows.append({
                "name": v.name,
                "version": v.version,
                "variant": v.label,
                "hash": v.hash,
                "description": v.description,
                "changes": recipe_changes(v.hparams, v.method),
                "chains": len(chains),
                "succeeded": sum(c.state == State.SUCCEEDED.value for c in chains),
                "queued": sum(c.state == State.QUEUED.value for c in chains),
                "scores": scores,  # full evaluations only
                "partial_scores": partial_scores,  # screening runs, kept apart
                "kind": v.kind,
                "source": v.source,
            })
    return rows


def list_recipes(cfg: Config) -> list[dict]:
    dirs = [cfg.recipes_dir]
    shipped = shipped_recipes_dir()
    if shipped is not None and shipped.resolve() != cfg.recipes_dir.resolve():
        dirs.append(shipped)
    seen = set()
    rows = []
    for d in dirs:
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.toml")):
            if path.stem in seen:
                continue  # a local recipe shadows a shipped one of the same name
            seen.add(path.stem)
            row = {"file": str(path), "shipped": d != cfg.recipes_dir}
            try:
                r = load_recipe(str(path), cfg.recipes_dir, cfg.extra_method_knobs)
                row.update(name=r.name, hash=r.hash, description=r.description,
                           extends=[p.stem for p in r.lineage[1:]], changes=recipe_changes(r.hparams, r.method), error=None)
            except UserError as exc:
                row.update(name=path.stem, hash=None, description="", extends=[], changes={}, error=str(exc))
            rows.append(row)
    return rows


def _pick_stage(s, chain_id: int, stage: Optional[str]):
    chain = get_chain(s, chain_id)
    if stage is not None:
        if stage not in ("train", "eval"):
            raise UserError(f"--stage {stage!r}: must be train or eval")
        row = stage_of(s, chain_id, stage)
        if row is None:
            raise UserError(f"chain {chain_id} has no {stage} stage yet (it is {chain.state})")
        return row
    rows = stages_of(s, chain_id)
    if not rows:
        raise UserError(f"chain {chain_id} has not started yet (it is {chain.state}); no log")
    return rows[-1]


def stage_log(store: Store, chain_id: int, stage: Optional[str], lines: int) -> tuple[Path, str]:
    with store.read() as s:
        row = _pick_stage(s, chain_id, stage)
    path = Path(row.log_path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise UserError(f"chain {chain_id}: log {path} is missing") from None
    if lines:
        text = "".join(text.splitlines(keepends=True)[-lines:])
    return path, text


def follow_log(store: Store, chain_id: int, path: Path, out: TextIO, poll: float = 0.5) -> None:
    """Print what is appended to `path` until the chain's stage using it ends."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        while True:
            chunk = f.read()
            if chunk:
                out.write(chunk.decode("utf-8", errors="replace"))
                out.flush()
                continue
            with store.read() as s:
                running = [st for st in stages_of(s, chain_id) if st.log_path == str(path) and st.state == "running"]
            if not running:
                rest = f.read()
                if rest:
                    out.write(rest.decode("utf-8", errors="replace"))
                return
            time.sleep(poll)
