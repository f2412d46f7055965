#!/usr/bin/env bash
# CPU-seconds of a command and of every process it starts (Ray nodes and workers, servers,
# subprocesses, daemons that outlive their parent): the command runs in a cgroup of its own and
# the cgroup's cpu.stat is read when it ends. Unlike `time`, this counts processes nobody waits
# for, and unlike wall time it hardly moves with what else runs on the machine, so the cost of a
# test file can be measured beside other work.
#
#   sudo benchmarks/cpu_seconds.sh COMMAND [ARG...]
#   for f in tests/test_*.py; do sudo benchmarks/cpu_seconds.sh .venv/bin/python -m pytest -q -n 0 "$f"; done
#
# Prints one line to stderr, "cpu_seconds: <user+system CPU-s> (user U, system S) wall W s, exit E: COMMAND",
# and exits with the command's status. Needs root and cgroup v2, or v1's cpuacct controller.
set -euo pipefail

if [[ $# -lt 1 ]]; then
    sed -n '7,8p' "$0" >&2
    exit 64
fi
name=cpu_seconds.$$
if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    group=/sys/fs/cgroup/$name  # cgroup v2: cpu.stat in microseconds
elif [[ -d /sys/fs/cgroup/cpuacct ]]; then
    group=/sys/fs/cgroup/cpuacct/$name  # cgroup v1: cpuacct.usage in nanoseconds
else
    echo "cpu_seconds: no cgroup v2 and no cgroup v1 cpuacct controller under /sys/fs/cgroup" >&2
    exit 69
fi
mkdir "$group"
cleanup() {
    local root=${group%/*}
    while read -r pid; do echo "$pid" >"$root/cgroup.procs" 2>/dev/null || true; done <"$group/cgroup.procs"
    rmdir "$group" 2>/dev/null || true
}
trap cleanup EXIT

start=$(date +%s.%N)
set +e
(echo "$BASHPID" >"$group/cgroup.procs" && exec "$@")
status=$?
set -e
# Processes the command left behind still count until they end or are moved out (cleanup).
wall=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
if [[ -f $group/cpuacct.usage ]]; then
    # v1: cpuacct.stat splits user and system in ticks; cpuacct.usage (ns) is the exact total
    read -r user system < <(awk -v hz="$(getconf CLK_TCK)" -v total="$(cat "$group/cpuacct.usage")" '
        $1 == "user" { u = $2 / hz } $1 == "system" { s = $2 / hz }
        END { t = total / 1e9; s = (u + s > 0) ? t * s / (u + s) : 0; print t - s, s }' "$group/cpuacct.stat")
else
    read -r user system < <(awk '$1 == "user_usec" { u = $2 / 1e6 } $1 == "system_usec" { s = $2 / 1e6 }
                                END { print u, s }' "$group/cpu.stat")
fi
awk -v u="$user" -v s="$system" -v w="$wall" -v st="$status" -v cmd="$*" \
    'BEGIN { printf "cpu_seconds: %.1f (user %.1f, system %.1f) wall %s s, exit %s: %s\n", u + s, u, s, w, st, cmd }' >&2
exit "$status"
