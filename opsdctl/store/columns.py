"""Which store columns need decoding, for the light reader (opsdctl.store.reader), which does not
import the SQLModel models: a mirror of opsdctl/store/models.py that tests/unit/store/test_reader.py
checks against them.

The reader decodes a result column by its name, so a name means one kind in every table (that
test checks this too). Other columns (ints, floats, text) arrive as the drivers give them.
"""

from __future__ import annotations

JSON_COLUMNS = {
    "variant": ("hparams", "method"),
    "chain": ("stage_spec",),
    "stage": ("progress", "pids", "gpu", "recipe_check"),
    "score": ("problems",),
    "train_stats": ("curve", "metrics"),
    "outbox": ("payload",),
}
DATETIME_COLUMNS = {
    "variant": ("created_at",),
    "code_snapshot": ("created_at",),
    "chain": ("queued_at", "started_at", "finished_at"),
    "stage": ("started_at", "finished_at"),
    "score": ("created_at",),
    "worker_run": ("started_at", "heartbeat_at", "stopped_at"),
    "transition": ("at",),
    "outbox": ("created_at", "sent_at"),
}
BOOL_COLUMNS = {
    "code_snapshot": ("dirty",),
    "chain": ("eval_only",),
    "score": ("partial",),
    "worker_run": ("drain",),
}

JSON, DATETIME, BOOL = "json", "datetime", "bool"


def kinds_by_name() -> dict[str, str]:
    """column name -> JSON | DATETIME | BOOL, over every table."""
    out: dict[str, str] = {}
    for kind, tables in ((JSON, JSON_COLUMNS), (DATETIME, DATETIME_COLUMNS), (BOOL, BOOL_COLUMNS)):
        for names in tables.values():
            out.update(dict.fromkeys(names, kind))
    return out


KINDS = kinds_by_name()
