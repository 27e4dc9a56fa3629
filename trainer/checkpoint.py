"""LoRA adapter checkpoints, written atomically: a temporary directory, then one rename, so a
reader (opsdctl, the evaluator) never sees a half-written checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path


def save_adapter(peft_model, out_dir: Path, name: str, info: dict | None = None) -> Path:
    out_dir = Path(out_dir)
    final = out_dir / name
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out_dir))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; a checkpoint is for others to read
    try:
        # only the student adapter: an EMA teacher adapter is training state, not the result
        peft_model.save_pretrained(str(tmp), selected_adapters=["default"])
        if info:
            (tmp / "opsd_checkpoint.json").write_text(json.dumps(info, indent=1) + "\n")
        if final.exists():
            old = final.with_name(f".{name}-old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
