"""The read queries of status, compare and the planner, as SQL text: the one place their filters
and orders are written.

Both the light reader (stdlib sqlite3, opsdctl.store.reader) and the ORM functions of
opsdctl.store.engine run these texts (`select(Chain).from_statement(text(QUEUED_CHAINS))`), so the
two can never drift. Plain SQL that SQLite and PostgreSQL both accept, named `:params` only (an
IN-list is a `{ids}` slot that `in_chunks` fills with named parameters), whole rows as `table.*`;
result columns keep the models' names (or a `table_id` alias where a join repeats one), which is
how the reader knows how to decode them.
"""

from __future__ import annotations

from typing import Iterator, Sequence

from opsdctl.store.states import State

IN_CHUNK = 900  # values per IN-list: under SQLite's bound-parameter limit (999 before 3.32)


def in_chunks(sql: str, values: Sequence, chunk: int = IN_CHUNK) -> Iterator[tuple[str, dict]]:
    """(sql with its `{ids}` slot as `:in0, :in1, ...`, those parameters), a chunk of `values` at a
    time; nothing for no values."""
    for start in range(0, len(values), chunk):
        part = values[start:start + chunk]
        names = [f"in{i}" for i in range(len(part))]
        yield sql.format(ids=", ".join(f":{n}" for n in names)), dict(zip(names, part))

_DONE = f"chain.state NOT IN ('{State.QUEUED.value}', '{State.RUNNING.value}')"

# --- chains, stages, scores, variants, the worker: what status shows -----------------------
QUEUED_CHAINS = (f"SELECT chain.* FROM chain WHERE chain.state = '{State.QUEUED.value}' "
                 "ORDER BY chain.priority DESC, chain.seq, chain.id")  # run order
CHAINS_IN_STATE = "SELECT chain.* FROM chain WHERE chain.state = :state ORDER BY chain.id"
FINISHED_CHAINS = (f"SELECT chain.* FROM chain WHERE {_DONE} "
                   "ORDER BY COALESCE(chain.finished_at, chain.queued_at) DESC, chain.id DESC")  # newest first
FINISHED_CHAINS_LIMITED = FINISHED_CHAINS + " LIMIT :limit"
STAGES_OF = "SELECT stage.* FROM stage WHERE stage.chain_id = :chain_id ORDER BY stage.id"
SCORE_OF = "SELECT score.* FROM score WHERE score.chain_id = :chain_id"
ALL_VARIANTS = "SELECT variant.* FROM variant ORDER BY variant.name, variant.version"
VARIANTS_NAMED = "SELECT variant.* FROM variant WHERE variant.name = :name ORDER BY variant.version"
CHAIN = "SELECT chain.* FROM chain WHERE chain.id = :chain_id"
ALL_CHAINS = "SELECT chain.* FROM chain ORDER BY chain.id"  # gc's walk over what is still needed
ALL_SNAPSHOTS = "SELECT code_snapshot.* FROM code_snapshot ORDER BY code_snapshot.id"
ANY_QUEUED = f"SELECT chain.id FROM chain WHERE chain.state = '{State.QUEUED.value}' LIMIT 1"
ACTIVE_CHAIN_IDS = (f"SELECT chain.id FROM chain WHERE chain.state IN ('{State.QUEUED.value}', '{State.RUNNING.value}') "
                    "ORDER BY chain.id")
REQUEUED_AS = ("SELECT chain.* FROM chain WHERE chain.requeued_from = :chain_id "
               "ORDER BY chain.id DESC LIMIT 1")  # the latest re-run of an interrupted chain
CHAINS_OF_VARIANT = "SELECT chain.* FROM chain WHERE chain.variant_id = :variant_id ORDER BY chain.id"
VARIANT = "SELECT variant.* FROM variant WHERE variant.id = :variant_id"
CODE_SNAPSHOT = "SELECT code_snapshot.* FROM code_snapshot WHERE code_snapshot.id = :snapshot_id"
LATEST_WORKER = "SELECT worker_run.* FROM worker_run ORDER BY worker_run.id DESC LIMIT 1"
META_VALUE = "SELECT meta.value FROM meta WHERE meta.key = :key"

# --- the planner's duration history (opsdctl.plan.durations.history) -----------------------
DURATION_HISTORY = (
    "SELECT stage.name, stage.seconds, stage.estimate_seconds, stage.chain_id, chain.profile, chain.variant_id, "
    "chain.eval_problems, chain.eval_k, stage.gpus FROM stage JOIN chain ON chain.id = stage.chain_id "
    "WHERE stage.state = 'succeeded' AND stage.seconds IS NOT NULL ORDER BY stage.id DESC LIMIT :limit"
)
VARIANT_HPARAMS = "SELECT variant.id, variant.hparams FROM variant"

# --- what moves when the worker does something: the dashboard's change feed, notify's looks --
# a transition, a score, a chain, a running stage's progress
STORE_CHANGES = ("SELECT (SELECT max(id) FROM transition), (SELECT count(*) FROM score), "
                 "(SELECT count(*) FROM chain)")
RUNNING_PROGRESS = f"SELECT id, progress FROM stage WHERE state = '{State.RUNNING.value}' ORDER BY id"
SCORE_COUNT = "SELECT count(*) FROM score"

# --- the planner's facts (opsdctl.plan.store_facts, opsdctl.plan.reeval) -------------------
FUTILE_STOPS = ("SELECT chain.id, chain.reason, variant.name, variant.version FROM chain "
                "JOIN variant ON variant.id = chain.variant_id WHERE chain.state = :state ORDER BY chain.id")
LATEST_TRAINING_ID = "SELECT max(chain.id) FROM chain WHERE chain.eval_only = :no"
# succeeded train stages with their chain's frozen stage settings (its eval command)
SUCCEEDED_TRAININGS = ("SELECT chain.id, chain.stage_spec, stage.checkpoint FROM chain "
                       "JOIN stage ON stage.chain_id = chain.id "
                       f"WHERE stage.name = 'train' AND stage.state = '{State.SUCCEEDED.value}'")

# --- compare: scored runs as plain columns (opsdctl.stats.scores) --------------------------
# one row is a run's chain and its score: chain.id as `id`, the score's as `score_id`
SCORED_ROWS = (
    "SELECT chain.id AS id, chain.eval_only, chain.trained_by, chain.eval_draw, chain.snapshot_id, chain.eval_problems, "
    "chain.eval_k, chain.commands_hash, variant.id AS variant_id, variant.name, variant.version, variant.hash, "
    "variant.kind, score.id AS score_id, score.avg_at_k, score.k, score.n_problems, score.partial, score.counts, "
    "score.problem_set FROM chain JOIN variant ON variant.id = chain.variant_id "
    f"JOIN score ON score.chain_id = chain.id WHERE chain.state = '{State.SUCCEEDED.value}' "
    "ORDER BY variant.name, variant.version, chain.id"
)
# scores written around the ORM (bulk inserts) have no compact counts yet
SCORES_WITHOUT_COUNTS = "SELECT score.id, score.problems FROM score WHERE score.counts IS NULL AND score.problems IS NOT NULL"
PROBLEMS_OF_SET = "SELECT score.problems FROM score WHERE score.problem_set = :problem_set LIMIT 1"
SNAPSHOT_KEYS = "SELECT code_snapshot.id, code_snapshot.key FROM code_snapshot"
# the chains that trained an eval-only chain's checkpoint
TRAINERS = ("SELECT chain.id, chain.snapshot_id, chain.commands_hash FROM chain WHERE chain.id IN "
            "(SELECT c.trained_by FROM chain c WHERE c.eval_only = :yes AND c.trained_by IS NOT NULL)")
# every chain with what its candidate identity needs (the planner's candidate labels)
CHAIN_IDENTITIES = (
    "SELECT chain.id, chain.eval_only, chain.trained_by, chain.snapshot_id, chain.commands_hash, variant.name, "
    "variant.version, variant.hash, variant.kind FROM chain JOIN variant ON variant.id = chain.variant_id "
    "ORDER BY chain.id"
)
# variants whose first chain was queued at or after :since (compare --family since:...)
VARIANTS_FIRST_QUEUED_SINCE = (
    "SELECT variant.name, variant.version FROM variant JOIN chain ON chain.variant_id = variant.id "
    "GROUP BY variant.id, variant.name, variant.version HAVING MIN(chain.queued_at) >= :since"
)

# --- compare's training columns (opsdctl.stats.training) -----------------------------------
TRAINED_BY = "SELECT chain.id, chain.trained_by FROM chain WHERE chain.eval_only = :yes AND chain.trained_by IS NOT NULL"
TRAIN_STATS = ("SELECT train_stats.chain_id, train_stats.final_loss, train_stats.mean_kl, train_stats.frac_clipped, "
               "train_stats.step_seconds, train_stats.metrics FROM train_stats")
TRAIN_STAGE_GPU = ("SELECT stage.chain_id, stage.gpu_peak_mib, stage.gpu_util_pct FROM stage "
                   "WHERE stage.name = 'train' ORDER BY stage.id")

# --- show and chain: a variant's runs, a table at a time (opsdctl.stats.scores.run_views) ---------
SCORES_OF_CHAINS = "SELECT score.* FROM score WHERE score.chain_id IN ({ids})"
TRAIN_STATS_OF_CHAINS = "SELECT train_stats.* FROM train_stats WHERE train_stats.chain_id IN ({ids})"
# only the stage columns shown: a stage's progress, pids and command are not decoded
SHOWN_STAGES_OF_CHAINS = ("SELECT stage.id, stage.chain_id, stage.name, stage.state, stage.gpu, stage.gpu_peak_mib, "
                          "stage.gpu_util_pct, stage.recipe_check FROM stage WHERE stage.chain_id IN ({ids}) "
                          "ORDER BY stage.id")
CODE_SNAPSHOTS = "SELECT code_snapshot.* FROM code_snapshot WHERE code_snapshot.id IN ({ids})"
