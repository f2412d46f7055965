#!/usr/bin/env bash
# Run a command with fewer cores' worth of CPU time: a CFS quota on a cgroup of its own.
#
#   sudo benchmarks/cpu_quota.sh CORES COMMAND [ARG...]
#   sudo benchmarks/cpu_quota.sh 1.18 .venv/bin/python -m pytest -q   # 2 cores at 1/1.7 of their speed
#
# The command and every process it starts (Ray nodes and workers, servers, subprocesses) share
# CORES x 100 ms of CPU per 100 ms period. On a 2-core machine, 1.18 stands in for a machine
# 1.7x slower (the spread between the 2-core machines we run on), for as long as the command
# keeps both cores busy, as the parallel test suite does. It is not a slower core: a phase
# that keeps one core busy is not slowed while it stays under the quota, and a throttled
# group stalls for the rest of a period rather than running slower. Use it to ask "does this
# still pass, and in how long, with that much less CPU?", not for per-process timings.
#
# Needs root and the cpu controller (cgroup v2: /sys/fs/cgroup/cpu.max; v1: /sys/fs/cgroup/cpu).
# Prints the command's wall time and exit status; exits with the command's status.
set -euo pipefail

if [[ $# -lt 2 ]]; then
    sed -n '2,5p' "$0" >&2
    exit 64
fi
cores=$1
shift
if ! [[ $cores =~ ^[0-9]+([.][0-9]+)?$ ]] || awk -v c="$cores" 'BEGIN { exit !(c <= 0) }'; then
    echo "cpu_quota: CORES must be a positive number, got '$cores'" >&2
    exit 64
fi
period=100000
quota=$(awk -v c="$cores" -v p="$period" 'BEGIN { printf "%d", c * p }')

name="cpu_quota.$$"
if [[ -f /sys/fs/cgroup/cgroup.controllers ]] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
    group=/sys/fs/cgroup/$name  # cgroup v2
    mkdir "$group"
    echo "$quota $period" >"$group/cpu.max"
elif [[ -d /sys/fs/cgroup/cpu ]]; then
    group=/sys/fs/cgroup/cpu/$name  # cgroup v1
    mkdir "$group"
    echo "$period" >"$group/cpu.cfs_period_us"
    echo "$quota" >"$group/cpu.cfs_quota_us"
else
    echo "cpu_quota: no cgroup cpu controller under /sys/fs/cgroup" >&2
    exit 69
fi

cleanup() {
    # Move anything left back to the root group, then remove ours.
    local root=${group%/*}
    while read -r pid; do echo "$pid" >"$root/cgroup.procs" 2>/dev/null || true; done <"$group/cgroup.procs"
    rmdir "$group" 2>/dev/null || true
}
trap cleanup EXIT

echo "cpu_quota: $cores cores ($quota us per $period us) for: $*" >&2
start=$(date +%s.%N)
set +e
(echo "$BASHPID" >"$group/cgroup.procs" && exec "$@")
status=$?
set -e
awk -v s="$start" -v e="$(date +%s.%N)" -v st="$status" \
    'BEGIN { printf "cpu_quota: exit %d after %.1f s\n", st, e - s }' >&2
exit "$status"
