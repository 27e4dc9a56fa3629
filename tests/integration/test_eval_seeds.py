"""A work item's seed is the same in every process (a fresh interpreter computes it again)."""

import json
import subprocess
import sys

from eval import plan


# --- seeds and plan -----------------------------------------------------------------------


def test_item_seed_is_stable_across_processes():
    """Not Python's salted hash(): a fresh interpreter (other PYTHONHASHSEED) gives the same seeds."""
    here = [plan.item_seed(0, "2024-I-1", s) for s in range(3)]
    code = "from eval.plan import item_seed; print([item_seed(0, '2024-I-1', s) for s in range(3)])"
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout
    assert json.loads(there) == here
    assert len(set(here)) == 3 and all(0 <= s < 2 ** 63 for s in here)
    assert plan.item_seed(1, "2024-I-1", 0) != here[0]
