#!/usr/bin/env bash
# The verdict's tables from the searches scripts/verdict_replications.sh kept in MAIN (each
# finished search's report under MAIN/docs/results/replication/<game>-<profile>/searches/seed<r>/,
# the durable record: the run folders in STORAGE may be on another machine or gone): each
# scenario's replication.md/json/png into MAIN/docs/results/replication/<game>-<profile>/ (from the
# searches kept so far: a scenario with fewer than five says so), then the six-row verdict
# table and forest plot into MAIN/docs/results/verdict/, and its short table into the verdict
# blocks of MAIN/README.md and MAIN/docs/RESULTS.md. STORAGE holds the aggregation's MLflow
# record (replications.db) and a scratch folder of links to the kept reports.
#
#   bash scripts/verdict_aggregate.sh /work/main /work/verdict-runs
#
# The verdict in the paper's regime (focus_tune/replicate/regime_design.py) from the
# overconfident profile's searches, into MAIN/docs/results/verdict-overconfident/ and the
# regime blocks of README and RESULTS:
#
#   PROFILE=overconfident GAMES="facemed hero riverraid" bash scripts/verdict_aggregate.sh /work/main /work/regime-runs
#
# DATA_DIRS (space-separated folders, e.g. the worktree's data_cache): where the searches'
# datasets (<game>-<profile>-seed<r>, rebuilt at will: python -m focus_tune.data build --game G
# --profile PROFILE --seed r) are found for the verdict's table of what the data show.
set -euo pipefail
main=$(cd "$1" && pwd)
storage=$(mkdir -p "$2" && cd "$2" && pwd)
games=${GAMES:-"facemed hero seaquest riverraid bankheist roadrunner"}
profile=${PROFILE:-quick}
folders=()
datasets=()
for game in $games; do
  kept=$main/docs/results/replication/$game-$profile/searches
  seeds=$(ls -d "$kept"/seed* 2> /dev/null | sed 's/.*seed//' | sort -n | while read -r s; do
            [ -f "$kept/seed$s/results.csv" ] && echo "$s"; done | paste -sd, - || true)
  if [ -z "$seeds" ]; then
    echo "verdict: no kept $game search in $kept yet" >&2
    continue
  fi
  # replicate --aggregate-only reads <storage>/<game>-<profile>-seed<r>/report/: link the kept reports there
  links=$storage/kept/$game
  rm -rf "$links" && mkdir -p "$links"
  for s in ${seeds//,/ }; do
    mkdir -p "$links/$game-$profile-seed$s" && ln -s "$kept/seed$s" "$links/$game-$profile-seed$s/report"
  done
  python -m focus_tune.replicate --game "$game" --profile "$profile" --seeds "$seeds" --aggregate-only --storage "$links" \
    --out "$main/docs/results/replication/$game-$profile" --tracking-uri "sqlite:///$storage/replications.db" > /dev/null
  folders+=("$main/docs/results/replication/$game-$profile")
  for s in ${seeds//,/ }; do
    for dir in ${DATA_DIRS:-}; do
      if [ -f "$dir/$game-$profile-seed$s/manifest.json" ]; then datasets+=("$dir/$game-$profile-seed$s"); break; fi
    done
  done
done
# the quick profile's verdict, or the regime's (its own design, folder and doc blocks)
regime=() && out=$main/docs/results/verdict
[ "$profile" = quick ] || { regime=(--regime) && out=$main/docs/results/verdict-$profile; }
python -m focus_tune.replicate.verdict "${regime[@]}" --out "$out" "${folders[@]}" --data "${datasets[@]}" \
  --docs "$main/README.md" "$main/docs/RESULTS.md"
