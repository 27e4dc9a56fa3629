"""Pure, fast tests, one folder per wing of the source: the inner loop (python -m pytest tests/unit)."""
