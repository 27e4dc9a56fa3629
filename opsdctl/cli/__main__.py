"""`python -m opsdctl.cli`: the same entry point as the `opsdctl` console script."""

from opsdctl.cli.main import main

if __name__ == "__main__":
    main()
