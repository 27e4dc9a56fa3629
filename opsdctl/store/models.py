"""The store's tables (SQLModel, so the same code runs on SQLite and PostgreSQL).

Variant  a resolved recipe, identified by its content hash; unique on (name, version).
Chain    one train -> eval run of a variant at a seed; the unit that is queued, run, scored.
Stage    one stage process of a chain: command, process identity, timings, result location.
Score    an evaluation's result (avg@k in points 0-100, per-problem counts when known).
TrainStats  what the train stage reported (loss, KL, clipping, timings, memory, curve).
CodeSnapshot  the code state a chain runs (git tree or content-addressed copy).
WorkerRun  one worker process's life (pid, heartbeat, budget clock), for `status`.
Transition  every chain state change, with its reason: the audit trail.
Meta     small key/value facts (budget clock start).
Outbox   events for [notify] hooks, written with the change they report; the worker drains it.

The schema is versioned by Alembic (opsdctl/store/migrations/): a change here needs a new revision
there (`python -m opsdctl.store.migrations revision -m ...`); tests/integration/test_store_migrations.py checks.

No `from __future__ import annotations` here: SQLModel reads the annotations at class creation.
"""

from datetime import datetime, timezone
from typing import Optional

from sqlalchemy import JSON, Column, DateTime, Text, UniqueConstraint, event
from sqlalchemy import false as sa_false
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

from opsdctl.store.values import as_utc
from opsdctl.store.values import compact_counts, iso, seconds_since, utcnow, variant_label  # noqa: F401 (re-exported)


class UTCDateTime(TypeDecorator):
    """Aware datetimes in, aware UTC datetimes out, on every database (SQLite keeps no zone:
    it stores naive UTC; PostgreSQL stores timestamptz)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is None:
            return None
        if value.utcoffset() is None:
            raise ValueError("store datetimes must be timezone-aware (use models.utcnow())")
        value = value.astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value, dialect):
        if value is None:
            return None
        return as_utc(value)


class Variant(SQLModel, table=True):
    __tablename__ = "variant"
    __table_args__ = (UniqueConstraint("name", "version", name="uq_variant_name_version"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    name: str = Field(index=True)
    version: int = 1
    hash: str = Field(index=True)
    description: str = ""
    hparams: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    method: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    source: str = ""  # the recipe file it was queued from
    # "recipe": knobs from a recipe file; "checkpoint": a checkpoint trained outside opsdctl and
    # "base": the untrained base model (eval-only chains; no knobs, nothing to export)
    kind: str = Field(default="recipe", sa_column_kwargs={"server_default": "recipe"})
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)

    @property
    def label(self) -> str:
        return variant_label(self.name, self.version)


class CodeSnapshot(SQLModel, table=True):
    __tablename__ = "code_snapshot"
    __table_args__ = (UniqueConstraint("kind", "key", "prefix", name="uq_snapshot_kind_key"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    kind: str  # "git" | "copy" | "live"
    key: str  # git tree id | sha256 of the copied files | the live code_dir
    commit: Optional[str] = None  # snapshot commit (git), kept alive under refs/opsdctl/
    head: Optional[str] = None  # HEAD at queue time (git)
    dirty: bool = False  # working tree differed from HEAD
    diffstat: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    source_dir: str = ""  # the code_dir it was taken from
    prefix: str = ""  # code_dir relative to the repository root (git)
    path: str = ""  # materialized copy the stages run in
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class Chain(SQLModel, table=True):
    __tablename__ = "chain"

    id: Optional[int] = Field(default=None, primary_key=True)
    variant_id: int = Field(foreign_key="variant.id", index=True)
    seed: int = 0
    repeat: int = 0
    priority: int = 0
    seq: int = 0  # queue order; a re-queued chain keeps its original's
    state: str = Field(default="queued", index=True)
    stage: Optional[str] = None  # current or last stage
    reason: Optional[str] = None
    profile: str = ""
    snapshot_id: Optional[int] = Field(default=None, foreign_key="code_snapshot.id")
    code_dir: str = ""
    requeued_from: Optional[int] = Field(default=None, foreign_key="chain.id")
    worker_pid: Optional[int] = None  # the worker that claimed it ...
    worker_host: Optional[str] = None  # ... and where it runs
    node_id: Optional[str] = None  # the Ray node its stages run on (executor = "ray"), else None
    # A partial evaluation (`queue --partial 15x4`): problems x samples; None = the full protocol.
    eval_problems: Optional[int] = None
    eval_k: Optional[int] = None
    # An eval-only chain (`queue --eval-only`, `requeue --eval-only`): no train stage; it evaluates
    # `checkpoint` ("base" = the base model), trained by chain `trained_by` when opsdctl trained it.
    eval_only: bool = Field(default=False, sa_column_kwargs={"server_default": sa_false()})
    checkpoint: Optional[str] = None
    trained_by: Optional[int] = None  # a chain id (no FK: adding one would copy the referenced table on SQLite)
    # Which fresh draw of eval samples this evaluation is: 0 for a chain's own eval; a re-eval of a
    # scored checkpoint takes the next number and the evaluator seeds its samples from it, so
    # compare averages the evals of one checkpoint (one training) as one run.
    eval_draw: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    # The stage settings frozen at queue time (opsdctl/daemon/frozen_stages.py), and the sha256 of
    # what decides what runs (commands, checkpoint template, recipe_env_path): compare's code
    # identity. NULL for chains queued before they were recorded.
    stage_spec: Optional[dict] = Field(default=None, sa_column=Column(JSON(none_as_null=True), nullable=True))
    commands_hash: Optional[str] = None
    queued_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    started_at: Optional[datetime] = Field(default=None, sa_type=UTCDateTime)
    finished_at: Optional[datetime] = Field(default=None, sa_type=UTCDateTime)


class Stage(SQLModel, table=True):
    __tablename__ = "stage"
    __table_args__ = (UniqueConstraint("chain_id", "name", name="uq_stage_chain_name"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    chain_id: int = Field(foreign_key="chain.id", index=True)
    name: str  # "train" | "eval"
    state: str = "running"
    command: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    cwd: str = ""
    token: str = ""  # OPSDCTL_STAGE_TOKEN in the stage's environment: proves a process is ours
    host: str = ""
    pid: Optional[int] = None
    pgid: Optional[int] = None
    create_time: Optional[float] = None  # the leader's start time (psutil), guards pid reuse
    gpus: str = ""
    log_path: str = ""
    stage_dir: str = ""
    checkpoint: Optional[str] = None
    started_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    finished_at: Optional[datetime] = Field(default=None, sa_type=UTCDateTime)
    exit_code: Optional[int] = None
    estimate_seconds: Optional[float] = None  # filled by the planner
    seconds: Optional[float] = None  # actual
    reason: Optional[str] = None
    progress: Optional[dict] = Field(default=None, sa_column=Column(JSON(none_as_null=True), nullable=True))
    pids: Optional[list] = Field(default=None, sa_column=Column(JSON(none_as_null=True), nullable=True))
    # NVML, sampled by the worker on the granted GPUs (opsdctl/daemon/gpu_sampler.py); None without GPUs
    gpu_peak_mib: Optional[float] = None  # the most memory the stage held on one of its GPUs
    gpu_util_pct: Optional[float] = None  # mean device utilisation of its GPUs while it ran
    gpu: Optional[dict] = Field(default=None, sa_column=Column(JSON(none_as_null=True), nullable=True))
    # train: did the log show the recipe was applied (opsdctl/contract/effective_config.py)
    recipe_check: Optional[dict] = Field(default=None, sa_column=Column(JSON(none_as_null=True), nullable=True))


class Score(SQLModel, table=True):
    __tablename__ = "score"

    id: Optional[int] = Field(default=None, primary_key=True)
    chain_id: int = Field(foreign_key="chain.id", index=True, unique=True)
    k: int
    avg_at_k: float  # points, 0-100
    n_problems: int
    n_correct: Optional[int] = None  # solutions correct (of n_problems * k)
    n_samples: Optional[int] = None
    problems: Optional[list] = Field(default=None, sa_column=Column(JSON(none_as_null=True), nullable=True))
    partial: bool = False
    seconds: Optional[float] = None
    source: str = "result.json"  # "result.json" | "final-line" | "progress"
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    # `problems` in the compact form the statistics read (filled on insert/update, see below):
    # the correct counts in problem order ("7,12,0,..."), and a key of the problem ids, so that
    # compare over 10,000 runs decodes neither 10,000 JSON documents nor their ids.
    counts: Optional[str] = Field(default=None, sa_column=Column(Text, nullable=True))
    problem_set: Optional[str] = None


@event.listens_for(Score, "before_insert")
@event.listens_for(Score, "before_update")
def _fill_counts(_mapper, _connection, target: Score) -> None:
    target.counts, target.problem_set = compact_counts(target.problems)


class TrainStats(SQLModel, table=True):
    __tablename__ = "train_stats"

    id: Optional[int] = Field(default=None, primary_key=True)
    chain_id: int = Field(foreign_key="chain.id", index=True, unique=True)
    steps: Optional[int] = None
    final_loss: Optional[float] = None
    mean_kl: Optional[float] = None
    frac_clipped: Optional[float] = None
    step_seconds: Optional[float] = None  # mean per optimizer step
    rollout_seconds: Optional[float] = None  # mean per rollout
    peak_mem_mib: Optional[float] = None
    train_runtime: Optional[float] = None
    curve: Optional[list] = Field(default=None, sa_column=Column(JSON(none_as_null=True), nullable=True))
    source: str = ""  # "train_result.json+metrics.jsonl" | "log"
    metrics: Optional[dict] = Field(default=None, sa_column=Column(JSON(none_as_null=True), nullable=True))


class WorkerRun(SQLModel, table=True):
    __tablename__ = "worker_run"

    id: Optional[int] = Field(default=None, primary_key=True)
    pid: int
    host: str = ""
    create_time: Optional[float] = None
    started_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    heartbeat_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    stopped_at: Optional[datetime] = Field(default=None, sa_type=UTCDateTime)
    exit_reason: Optional[str] = None
    activity: str = ""  # what it is doing now, for `status`
    drain: bool = False


class Transition(SQLModel, table=True):
    __tablename__ = "transition"

    id: Optional[int] = Field(default=None, primary_key=True)
    chain_id: int = Field(foreign_key="chain.id", index=True)
    at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    from_state: str
    to_state: str
    reason: Optional[str] = None


class Outbox(SQLModel, table=True):
    """One event for the [notify] hooks. `key` names the event itself (e.g. chain 7 failed), so
    recording it twice keeps one row; `sent_at` set means delivered (or given up, with `error`)."""

    __tablename__ = "outbox"
    __table_args__ = (UniqueConstraint("key", name="uq_outbox_key"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    key: str
    kind: str  # opsdctl.store.outbox.EventKind
    payload: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    sent_at: Optional[datetime] = Field(default=None, sa_type=UTCDateTime, index=True)
    error: Optional[str] = None


class Meta(SQLModel, table=True):
    __tablename__ = "meta"

    key: str = Field(primary_key=True)
    value: str = ""
