#!/bin/bash
# Stand-in for a workspace's train_capped.sh: SEED and OUT_DIR from the environment,
# the recipe from ./submission/recipe.env (KEY=VALUE lines; absent or empty = the baseline),
# Hugging Face Trainer dict lines and its tqdm bar in the log, the scorer's [modes] line, and
# $OUT_DIR/capped_seed$SEED/checkpoint-100 at the end. STANDIN_SLEEP: seconds to sleep after the
# [modes] line (crash tests). STANDIN_LORA_R: print this lora_r whatever the recipe says.
set -eu
lr=5e-06 sched=constant teacher=False student=False lora_r=64
if [ -f submission/recipe.env ]; then
  while IFS='=' read -r key value; do
    case "$key" in
      learning_rate) lr=$value ;;
      lr_scheduler_type) sched=$value ;;
      teacher_thinking) [ "$value" = true ] && teacher=True || teacher=False ;;
      student_thinking) [ "$value" = true ] && student=True || student=False ;;
      lora_r) lora_r=$value ;;
    esac
  done < submission/recipe.env
fi
echo "[modes] teacher_thinking=$teacher student_thinking=$student"
echo "lora_r=${STANDIN_LORA_R:-$lora_r}"
sleep "${STANDIN_SLEEP:-0}"
steps=100
awk -v lr="$lr" -v sched="$sched" -v n="$steps" 'BEGIN {
  pi = atan2(0, -1)
  for (s = 1; s <= n; s++) {
    f = 1
    if (sched == "linear") f = (n - s) / n
    if (sched == "cosine") f = 0.5 * (1 + cos(pi * s / n))
    printf "\r%3d%%|#####     | %d/%d [00:01<00:10, 1.00s/it]", 100 * s / n, s, n > "/dev/stderr"
    fflush("/dev/stderr")
    if (s % 10 == 0) {
      printf "{\x27loss\x27: -0.0021, \x27grad_norm\x27: 0.0492, \x27learning_rate\x27: %.6g, \x27on_policy_loss\x27: -0.0021, \x27epoch\x27: %.2f}\n", lr * f, s * 0.0027
      fflush()
    }
  }
}'
echo "{'train_runtime': 908.19, 'train_samples_per_second': 3.523, 'train_steps_per_second': 0.11, 'train_loss': -0.0079, 'epoch': 0.27}"
mkdir -p "$OUT_DIR/capped_seed$SEED/checkpoint-100"
printf 'learning_rate=%s\n' "$lr" > "$OUT_DIR/capped_seed$SEED/checkpoint-100/trained_with.txt"
