#!/usr/bin/env bash
# The verdict's tables from the searches scripts/verdict_replications.sh ran (STORAGE): each
# scenario's replication.md/json/png into MAIN/docs/results/replication/<game>-quick/ (from the
# searches finished so far: a scenario with fewer than five says so), then the six-row verdict
# table and forest plot into MAIN/docs/results/verdict/.
#
#   bash scripts/verdict_aggregate.sh /work/main /work/verdict-runs
set -euo pipefail
main=$(cd "$1" && pwd)
storage=$(cd "$2" && pwd)
games=${GAMES:-"facemed hero seaquest riverraid bankheist roadrunner"}
folders=()
for game in $games; do
  if ! ls "$storage/$game-quick-seed"*/report/results.csv > /dev/null 2>&1; then
    echo "verdict: no finished $game search in $storage yet" >&2
    continue
  fi
  seeds=$(ls -d "$storage/$game-quick-seed"* | sed 's/.*seed//' | sort -n | while read -r s; do
            [ -f "$storage/$game-quick-seed$s/report/results.csv" ] && echo "$s"; done | paste -sd, -)
  python -m focus_tune.replicate --game "$game" --seeds "$seeds" --aggregate-only --storage "$storage" \
    --out "$main/docs/results/replication/$game-quick" --tracking-uri "sqlite:///$storage/replications.db" > /dev/null
  folders+=("$main/docs/results/replication/$game-quick")
done
python -m focus_tune.replicate.verdict --out "$main/docs/results/verdict" "${folders[@]}"
