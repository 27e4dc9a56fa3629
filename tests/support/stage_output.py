"""What stages print and write, as tests build it: the evaluator's FINAL line, a result.json, and
the regexes that read the released OPSD trainer's KL and clipping line."""

from __future__ import annotations

import json

FINAL_LINE = "FINAL avg@12 accuracy: {} ({}/{} solutions correct on {} problems)"


def result_json(**over):
    doc = {"schema": 1, "k": 2, "avg_at_k": 0.75, "n_problems": 2,
           "problems": [{"id": "a", "correct": 2, "samples": 2}, {"id": "b", "correct": 1, "samples": 2}]}
    doc.update(over)
    return json.dumps(doc)


KL = r"KL\(T\|\|S\)=([0-9.eE+-]+)"
FRAC = r"frac above tau=([0-9.eE+-]+)"
