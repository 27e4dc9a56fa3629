"""Emulates an external train script with a huge log (no train_result.json, no train_runtime line).

Prints MIB mebibytes of lines that made the old log parsers slow (100 KiB of letters before a ':'
and a '%|': the tqdm pattern's lazy description scan is quadratic in a line's length; and
dict-looking junk), then leaves a checkpoint the evaluator emulator accepts.
Usage: huge_log_train.py STAGE_DIR MIB
"""

import os
import sys

out, mib = sys.argv[1], int(sys.argv[2])
long = ("x" * 100000 + ": 5%| junk\n").encode()
dicty = ("{'loss': 0.1, 'grad_norm': " + "1" * 5000 + "}\n").encode()
block = (long + dicty) * 10
w = sys.stdout.buffer
for _ in range(mib * (1 << 20) // len(block)):
    w.write(block)
w.flush()
ckpt = os.path.join(out, "checkpoint-final")
os.makedirs(ckpt, exist_ok=True)
with open(os.path.join(ckpt, "adapter_config.json"), "w") as f:
    f.write('{"seed": 0, "clip_mode": "entry", "lr": 5e-06}')
