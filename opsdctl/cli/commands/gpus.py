"""`opsdctl gpus`: the GPUs NVML sees, their free memory and who holds it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from opsdctl.cli.app import App
from opsdctl.cli.console import console, escape, print_json

if TYPE_CHECKING:
    from rich.console import Console


def command(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print the inventory as JSON.")) -> None:
    """The GPUs (NVML), their free memory and the processes holding them (pid, name, MiB).

    CUDA indices follow PCI bus order (stages run with CUDA_DEVICE_ORDER=PCI_BUS_ID), within an
    inherited CUDA_VISIBLE_DEVICES when set. Looks only: opsdctl never signals a process it did
    not start.
    """
    from opsdctl.daemon.gpu_probe import gpu_report

    app = App.of(ctx)
    cfg = app.config()
    doc = gpu_report(cfg.devices, cfg.min_free_mib).to_json()
    if as_json:
        print_json(doc)
        return
    render_gpus(console(), doc)


def render_gpus(con: Console, doc: dict) -> None:
    """`opsdctl gpus`: the inventory with holders (the same data as `--json`)."""
    from rich.table import Table

    if not doc["available"]:
        con.print(f"[yellow]no GPU inventory:[/yellow] {escape(doc['error'] or '')}")
        if doc.get("note"):
            con.print(escape(doc["note"]))
        return
    t = Table(show_edge=False, pad_edge=False)
    for col in ("cuda", "nvml", "name", "uuid", "used MiB", "free MiB", "total MiB", "processes (pid name MiB)"):
        t.add_column(col, overflow="fold")
    for g in doc["gpus"]:
        procs = ", ".join(f"{p['pid']} {p['name']} {p['used_mib']}" for p in g["processes"]) or "-"
        t.add_row("-" if g["index_cuda"] is None else str(g["index_cuda"]), str(g["index_nvml"]), escape(g["name"]),
                  g["uuid"][:16], str(g["used_mib"]), str(g["free_mib"]), str(g["total_mib"]), escape(procs))
    con.print(t)
    cvd = doc.get("cuda_visible_devices")
    con.print(f"configured devices: {doc['devices']!r}, min_free_mib {doc['min_free_mib']}"
              + (f"; inherited CUDA_VISIBLE_DEVICES={escape(cvd)}" if cvd is not None else ""))
    if doc.get("ready") is True:
        con.print("[green]ready[/green]: every configured GPU has enough free memory")
    elif doc.get("ready") is False:
        con.print(f"[red]not ready:[/red] {escape(doc['blocked'])}")
