"""`opsdctl diff CHAIN_A CHAIN_B`: what differs between two chains.

The knobs (every hyper-parameter and method knob), the settings around them (seed, profile,
partial or eval-only), the code each checkpoint was trained with (the two snapshots: a git diff
stat between their trees, or the files that differ between two copies), and the stage commands
each chain ran (with the chain's own paths written back as placeholders, so only real
differences show). Whether the two count as one candidate in compare is said too.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from opsdctl.errors import UserError
from opsdctl.recipes import partial
from opsdctl.identity import snapshot as snap
from opsdctl.stats import candidates
from opsdctl.stats.scores import code_view, training_commands, training_snapshot_ids
from opsdctl.store.reader import Reader

MAX_FILES = 200  # files listed for two copies that differ


def chain_diff(reader: Reader, a: int, b: int, patch: bool = False) -> dict:
    with reader.snapshot():
        ca, cb = reader.get_chain(a), reader.get_chain(b)
        va, vb = reader.variant(ca.variant_id), reader.variant(cb.variant_id)
        trained = training_snapshot_ids(reader, [ca, cb])
        sa, sb = reader.code_snapshot(trained[ca.id]), reader.code_snapshot(trained[cb.id])
        cmds = {}
        for c in (ca, cb):
            rows = reader.stages_of(c.id)
            ckpt = c.checkpoint if c.eval_only else next((st.checkpoint for st in rows if st.name == "train"), None)
            cmds[c.id] = {st.name: _normalized(st.command, c, st, ckpt) for st in rows}
        cmd_ids = training_commands(reader, [ca, cb])
        ia = candidates.identity(va.hash, sa.key if sa else None, cmd_ids[ca.id], kind=va.kind)
        ib = candidates.identity(vb.hash, sb.key if sb else None, cmd_ids[cb.id], kind=vb.kind)
        side = {ca.id: _side(ca, va, sa), cb.id: _side(cb, vb, sb)}
    knobs = _knob_diff(va, vb) if va.kind == vb.kind == "recipe" else []
    knobs_note = None
    if va.kind != "recipe" or vb.kind != "recipe":
        knobs_note = "; ".join(f"chain {c.id} is {_kind_words(v.kind)}" for c, v in ((ca, va), (cb, vb))
                               if v.kind != "recipe") + ": no knobs to compare"
    settings = [{"what": k, "a": side[a][k], "b": side[b][k]} for k in ("seed", "profile", "eval", "eval_only", "checkpoint")
                if side[a][k] != side[b][k]]
    commands = [{"stage": st, "a": cmds[a].get(st), "b": cmds[b].get(st)} for st in ("train", "eval")
                if cmds[a].get(st) != cmds[b].get(st) and cmds[a].get(st) and cmds[b].get(st)]
    return {
        "a": side[a],
        "b": side[b],
        "same_candidate": ia == ib,  # compare pools them (same knobs, code and commands)
        "knobs": knobs,
        "knobs_note": knobs_note,
        "settings": settings,
        "code": _code_diff(sa, sb, patch),
        "commands": commands,
    }


def _side(chain, variant, row) -> dict:
    return {"chain_id": chain.id, "variant": variant.label, "kind": variant.kind, "hash": variant.hash,
            "state": chain.state, "seed": chain.seed, "profile": chain.profile,
            "eval": partial.of_chain(chain).to_json(), "eval_only": bool(chain.eval_only),
            "checkpoint": chain.checkpoint, "code": code_view(row)}


def _knob_diff(va, vb) -> list[dict]:
    out = []
    for section, ha, hb in (("hparams", va.hparams, vb.hparams), ("method", va.method, vb.method)):
        for key in list(dict.fromkeys([*ha, *hb])):
            if ha.get(key) != hb.get(key):
                out.append({"section": section, "knob": key, "a": ha.get(key), "b": hb.get(key)})
    return out


def _kind_words(kind: str) -> str:
    return "the base model" if kind == "base" else "a checkpoint trained outside opsdctl"


def _normalized(command: str, chain, stage, checkpoint=None) -> str:
    """The command with this chain's own values written back as placeholders (the checkpoint and
    paths inside any word; the seed and chain id as whole words), so two chains' commands differ
    only where their templates or settings do."""
    import shlex

    text = command or ""
    if stage.name == "eval" and checkpoint and "/" in checkpoint:  # a path; `base` is matched as a word below
        text = text.replace(checkpoint, "{checkpoint}")
    for path, name in ((str(Path(stage.stage_dir)), "{stage_dir}"), (str(Path(stage.stage_dir).parent), "{run_dir}"),
                       (stage.cwd, "{code_dir}")):
        if path:
            text = text.replace(path, name)
    try:
        words = shlex.split(text)
    except ValueError:
        return text
    values = {str(chain.seed): "{seed}", str(chain.id): "{chain_id}"}
    if stage.name == "eval" and checkpoint and "/" not in checkpoint:
        values[checkpoint] = "{checkpoint}"
    return " ".join(values.get(w, w) for w in words)


def _code_diff(sa, sb, patch: bool) -> dict:
    out = {"same": bool(sa and sb and sa.key == sb.key), "a": code_view(sa), "b": code_view(sb),
           "diffstat": "", "files": [], "patch": None, "note": None}
    if sa is None or sb is None:
        out["note"] = "a chain has no recorded code snapshot"
        return out
    if out["same"]:
        return out
    if sa.kind == "git" and sb.kind == "git":
        return _git_diff(sa, sb, patch, out)
    if sa.kind == "copy" and sb.kind == "copy":
        if patch:  # a content-addressed copy keeps no history to diff against
            out["note"] = ("--patch prints nothing: code_dir is not a git repository, so its snapshots are "
                           "copies without a patch; the files that differ are listed")
        return _copy_diff(sa, sb, out)
    out["note"] = (f"cannot diff a {sa.kind} snapshot with a {sb.kind} one"
                   + ("; snapshot_code = false records no code" if "live" in (sa.kind, sb.kind) else ""))
    return out


def _git_diff(sa, sb, patch: bool, out: dict) -> dict:
    top = None
    for row in (sa, sb):
        if Path(row.source_dir).is_dir():
            top = snap._git_toplevel(Path(row.source_dir))
            if top is not None:
                break
    if top is None:
        out["note"] = f"the repository of {sa.source_dir} is gone: no diff"
        return out
    paths = ["--", sa.prefix] if sa.prefix and sa.prefix == sb.prefix else []
    try:
        stat = snap._git(["diff", "--stat", sa.key, sb.key, *paths], cwd=top).stdout.strip()
        names = snap._git(["diff", "--name-status", sa.key, sb.key, *paths], cwd=top).stdout.splitlines()
        if patch:
            out["patch"] = snap._git(["diff", sa.key, sb.key, *paths], cwd=top).stdout
    except UserError as exc:  # a tree this repository does not hold
        out["note"] = str(exc)
        return out
    lines = stat.splitlines()
    out["diffstat"] = lines[-1].strip() if lines else ""
    out["files"] = [" ".join(n.split()) for n in names][:MAX_FILES]
    return out


def _copy_diff(sa, sb, out: dict) -> dict:
    da, db = Path(sa.path), Path(sb.path)
    if not da.is_dir() or not db.is_dir():
        out["note"] = "a copied snapshot is gone (opsdctl gc?): no diff"
        return out
    fa, fb = _hashes(da), _hashes(db)
    files = ([f"A {p}" for p in sorted(set(fb) - set(fa))] + [f"D {p}" for p in sorted(set(fa) - set(fb))]
             + [f"M {p}" for p in sorted(set(fa) & set(fb)) if fa[p] != fb[p]])
    out["files"] = files[:MAX_FILES]
    out["diffstat"] = f"{len(files)} file{'s' if len(files) != 1 else ''} differ"
    return out


def _hashes(root: Path) -> dict[str, str]:
    return {snap.shown_name(p.relative_to(root).as_posix()): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def identity_words(doc: dict) -> str:
    """One line: do compare's candidates keep them apart, and why."""
    if doc["same_candidate"]:
        return "same candidate: compare pools their runs (same knobs, code and commands)"
    why = [w for w, differs in (("knobs", doc["a"]["hash"] != doc["b"]["hash"]), ("code", not doc["code"]["same"]),
                                ("commands", bool(doc["commands"]))) if differs]
    return "different candidates in compare" + (f" ({', '.join(why)} differ)" if why else "")
