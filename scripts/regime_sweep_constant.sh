#!/usr/bin/env bash
# The regime sweep in the paper's recipe shape (issue: "the paper's regime"): a constant
# learning rate of 1e-3, no decay, the model of each scored epoch as it stands, 1000 test
# items scored with the quick profile's estimator (Rao-Blackwell, M = 50) beside the
# reference rows. One seed per cell first; `none` in every scenario before any lambda, since
# the regime is judged on `none` alone. Resumable: a finished cell is skipped, so run it
# again to go on. Rows go to docs/results/sweep/sweep-<game>-constant.jsonl.
#
#     bash scripts/regime_sweep_constant.sh            # every step, in order
#     SWEEP_GAMES="facemed hero" bash scripts/regime_sweep_constant.sh
set -euo pipefail
cd "$(dirname "$0")/.."
games=${SWEEP_GAMES:-"facemed hero seaquest riverraid bankheist roadrunner"}
out_dir=${SWEEP_OUT:-docs/results/sweep}
cell() {  # game size epochs every schedule...
  local game=$1 size=$2 epochs=$3 every=$4; shift 4
  python benchmarks/regime_sweep.py --game "$game" --sizes "$size" --epochs "$epochs" --every "$every" \
    --lr 1e-3 --lr-schedule constant --test-items 1000 --references --build-size 1000 \
    --schedules "$@" --out "$out_dir/sweep-$game-constant.jsonl"
}
# Equal training work per cell (40k item-epochs): fewer items for more epochs. First `none`
# alone in every scenario (one seed), then seeds 1 and 2 of `none` (the regime is the median
# over three seeds), then the lambdas.
for game in $games; do
  cell "$game" 250 160 20 none
  cell "$game" 500 80 10 none
done
for game in $games; do
  cell "$game" 250 160 20 none --seeds 1 2
  cell "$game" 500 80 10 none --seeds 1 2
done
for schedules in "l1..3=0.05" "l1..3=0.5"; do
  for game in $games; do
    cell "$game" 250 160 20 $schedules
    cell "$game" 500 80 10 $schedules
  done
done
