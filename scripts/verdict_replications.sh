#!/usr/bin/env bash
# The verdict's replications (docs/RESULTS.md): five quick searches of each of the six
# scenarios, all from one commit, seed by seed across the scenarios (every scenario's seed 0
# first), each as `python -m focus_tune.replicate --game G --seeds r`.
#
#   git worktree add /work/verdict <commit>      # the commit the searches report
#   cd /work/verdict && python -m venv .venv && . .venv/bin/activate && pip install -e .
#   bash /work/main/scripts/verdict_replications.sh /work/main /work/verdict-runs
#
# (run from the worktree, which sets the commit and the code; the script itself may be MAIN's).
#
# The verdict in the paper's regime (focus_tune/replicate/regime_design.py): the overconfident
# profile, the scenarios that reach the regime, searches at --seed 0, 3, 6, 9, 12 (disjoint
# final seeds):
#
#   PROFILE=overconfident GAMES="facemed hero riverraid" SEEDS="0 3 6 9 12" \
#     bash /work/main/scripts/verdict_replications.sh /work/main /work/regime-runs
#
# MAIN is the checkout that receives the results: each finished search's report (results.csv,
# results.md, search.json), its fixed stages' validation scores (validation.json, from its MLflow
# store), its log and provenance.json (commit, CPU, wall seconds) go to
# MAIN/docs/results/replication/<game>-<profile>/searches/seed<r>/ and are committed there at once
# (those paths alone). Resumable: a search whose provenance names this commit is skipped, an
# interrupted one resumes from its run folder in STORAGE (the replicate command's own resume).
# To stop: `pkill -INT -f "focus_tune.replicate --game"` (the search saves its state, and this
# script records the attempt's wall time, which provenance.json's wall_s sums, then exits).
# Aggregate afterwards with scripts/verdict_aggregate.sh.
set -euo pipefail
main=$(cd "$1" && pwd)
storage=$(mkdir -p "$2" && cd "$2" && pwd)
games=${GAMES:-"hero facemed seaquest riverraid bankheist roadrunner"}
seeds=${SEEDS:-"0 1 2 3 4"}
profile=${PROFILE:-quick}
commit=$(git rev-parse HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "verdict: the worktree has uncommitted changes; the searches must report a commit" >&2
  exit 2
fi
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
avx512=$(grep -q -w avx512f /proc/cpuinfo && echo "with AVX-512" || echo "without AVX-512")

here="$cpu $avx512"
for seed in $seeds; do
  for game in $games; do
    dest=$main/docs/results/replication/$game-$profile/searches/seed$seed
    if [ -f "$dest/provenance.json" ] && grep -q "\"commit\": \"$commit\"" "$dest/provenance.json"; then
      continue
    fi
    # a scenario's searches of one commit run on one machine kind (their times and their numbers
    # repeat per kind): a search kept from another kind stops this one
    for kept in "$main"/docs/results/replication/"$game-$profile"/searches/seed*/provenance.json; do
      [ -f "$kept" ] || continue
      if grep -q "\"commit\": \"$commit\"" "$kept" && ! grep -q "\"cpu\": \"$here\"" "$kept"; then
        echo "verdict: $kept ran on another machine kind than this one ($here); a scenario's searches" \
             "of one commit run on one kind: run $game here from another commit, or on that kind" >&2
        exit 3
      fi
    done
    echo "== $game seed $seed ($(date -u +%H:%M:%S))"
    # wall seconds summed over the attempts (a search stopped and resumed counts each part once)
    spent=$storage/wall/$game-seed$seed
    prior=$(cat "$spent" 2> /dev/null || echo 0)
    start=$(date +%s)
    status=0
    python -m focus_tune.replicate --game "$game" --profile "$profile" --seeds "$seed" --storage "$storage" \
      --out "$storage/partial/$game-seed$seed" --tracking-uri "sqlite:///$storage/replications.db" || status=$?
    mkdir -p "$storage/wall" && echo $(( prior + $(date +%s) - start )) > "$spent"
    if [ "$status" -ne 0 ]; then
      echo "verdict: $game seed $seed stopped (exit $status); the same command resumes it" >&2
      exit "$status"
    fi
    wall=$(cat "$spent")
    run=$storage/$game-$profile-seed$seed
    rm -rf "$dest" && mkdir -p "$dest"
    cp "$run/report/results.csv" "$run/report/results.md" "$run/report/search.json" "$dest/"
    cp "$storage/logs/$game-$profile-seed$seed.log" "$dest/search.log"
    # the fixed stages' candidates' validation scores, from the search's own MLflow store (which stays
    # in STORAGE): what the replication's selection-rule rows read where the store is gone
    python - "$run" "$storage/mlflow-$game-$profile-seed$seed.db" "$dest/validation.json" <<'PY'
import json, sys
from pathlib import Path
try:
    from focus_tune.replicate.analysis import validation_scores
except ImportError:  # a worktree from before the packages (its replicate/summary.py)
    from focus_tune.replicate.summary import validation_scores
run, db, out = map(Path, sys.argv[1:])
state = run / "search_state.json"
parent = json.loads(state.read_text()).get("parent_run_id") if state.exists() else None
search = json.loads((run / "report" / "search.json").read_text())
out.write_text(json.dumps(validation_scores(f"sqlite:///{db.resolve()}", search, parent), indent=1, sort_keys=True))
PY
    cat > "$dest/provenance.json" <<EOF
{"commit": "$commit", "cpu": "$here", "cores": $(nproc), "wall_s": $wall,
 "command": "python -m focus_tune.replicate --game $game --profile $profile --seeds $seed"}
EOF
    # commit these paths alone (the main checkout may have other work staged); retry past a busy index
    for try in 1 2 3 4 5; do
      if (cd "$main" && git add -- "$dest" && git commit -q -m "Verdict replication: $game $profile search seed $seed at ${commit:0:7} ($cpu $avx512, $(nproc) cores, ${wall} s)" -- "$dest"); then
        break
      fi
      sleep 5
    done
  done
done
echo "verdict: every search of seeds [$seeds] x [$games] is in $main/docs/results/replication"
