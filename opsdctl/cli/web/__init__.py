"""`opsdctl serve`: a read-only dashboard of the store (opsdctl.cli.web.app)."""
