#!/usr/bin/env bash
# Line coverage of focus_tune/ over the README's test command, every process the suite starts
# counted (pyproject's [tool.coverage.run]); the total and each file's percentage are written
# to OUT (default docs/results/coverage/coverage-<commit>.json), the commit and CPU named.
#
#   pip install coverage && bash scripts/coverage.sh [OUT]
#
# A process killed with SIGKILL (a Ray worker at shutdown, a fault test's victim) writes no
# data: the figure is a floor, comparable between commits on the same suite's design.
set -euo pipefail
cd "$(dirname "$0")/.."
commit=$(git rev-parse --short HEAD)
out=${1:-docs/results/coverage/coverage-$commit.json}
data=$(mktemp -d)/coverage
export COVERAGE_FILE=$data
start=$(date +%s)
status=0
python -m coverage run -m pytest -q -p no:cacheprovider || status=$?
wall=$(( $(date +%s) - start ))
python -m coverage combine -q
mkdir -p "$(dirname "$out")"
python -m coverage json -q -o "$data.json"
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
avx512=$(grep -q -w avx512f /proc/cpuinfo && echo "with AVX-512" || echo "without AVX-512")
python - "$data.json" "$out" "$commit" "$cpu $avx512" "$wall" "$status" <<'PY'
import json, sys
raw, out, commit, cpu, wall, status = sys.argv[1:]
report = json.load(open(raw))
files = {f: {"statements": v["summary"]["num_statements"], "covered": v["summary"]["covered_lines"],
             "percent": round(v["summary"]["percent_covered"], 2)} for f, v in sorted(report["files"].items())}
total = report["totals"]
json.dump({"commit": commit, "cpu": cpu, "wall_s_under_coverage": int(wall), "pytest_exit": int(status),
           "statements": total["num_statements"], "covered": total["covered_lines"],
           "percent": round(total["percent_covered"], 2), "files": files}, open(out, "w"), indent=1)
print(f"line coverage of focus_tune/ at {commit}: {total['covered_lines']}/{total['num_statements']} "
      f"= {total['percent_covered']:.2f} % ({out}; pytest exit {status})")
PY
exit "$status"
