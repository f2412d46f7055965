"""``python -m focus_tune.replicate``: R searches of one scenario and what holds across them.

    python -m focus_tune.replicate --game hero --runs 5
    python -m focus_tune.replicate --game facemed --runs 5 --parallel 2 -- --final-seeds 3
    python -m focus_tune.replicate --game hero --runs 5 --aggregate-only
    python -m focus_tune.replicate --data DIR --runs 5     # a dataset of your own
    python -m focus_tune.replicate --game hero --runs 5 --set train.epochs=20 --name hero-e20 \
        --storage runs/replication-e20

Flags after ``--`` go to every search; so do ``--set KEY=VALUE`` (checked once, before any
search starts, and against the searches already in --storage) and ``--experiment``. ``--name``
names the replication, not its searches (their run folders stay ``<scenario>-<profile>-seed<r>``,
which is how it finds them: a replication with other --set needs its own --storage). Writes
``replication.md``, ``replication.json`` and ``replication.png`` to ``--out`` (default
``<storage>/<name>``, ``<storage>/<scenario>-<profile>-replication`` without --name) and records
the replication as one MLflow run (named --name, in --experiment, default
``focus-tune/<scenario>``). Exit 0 when every search finished, 3 when some did not (failed:
their logs are named), 130 after Ctrl-C (the finished searches are aggregated; the
same command resumes the others).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from ..arguments import add_flags, version_text
from ..config.scenarios import ScenarioFlags, scenario_from
from ..config.space import override_text, parse_override
from ..errors import ConfigError, DataError, SearchError
from ..interrupt import EXIT_INTERRUPTED
from ..procedure.state import OVERRIDES_KEY, read_state
from .analysis import finished, read_run, run_dir, seed_list, store_uri, summarize
from .figure import plot_replication
from .regime import regime
from .replication_md import markdown
from .runner import Job, Runner

EXIT_INCOMPLETE = 3


def parse(argv: list[str]) -> argparse.Namespace:
    search_args = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(prog="python -m focus_tune.replicate",
                                 description="R searches of one scenario, varying the search seed (and so the "
                                             "data draw), and what holds across them.")
    add_flags(ap, ScenarioFlags, ("scenario", "data", "profile"), helps={  # every command's flags
        "data": "a dataset folder (your own, or an imported built-in scenario): every search trains on it; the seeds "
                "then vary the training, sampling and search, not the data"})
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--runs", type=int, help="R searches, seeds 0..R-1 (default 5)")
    which.add_argument("--seeds", help="the search seeds instead, e.g. 0-4 or 0,2,5")
    ap.add_argument("--storage", type=Path, default=Path("runs/replication"),
                    help="where the searches' run folders, logs and MLflow stores go (default runs/replication)")
    ap.add_argument("--out", type=Path,
                    help="where replication.md/json/png go (default <storage>/<scenario>-<profile>-replication)")
    ap.add_argument("--parallel", type=int, default=1,
                    help="searches at once (default 1: on a laptop one search already uses every core)")
    ap.add_argument("--tracking-uri", help="the MLflow store of the replication's run (default: sqlite:///mlflow.db "
                                           "in the working directory); each search logs to its own store in --storage")
    ap.add_argument("--aggregate-only", action="store_true", help="read the finished run folders, run nothing")
    ap.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
                    help="override a key of every search's search space (as the search's --set; repeatable)")
    ap.add_argument("--name", help="the replication's name: its --out folder under --storage and its MLflow run "
                                   "(default <scenario>-<profile>-replication); the searches keep their own names")
    ap.add_argument("--experiment", help="the MLflow experiment of the replication's run and of every search's "
                                         "parent run (default focus-tune/<scenario>)")
    ap.add_argument("--version", action="version", version=version_text())
    args = ap.parse_args(argv)
    try:
        args.seed_list = seed_list(args.seeds) if args.seeds else list(range(args.runs if args.runs is not None else 5))
    except ValueError as e:
        ap.error(str(e))
    if not args.seed_list:
        ap.error("--runs must be at least 1")
    if args.parallel < 1:
        ap.error("--parallel must be at least 1")
    try:
        args.scenario = scenario_from(args.scenario, args.data)
    except (DataError, SearchError) as err:
        ap.error(str(err))
    for flag in ("--game", "--data", "--profile", "--seed", "--storage", "--tracking-uri", "--resume", "--name",
                 "--set", "--experiment"):
        if flag in search_args:
            ap.error(f"{flag} after -- : the replication sets it for every search (--set and --experiment: give them "
                     "to the replication, before --)")
    if args.name is not None and (not args.name.strip() or "/" in args.name):
        ap.error(f"--name {args.name!r}: a folder's name, not empty and without '/'")
    try:
        args.overrides = [parse_override(text) for text in args.overrides]
    except ConfigError as err:
        ap.error(str(err))
    sets = [flag for key, value in args.overrides for flag in ("--set", override_text(key, value))]
    experiment = ["--experiment", args.experiment] if args.experiment is not None else []
    args.search_args = [*sets, *experiment, *search_args]
    args.out = args.out or args.storage / (args.name or f"{args.scenario}-{args.profile}-replication")
    return args


def check_searches(args, jobs: list[Job]) -> str | None:
    """Why the searches cannot run as asked, or None: their flags as the search checks them (one
    ``--print-config`` of the first, which loads its search space with the --set overrides), and
    every search already in --storage made with the same --set (a finished one is not run again)."""
    probe = subprocess.run([*jobs[0].command(), "--print-config"], capture_output=True, text=True)
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"]
        return f"the searches' flags: {lines[-1].removeprefix('error: ')}"
    asked = json.loads(json.dumps(dict(args.overrides)))  # as a search state records them
    for job in jobs:
        state = read_state(job.folder)
        if state is None:
            continue
        made = state.fingerprint.get(OVERRIDES_KEY, {})  # absent: made without --set
        if made != asked:
            def flags(d):
                return " ".join(f"--set {override_text(k, v)}" for k, v in d.items()) or "no --set"

            return (f"seed {job.seed}'s search in {job.folder} was made with {flags(made)}, this replication gives "
                    f"{flags(asked)}: use another --storage for it")
    return None


def aggregate(args) -> dict | None:
    """Read the finished searches, write replication.md/json/png; None when none finished."""
    runs, missing = [], []
    for seed in args.seed_list:
        folder = run_dir(args.storage, args.scenario, args.profile, seed)
        if not finished(folder):
            missing.append(seed)
            continue
        uri = store_uri(args.storage, args.scenario, args.profile, seed)
        db = Path(uri[len("sqlite:///"):])
        runs.append(read_run(folder, uri if db.exists() else None, seed))
    if not runs:
        return None
    summary = summarize(runs)
    summary["regime"] = regime(args.scenario, runs, args.profile)
    summary["missing_seeds"] = missing
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "replication.json").write_text(json.dumps(summary, indent=1))
    title = f"{args.scenario} ({args.profile}): {summary['runs']} replicated searches"
    plot_replication(args.out / "replication.png", summary, title)
    text = markdown(args.scenario, args.profile, summary, args.search_args, figure="replication.png",
                    data=None if args.data is None else str(args.data))
    (args.out / "replication.md").write_text(text)
    return summary


def main(argv: list[str] | None = None) -> int:
    args = parse(list(sys.argv[1:] if argv is None else argv))
    complete = True
    if not args.aggregate_only:
        args.storage.mkdir(parents=True, exist_ok=True)
        jobs = [Job(args.scenario, args.profile, s, args.storage, None, tuple(args.search_args), args.data)
                for s in args.seed_list]
        problem = check_searches(args, jobs)
        if problem is not None:
            print(f"error: {problem}", file=sys.stderr)
            return 2
        print(f"focus-tune replicate: {args.scenario} ({args.profile}), {len(jobs)} searches (seeds "
              f"{', '.join(map(str, args.seed_list))}), {args.parallel} at a time; run folders in {args.storage}",
              flush=True)
        runner = Runner(jobs, args.parallel)
        complete = runner.run()
        if not complete:
            print("interrupted: the finished searches are aggregated below; the same command resumes the others",
                  flush=True)
    summary = aggregate(args)
    if summary is None:
        print(f"no finished search of {args.scenario} ({args.profile}) in {args.storage} to aggregate", file=sys.stderr)
        return EXIT_INTERRUPTED if not complete else EXIT_INCOMPLETE
    missing = summary["missing_seeds"]
    status = "FINISHED" if not missing else ("KILLED" if not complete else "FAILED")
    from .record import record

    run_id, ui = record(args.tracking_uri, args.scenario, args.profile, args.storage, args.out, summary, status,
                        name=args.name, experiment=args.experiment)
    print((args.out / "replication.md").read_text())
    print(f"replication of {summary['runs']} searches: {args.out / 'replication.md'}, replication.png, "
          "replication.json")
    print(f"MLflow run {run_id} ({status}): {ui}")
    if missing:
        print(f"not finished: seeds {', '.join(map(str, missing))}"
              + ("; the same command resumes them" if not complete else f"; logs in {args.storage / 'logs'}"),
              file=sys.stderr)
    if not complete:
        return EXIT_INTERRUPTED
    return 0 if not missing else EXIT_INCOMPLETE
