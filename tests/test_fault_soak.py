"""benchmarks/fault_soak.py's plan and timing: a seed draws the same faults every time, and a
fault's moment comes from how long the soak's own whole searches took, not from a baseline
timed on a busier machine."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("fault_soak", REPO / "benchmarks" / "fault_soak.py")
soak = sys.modules.setdefault("fault_soak", importlib.util.module_from_spec(_spec))  # its dataclasses ask for it
if not hasattr(soak, "draw_plan"):
    _spec.loader.exec_module(soak)


def _row(scenario="facemed", tracked=False, commit="abc", attempts=(), data_s=None):
    row = {"scenario": scenario, "tracked": tracked, "commit": commit, "attempts": list(attempts)}
    if data_s is not None:
        row["data_s"] = data_s
    return row


def _attempt(seconds, exit=0, ended_by=None, done_after=17, done_before=None):
    a = {"seconds": seconds, "exit": exit, "ended_by": ended_by, "done_after": done_after}
    if done_before is not None:
        a["done_before"] = done_before
    return a


def test_a_seed_draws_the_same_plan_and_kinds_follow_what_the_machine_allows():
    a, b = soak.draw_plan(7, True, set(soak.KINDS)), soak.draw_plan(7, True, set(soak.KINDS))
    assert a == b
    assert 3 <= len(a.search_faults) <= 5
    no_disk = soak.draw_plan(7, False, set(soak.KINDS))
    assert all(f.kind != "disk_full" for f in no_disk.search_faults)
    only_kills = soak.draw_plan(7, True, {"driver_kill"})
    assert {f.kind for f in only_kills.search_faults} == {"driver_kill"} and not only_kills.data_faults


def test_search_seconds_come_from_whole_undisturbed_searches():
    """An attempt that started with no trial done and ran to exit 0 with no fault is a whole
    search (T); a resumed attempt is not (it takes 0.5-1.1 T whatever is left), nor an attempt
    a fault ended, nor another scenario's, the server's runs' or another commit's."""
    rows = [
        _row(attempts=[_attempt(30.0)]),
        _row(attempts=[_attempt(5.0, exit=-9, ended_by="driver_kill", done_after=8),
                       _attempt(20.0, done_before=8)]),
        _row(attempts=[_attempt(4.0, exit=130, ended_by="driver_sigint", done_after=0), _attempt(28.0)]),
        _row(attempts=[_attempt(9.0, exit=130, ended_by="driver_sigint", done_after=4), _attempt(25.0)]),
        _row(attempts=[_attempt(26.0, exit=0, ended_by="driver_sigint")]),  # the search ended first: not undisturbed
        _row(scenario="alarms", attempts=[_attempt(99.0)]),
        _row(tracked=True, attempts=[_attempt(98.0)]),
        _row(commit="old", attempts=[_attempt(97.0)]),
    ]
    # the third: a rerun from no trial done; the fourth's rerun (no done_before recorded) started at 4 done
    assert soak.search_seconds(rows, "facemed", "abc") == [30.0, 28.0]
    assert soak.search_seconds(rows, "facemed-server", "abc") == [98.0]
    assert soak.data_seconds([_row(data_s=1.5), _row(data_s=2.5, commit="old"), _row()], "facemed", "abc") == [1.5]


def test_the_expected_time_is_the_median_of_the_latest_measurements():
    """A baseline timed at 140 s on a busy machine gives way to the runs' 30 s once they are
    most of the window; with none yet, the baseline is all there is."""
    assert soak.recent_median([], 140.0) == 140.0
    assert soak.recent_median([30.0], 140.0) == pytest.approx(85.0)
    assert soak.recent_median([30.0, 32.0], 140.0) == 32.0
    assert soak.recent_median([30.0, 31.0, 29.0, 33.0, 35.0, 28.0], 140.0) == 31.0  # the last five, baseline out
    assert soak.expected_share(0, 16) == pytest.approx(0.9)
    assert soak.expected_share(16, 16) == pytest.approx(0.35)
    assert soak.expected_share(20, 16) == pytest.approx(0.35)


def test_an_attempt_is_held_only_to_its_own_lock(tmp_path):
    """Soak seed 46 at 5588ed3: attempt 2 was SIGKILLed holding the lock, attempt 3 stopped on a
    full disk 0.4 s in, before it could take that stale lock over, and attempt 4 took it over
    with its notice. The lock left after attempt 3 was attempt 2's: what the check asks is that
    an attempt leaves no lock of its own."""
    import dataclasses
    import json

    from focus_tune.search.lock import Holder

    lock = tmp_path / "search.lock"
    assert soak.lock_holder(lock) is None
    lock.write_text(json.dumps(dataclasses.asdict(dataclasses.replace(Holder.me("search"), pid=15550))))
    assert soak.lock_holder(lock) == 15550  # not attempt 3's driver: no violation for it
    lock.write_text("")  # cut off: nobody's
    assert soak.lock_holder(lock) == -1
