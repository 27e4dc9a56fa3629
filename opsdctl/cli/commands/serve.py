"""`opsdctl serve`: start the read-only dashboard (opsdctl.cli.web.app) with uvicorn.

It binds to loopback unless told otherwise, and any other address needs a token: the pages show
logs, recipes and paths of a shared machine. It never writes the store: a store whose schema is
not at this opsdctl's head is refused (any other command brings it up to date), and only the
URL's safe form (no password) is ever shown.
"""

from __future__ import annotations

import ipaddress
import os
from typing import TYPE_CHECKING, Callable, Optional

import typer

from opsdctl.cli.app import App
from opsdctl.cli.console import console, escape

if TYPE_CHECKING:
    from opsdctl.config import Config

MIN_TOKEN_CHARS = 16


def command(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; anything but loopback needs a token."),
    port: int = typer.Option(8765, "--port", "-p", min=1, max=65535, help="Port to listen on."),
    token: Optional[str] = typer.Option(None, "--token", envvar="OPSDCTL_SERVE_TOKEN", show_envvar=True,
                                        help="Secret every request must carry (?token=...); prefer the environment "
                                             "variable: a command line is visible to every user."),
) -> None:
    """A live, read-only web dashboard of this store: the session, compare, each variant and chain.

    Every page has a `?format=json` twin equal to the CLI's `--json` (status, compare, show, chain).
    """
    cfg = App.of(ctx).config()
    serve(cfg, host, port, token, lambda text: console(stderr=True).print(escape(text)))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_bind(host: str, token: Optional[str]) -> None:
    from opsdctl.errors import UserError

    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise UserError(f"--token: {len(token)} characters is too guessable; use at least {MIN_TOKEN_CHARS}, "
                        "e.g. OPSDCTL_SERVE_TOKEN=$(python3 -c 'import secrets; print(secrets.token_urlsafe())')")
    if not is_loopback(host) and not token:
        raise UserError(f"--host {host}: not a loopback address, so anyone who can reach it would read this store; "
                        "give a token (OPSDCTL_SERVE_TOKEN or --token), or bind 127.0.0.1 and use an SSH tunnel")


def read_only_store(cfg: Config) -> tuple[str, Callable]:
    """(the store's safe URL, a reader factory) on the store as it is; refuses one it would have to
    create or upgrade. The Store opened here only checks the revision: the pages read through the
    readers."""
    from opsdctl.errors import UserError

    from opsdctl.store.engine import Store
    from opsdctl.store.migrations import HEAD
    from opsdctl.store.open_read import open_reader
    from opsdctl.store.urls import sqlite_file

    path = sqlite_file(cfg.db)
    if path is not None and not os.path.isfile(path):
        raise UserError(f"db = {cfg.db}: no store there yet; queue a chain first (opsdctl queue ...), then serve it")
    from sqlalchemy.exc import OperationalError

    from opsdctl.store.engine import db_error_text

    store = Store(cfg.db)
    try:
        revision = store.revision()
    except OperationalError as exc:  # a server that is down: one line, the URL without its password
        raise UserError(f"store {store.safe_url()}: {store.redact(db_error_text(exc))}") from None
    if revision != HEAD:
        raise UserError(f"{store.safe_url()}: schema revision {revision or 'none'}, this opsdctl reads {HEAD}; "
                        "run `opsdctl status` once to bring it up to date (serve never writes the store)")
    if path is not None:
        return store.safe_url(), lambda: open_reader(cfg.db)  # stdlib sqlite3, at head: never writes
    return store.safe_url(), lambda: open_reader(store)  # on the Store's engine (PostgreSQL)


def serve(cfg: Config, host: str, port: int, token: Optional[str], say: Callable[[str], None]) -> None:
    import uvicorn

    from opsdctl.cli.web.app import make_app

    check_bind(host, token)
    safe_url, reader = read_only_store(cfg)
    app = make_app(cfg, reader, safe_url, token)
    shown = f"[{host}]" if ":" in host else host
    say(f"serving {safe_url} read-only at http://{shown}:{port}/" + ("?token=..." if token else "")
        + " (Ctrl-C to stop)")
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, server_header=False)
