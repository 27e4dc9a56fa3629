#!/bin/bash
# Stand-in for a workspace's dev_eval.sh: a checkpoint directory (or `base`), vLLM-style
# progress lines, and the FINAL line the worker scores from.
set -eu
ckpt=$1
[ "$ckpt" = base ] || [ -d "$ckpt" ] || { echo "no checkpoint at $ckpt" >&2; exit 1; }
for done in 12 48 84; do
  echo "Processed prompts:  $((done * 100 / 84))%|#####| $done/84 [00:01<00:00, 1.00it/s]"
done
echo "FINAL avg@12 accuracy: 52.78% (190/360 solutions correct on 30 problems)"
