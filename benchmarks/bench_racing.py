"""How often would racing have changed a stage's decision? Replayed on searches run to the end.

A search run with ``racing: record`` validates every candidate at the race epoch too and
trains it to the end. For each of its stages this script applies the racing rule
(``focus_tune.procedure.racing.losers``: behind the stage's leader at the race epoch by more than
``race_se`` standard errors, plus ``tie_se`` where the tie rule could still choose it) to the
recorded race-epoch scores and asks whether the candidate the stage chose at full training is
among those it would have stopped: a changed decision. It compares every candidate with the
leader over all recorded candidates, which stops at least as many as racing does while the
candidates run (a candidate can only be compared with those that reached the race epoch
before it), so the rate is an upper bound. It also counts the epochs the stops would have saved.

    python -m focus_tune.search --game hero --seed 1 ...   # with racing: record in the space
    python benchmarks/bench_racing.py runs/hero-quick-seed1 [more run folders] [--race-se 3]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from focus_tune.procedure.racing import changed_decisions
from focus_tune.procedure.state import read_state


def replay(run: Path, race_se: float | None) -> dict:
    state = read_state(run)
    if state is None or not state.race:
        raise SystemExit(f"{run}: no race epoch recorded (a search with racing: record or stop)")
    search = json.loads((run / "report" / "search.json").read_text())
    train = state.fingerprint.get("config", {}).get("train", {})  # the search's configuration
    race_se = train.get("race_se", 3.0) if race_se is None else race_se
    tie_se = search.get("tie_se", train.get("tie_se", 1.0))
    epoch = next(iter(state.race.values()))["epoch"]
    stages, winners = {}, {}
    for stage in search["stages"]:
        rows = {r["trained_as"]: r["penalty"] for r in stage["candidates"]}
        entrants = [(t, state.race[t]["score"], p) for t, p in rows.items() if t in state.race]
        if len(entrants) < 2 or stage["stage"] == "none":
            continue
        stages[stage["stage"]] = entrants
        chosen = next((r["trained_as"] for r in stage["candidates"] if r["trial_id"] == stage["winner"]), None)
        winners[stage["stage"]] = chosen
    out = changed_decisions(stages, winners, epoch, race_se, tie_se,
                            lambda a, b: state.difference_se(a, b, race=True))
    return {"run": str(run), "race_epoch": epoch, "race_se": race_se, "tie_se": tie_se,
            "epochs": train.get("epochs"), "stages": out, "stopped_for_real": sorted(state.stopped)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="run folders (runs/<game>-<profile>-seed<s>)")
    ap.add_argument("--race-se", type=float, help="the rule's width (default: each search's race_se)")
    ap.add_argument("--out", type=Path, help="write the replay as JSON here")
    args = ap.parse_args()
    results = [replay(run, args.race_se) for run in args.runs]
    decisions = stopped = changed = saved = 0
    for res in results:
        print(f"{res['run']}: race epoch {res['race_epoch']}, race_se {res['race_se']:g}, tie_se {res['tie_se']:g}")
        for stage, row in res["stages"].items():
            decisions += 1
            stopped += len(row["stopped"])
            changed += row["changed"]
            if res["epochs"]:
                saved += len(row["stopped"]) * (res["epochs"] - res["race_epoch"])
            mark = "CHANGED" if row["changed"] else "kept"
            print(f"  {stage:8s} {row['candidates']} candidates, would stop {row['stopped'] or 'none'}; "
                  f"chosen {row['winner']}: {mark}")
    print(f"{len(results)} search(es), {decisions} decisions: {stopped} candidates stopped, "
          f"{changed} decisions changed, {saved} epochs saved")
    if args.out:
        args.out.write_text(json.dumps({"searches": results, "decisions": decisions, "stopped": stopped,
                                        "changed": changed, "epochs_saved": saved}, indent=1))


if __name__ == "__main__":
    main()
