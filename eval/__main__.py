"""`python -m eval`: see eval/cli.py."""

import sys

if __name__ == "__main__":  # spawned workers import this module as __mp_main__: do nothing then
    from eval.cli import main

    sys.exit(main())
