"""The documents the command line and the dashboard both show, one module a page: status, compare,
variant, chain. Each builds the `--json` document of its command; the command renders it with rich
and the dashboard (opsdctl.cli.web) with HTML, so the two cannot show different numbers. A document
imports no command module and no web module: commands and pages import documents, never the
reverse."""
