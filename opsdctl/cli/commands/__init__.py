"""The commands, one module each: its Typer function `command`, the view it builds (the `--json`
document) and its rendering. `opsdctl.cli.main` registers them."""
