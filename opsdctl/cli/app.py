"""The one context object of a command line run: which config file, and which store it opened.

`main()` makes one `App` per run and hands it to Typer (`ctx.obj`); the root callback records
`--config`, a command asks it for the config, the store or a read-only view of the store. The
store's masked URL stays on it, so `main()` can name a store that fails after it opened.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer


@dataclass
class App:
    config_path: Optional[Path] = None
    store_url: Optional[str] = None  # set once a command opened its store

    @staticmethod
    def of(ctx: typer.Context) -> "App":
        return ctx.find_root().ensure_object(App)

    def config(self):
        from opsdctl.cli.console import warn
        from opsdctl.config import find_config, load_config

        cfg = load_config(find_config(str(self.config_path) if self.config_path else None))
        for warning in cfg.warnings:
            warn(warning)
        return cfg

    def store(self, cfg):
        from opsdctl.store.engine import open_store

        store = open_store(cfg.db)
        self.store_url = store.safe_url()
        return store

    def reader(self, cfg):
        """A read-only view of the store for status and compare: SQLite at the schema's head is
        read with sqlite3, without importing SQLAlchemy (opsdctl.store.open_read)."""
        from opsdctl.store.open_read import open_reader

        reader = open_reader(cfg.db)
        self.store_url = reader.safe_url
        return reader
