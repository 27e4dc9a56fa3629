"""Import a module of benchmarks/ (a script folder, not a package on the path) for a test."""

from __future__ import annotations

import importlib
import sys

from conftest import REPO


def bench_module(name: str):
    """`name` under benchmarks/ ("decision", "throughput.train_run"), with benchmarks/ on sys.path
    only while it imports (its own imports of sibling modules resolve then)."""
    root = str(REPO / "benchmarks")
    sys.path.insert(0, root)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(root)
