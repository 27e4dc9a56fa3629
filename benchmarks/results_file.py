"""Write a benchmark's figures: STEM.json (the document) and STEM.md (its table), and print the table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable


def write_results(out: Path, stem: str, doc: dict, markdown: Callable[[dict], str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / f"{stem}.md").write_text(markdown(doc))
    print(markdown(doc))
