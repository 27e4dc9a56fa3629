"""From the store to the statistics: scored runs as plain records, and one variant's runs.

compare and the planner read runs through here, so both see the same records; `show`, `chain`
and the dashboard read a variant's runs here too. Every read goes through the light reader
(opsdctl.store.reader; `open_reader(store)` for a Store), never an ORM session.
"""

from __future__ import annotations

from collections import namedtuple
from functools import lru_cache
from typing import Optional, Sequence

from opsdctl.recipes import partial
from opsdctl.stats import candidates
from opsdctl.stats.compare import RunRecord
from opsdctl.store import queries
from opsdctl.store.values import variant_label


def run_records(reader, variant_refs: Optional[Sequence[str]] = None, *, pool_code: bool = False,
                baseline: Optional[str] = None) -> list[RunRecord]:
    """Every succeeded, scored chain (of the named variants, when given) as a RunRecord, with the
    candidate it counts for (opsdctl.stats.candidates); `baseline` keeps its label on its runs."""
    return candidate_runs(reader, variant_refs, pool_code=pool_code, baseline=baseline)[0]


def candidate_runs(reader, variant_refs: Optional[Sequence[str]] = None, *, pool_code: bool = False,
                   baseline: Optional[str] = None) -> tuple[list[RunRecord], list[str]]:
    """(records, notes about candidates). Labels come from every scored run of the store, so a
    candidate is named the same whichever variants are asked for. Every evaluation is a record
    (with its train_id and draw): compare pools the evals of one checkpoint into one run
    (opsdctl.stats.reevals)."""
    with reader.snapshot() as r:
        ids = {r.find_variant(ref).id for ref in variant_refs} if variant_refs else None
        rows = _scored_rows(r)
        codes = training_identity(r, [chain for chain, _, _ in rows])
        id_sets = _problem_ids(r, [score for _, _, score in rows])
    runs = [candidates.Run(chain.id, variant.label, _identity(chain, variant, codes, pool_code))
            for chain, variant, _ in rows]
    labels = candidates.assign_labels(runs, prefer=baseline)
    chosen = [(row, run) for row, run in zip(rows, runs) if ids is None or row[1].id in ids]
    counts = _parse_counts([score.counts for (_, _, score), _ in chosen])
    out = [_record(chain, variant, score, labels[run.identity], codes[chain.id][0], id_sets, cts)
           for ((chain, variant, score), run), cts in zip(chosen, counts)]
    kept_runs = [run for _, run in chosen]
    pooled: dict[str, set] = {}
    for (chain, variant, _), run in zip(rows, runs):
        if (ids is None or variant.id in ids) and variant.kind == "recipe":
            pooled.setdefault(variant.label, set()).add(codes[chain.id])
    return out, candidates.notes(kept_runs, labels, pool_code, pooled)


# A scored run's variant, once per variant: a handful of variants behind thousands of runs.
_Variant = namedtuple("_Variant", "id name version hash kind label")


def _scored_rows(r) -> list[tuple]:
    """Succeeded chains with their score as (chain, variant, score), in variant name, version,
    chain id order. Chain and score are one plain row of queries.SCORED_ROWS (no recipe JSON, no
    per-problem JSON: Score.counts holds the counts compactly), so 10,000 runs are 10,000 rows."""
    out, variants = [], {}
    for row in r.rows(queries.SCORED_ROWS):
        v = variants.get(row.variant_id)
        if v is None:
            v = variants[row.variant_id] = _Variant(row.variant_id, row.name, row.version, row.hash, row.kind,
                                                    variant_label(row.name, row.version))
        out.append((row, v, row))
    # scores written around the ORM (bulk inserts) have no compact counts: fill them from problems
    if any(sc.counts is None for _, _, sc in out):
        from opsdctl.store.values import compact_counts

        got = {sid: compact_counts(p) for sid, p in r.tuples(queries.SCORES_WITHOUT_COUNTS)}
        out = [(c, v, sc._replace(counts=got[sc.score_id][0], problem_set=got[sc.score_id][1])
                if sc.score_id in got else sc) for c, v, sc in out]
    return out


def _parse_counts(texts: Sequence[Optional[str]]) -> list[Optional[tuple[int, ...]]]:
    """Each compact "c1,c2,..." as a tuple of ints (None stays None). One json.loads over all of
    them: half the time of an int() per count, which was most of compare's own work at 10,000 runs."""
    import json

    present = [t for t in texts if t]
    parsed = iter(json.loads("[[" + "],[".join(present) + "]]") if present else ())
    return [tuple(next(parsed)) if t else None for t in texts]


def _problem_ids(r, scores) -> dict[str, tuple[str, ...]]:
    """problem_set key -> the problem ids, decoded from one score of each set."""
    out = {}
    for key in {sc.problem_set for sc in scores if sc.problem_set is not None}:
        problems = r.value(queries.PROBLEMS_OF_SET, problem_set=key)
        if problems:
            out[key] = tuple(str(p.get("id", i)) for i, p in enumerate(problems))
    return out


def _trainers(r, chains) -> dict:
    """id -> (id, snapshot_id, commands_hash) of the chains that trained eval-only `chains`."""
    if not any(c.eval_only and c.trained_by for c in chains):
        return {}
    return {row.id: row for row in r.rows(queries.TRAINERS, yes=True)}


def training_identity(r, chains) -> dict[int, tuple[Optional[str], Optional[str]]]:
    """chain id -> (code tree key, commands identity) its checkpoint was trained with (the training
    chain's, for an eval-only chain of a checkpoint this store trained)."""
    trainers = _trainers(r, chains)
    keys = dict(r.tuples(queries.SNAPSHOT_KEYS))
    snaps, cmds = _snapshot_ids(chains, trainers), _commands(chains, trainers)
    return {c.id: (keys.get(snaps[c.id]), cmds[c.id]) for c in chains}


def training_snapshot_ids(r, chains) -> dict[int, Optional[int]]:
    """chain id -> the snapshot row its checkpoint was trained with (see training_identity)."""
    return _snapshot_ids(chains, _trainers(r, chains))


def _snapshot_ids(chains, trainers: dict) -> dict[int, Optional[int]]:
    return {c.id: (trainers[c.trained_by].snapshot_id if c.trained_by in trainers else c.snapshot_id)
            if c.eval_only and c.trained_by else c.snapshot_id for c in chains}


DIFFSTAT_FILES = 3  # file lines of a diff stat that `show` keeps


def code_view(row) -> Optional[dict]:
    """A code snapshot row for `show`: tree and commit, HEAD, dirty flag, a short diff stat."""
    if row is None:
        return None
    lines = [line.strip() for line in (row.diffstat or "").splitlines() if line.strip()]
    files, summary = lines[:-1], (lines[-1] if lines else "")
    short = "; ".join(files[:DIFFSTAT_FILES] + ([f"+{len(files) - DIFFSTAT_FILES} more"] if len(files) > DIFFSTAT_FILES
                                                   else []))
    return {"kind": row.kind, "tree": row.key, "short": candidates.short_code(row.key), "commit": row.commit,
            "head": row.head, "dirty": bool(row.dirty), "diffstat": summary, "files": short, "path": row.path}


def training_commands(r, chains) -> dict[int, Optional[str]]:
    """chain id -> the identity of the stage commands its checkpoint was trained with (the chain's
    frozen `commands_hash`; the training chain's, for an eval-only chain; None for chains queued
    before commands were recorded). `chains`: Chain rows or the plain rows of _scored_rows."""
    return _commands(chains, _trainers(r, chains))


def _commands(chains, trainers: dict) -> dict[int, Optional[str]]:
    return {c.id: (trainers[c.trained_by].commands_hash if c.trained_by in trainers else None)
            if c.eval_only and c.trained_by else c.commands_hash for c in chains}


def _identity(chain, variant, codes, pool_code: bool) -> candidates.Identity:
    code, cmds = codes.get(chain.id, (None, None))
    return _identity_of(variant.hash, code, cmds, variant.kind, pool_code)


@lru_cache(maxsize=4096)
def _identity_of(knob_hash, code, cmds, kind, pool_code) -> candidates.Identity:
    return candidates.identity(knob_hash, code, cmds, kind=kind, pool_code=pool_code)


def candidate_labels(reader, chain_ids: Sequence[int], baseline: Optional[str] = None) -> dict[int, str]:
    """The candidate label of each chain (queued ones too): what the planner matches with compare."""
    wanted_ids = set(chain_ids)
    with reader.snapshot() as r:
        rows = _scored_rows(r)
        # each row is both the chain and its variant (id, eval_only, ..., name, version, hash, kind)
        wanted = [row for row in r.rows(queries.CHAIN_IDENTITIES) if row.id in wanted_ids] if wanted_ids else []
        codes = training_identity(r, [c for c, _, _ in rows] + wanted)
    labels = candidates.assign_labels([candidates.Run(c.id, v.label, _identity(c, v, codes, False)) for c, v, _ in rows],
                                      prefer=baseline)
    return {c.id: candidates.label_for(_identity(c, c, codes, False), c.label, labels) for c in wanted}


def _record(chain, variant, score, candidate: str, code: Optional[str], id_sets: dict,
            counts: Optional[tuple[int, ...]]) -> RunRecord:
    # positional: 10,000 of these per compare (variant, chain_id, score, k, n_problems, counts,
    # problem_ids, partial, candidate, code, train_id, kind, draw)
    return RunRecord(
        variant.label, chain.id, float(score.avg_at_k), int(score.k), int(score.n_problems), counts,
        id_sets.get(score.problem_set) if counts is not None else None,
        # queued --partial, or the evaluator said so (partial.run_is_partial, without building an
        # EvalSetting for each of 10,000 full runs)
        bool(score.partial) or ((chain.eval_problems is not None or chain.eval_k is not None)
                                and partial.run_is_partial(chain, score)),
        candidate, None if variant.kind != "recipe" else candidates.short_code(code), chain.trained_by or chain.id,
        variant.kind, int(chain.eval_draw or 0),
    )


def show_doc(reader, ref: str) -> dict:
    """One variant: its recipe and every chain with score, per-problem counts and train stats."""
    with reader.snapshot() as r:
        v = r.find_variant(ref)
        runs = run_views(r, r.chains_of_variant(v.id))
    return {"variant": v.label, "name": v.name, "version": v.version, "hash": v.hash, "kind": v.kind,
            "description": v.description, "hparams": v.hparams, "method": v.method, "runs": runs}


def run_views(reader, chains) -> list[dict]:
    """Each chain (the reader's records) as `show` lists it: score, per-problem counts, training
    statistics and curve, the recipe check, the code it trained with. The rows are read a table at
    a time, in one snapshot (a variant of a 10,000-chain store has a thousand runs)."""
    with reader.snapshot() as r:
        labels = candidate_labels(r, [c.id for c in chains])
        trained = training_snapshot_ids(r, chains)
        # an eval-only run shows its trainer's training and recipe check
        trainer = {c.id: c.trained_by if c.eval_only and c.trained_by else c.id for c in chains}
        ids = sorted({c.id for c in chains} | set(trainer.values()))
        scores = {x.chain_id: x for x in r.rows_in(queries.SCORES_OF_CHAINS, ids)}
        stats = {x.chain_id: x for x in r.rows_in(queries.TRAIN_STATS_OF_CHAINS, ids)}
        stages: dict[int, list] = {}
        for st in r.rows_in(queries.SHOWN_STAGES_OF_CHAINS, ids):
            stages.setdefault(st.chain_id, []).append(st)
        snap_ids = sorted({i for c in chains for i in (trained.get(c.id), c.snapshot_id) if i is not None})
        snaps = {x.id: x for x in r.rows_in(queries.CODE_SNAPSHOTS, snap_ids)}
    runs = []
    for chain in chains:
        score = scores.get(chain.id)
        ts = stats.get(trainer[chain.id])
        train = next((st for st in stages.get(trainer[chain.id], []) if st.name == "train"), None)
        runs.append({
            "chain_id": chain.id, "seed": chain.seed, "repeat": chain.repeat, "state": chain.state,
            "reason": chain.reason,
            "score": None if score is None else round(score.avg_at_k, 4),
            "k": score.k if score else None,
            "n_problems": score.n_problems if score else None,
            "partial": partial.run_is_partial(chain, score),
            "eval": partial.of_chain(chain).to_json(),  # {"num_problems", "k"} asked for; None = full
            "eval_only": bool(chain.eval_only),
            "checkpoint": chain.checkpoint,
            "trained_by": chain.trained_by,
            "eval_draw": int(chain.eval_draw or 0),  # a re-eval's fresh samples: 1, 2, ... (pooled by compare)
            "candidate": labels.get(chain.id),
            # the code its checkpoint was trained with; an eval-only chain's own code runs the eval
            "code": code_view(snaps.get(trained.get(chain.id))),
            "eval_code": code_view(snaps.get(chain.snapshot_id)) if trained.get(chain.id) != chain.snapshot_id
            else None,
            "problems": score.problems if score else None,
            # NVML, sampled by the worker: {"train": {peak_mib, util_pct, attribution, ...}, "eval": ...}
            "gpu": {st.name: {**(st.gpu or {}), "peak_mib": st.gpu_peak_mib, "util_pct": st.gpu_util_pct}
                    for st in stages.get(chain.id, []) if st.gpu_peak_mib is not None},
            "recipe_check": _recipe_check(train),
            "commands_hash": chain.commands_hash,
            "train": None if ts is None else {
                "final_loss": ts.final_loss, "mean_kl": ts.mean_kl, "frac_clipped": ts.frac_clipped,
                "step_seconds": ts.step_seconds, "rollout_seconds": ts.rollout_seconds,
                "peak_mem_mib": ts.peak_mem_mib, "steps": ts.steps,
                "metrics": ts.metrics or {},  # [stages.train.metrics]: name -> {mean, last, steps}
                "curve": ts.curve or [],  # per logged step: loss, kl, frac_clipped, learning_rate, ...
            },
        })
    return runs


def _recipe_check(train) -> Optional[dict]:
    """What the train log showed of the recipe; None while it has not trained."""
    if train is None or train.state == "running":
        return None
    if train.recipe_check:
        return train.recipe_check
    return {"status": "not verified", "checked": [], "reason": None,
            "unchecked": ["no effective-config check ran on this train stage"]}
