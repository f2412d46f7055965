"""The regime a scenario's searches must stay in, checked search by search.

A quick profile is the project's own, not the paper's, and it is only worth searching where
the simulators are in the regime the paper's effect lives in (docs/RESULTS.md, "Where the
effect lives"). The checks the quick profiles are held to, each on the test set, on a
family's mean over its final seeds, one search at a time:

* H.E.R.O.: every family reads the frame: its CE is at least 0.08 below the image-blind
  predictor's (scored by the same report: same estimator, M and items), and its macro AUC
  is at least 0.65;
* FaceMed: every family's macro AUC is at least 0.78, and the unregularized family's
  I_0.9 coverage is at most 0.87: the pathology the paper's method repairs is there;
* River Raid: every family's CE is at least 0.07 below image-blind's, macro AUC at least 0.80
  (measured: gap ~0.12, AUC ~0.86);
* Bank Heist: CE at least 0.045 below image-blind's, macro AUC at least 0.74 (measured: gap
  ~0.08, AUC ~0.80);
* Road Runner (20 epochs): CE at least 0.035 below image-blind's, macro AUC at least 0.75
  (measured: gap ~0.06, AUC ~0.81);
* Seaquest: CE at least 0.012 below image-blind's, macro AUC at least 0.56 (measured: gap
  ~0.024, AUC ~0.63, unregularized): it only just reads the frame at the quick sizes, and is
  held to that (a lambda_1..3 = 0.05 run, one seed, was worse than image-blind: expect misses).

The four scenarios' levels come from benchmarks/regime_sweep.py with their quick recipes at
n = 1000 (docs/results/sweep/, the comments in search_spaces/<scenario>.yaml): roughly 60 % of the
measured CE gap and an AUC floor ~0.05 below the measured AUC. Other scenarios declare none
(their replication has no regime section).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .analysis import MODELS, family_mean


@dataclass(frozen=True)
class Check:
    """``value(family) <= limit`` (``at_most``) or ``>= limit``, where the limit is ``bound``,
    or ``bound`` added to the mean of the row ``relative_to`` in the same search."""

    label: str
    key: str
    bound: float
    at_most: bool
    families: tuple[str, ...] = MODELS
    relative_to: str | None = None


REGIMES: dict[str, tuple[Check, ...]] = {
    "hero": (Check("CE at least 0.08 below image-blind's", "test/marginal/ce", -0.08, True,
                   relative_to="image-blind"),
             Check("macro AUC at least 0.65", "test/marginal/auc", 0.65, False)),
    "facemed": (Check("macro AUC at least 0.78", "test/marginal/auc", 0.78, False),
                Check("the unregularized family's I_0.9 coverage at most 0.87", "test/interval/coverage", 0.87, True,
                      families=("none",))),
    # From benchmarks/regime_sweep.py at the quick recipe, n = 1000, the last epoch
    # (docs/results/sweep/sweep-<scenario>-*.jsonl): roughly 60 % of the smallest measured CE gap,
    # an AUC floor ~0.05 below the smallest measured AUC.
    "riverraid": (Check("CE at least 0.07 below image-blind's", "test/marginal/ce", -0.07, True,
                        relative_to="image-blind"),
                  Check("macro AUC at least 0.8", "test/marginal/auc", 0.80, False)),
    "bankheist": (Check("CE at least 0.045 below image-blind's", "test/marginal/ce", -0.045, True,
                        relative_to="image-blind"),
                  Check("macro AUC at least 0.74", "test/marginal/auc", 0.74, False)),
    "roadrunner": (Check("CE at least 0.035 below image-blind's", "test/marginal/ce", -0.035, True,
                         relative_to="image-blind"),
                   Check("macro AUC at least 0.75", "test/marginal/auc", 0.75, False)),
    # Seaquest only just reads the frame at the quick sizes (search_spaces/seaquest.yaml): its
    # checks hold it to the little it was measured to do, not to H.E.R.O.'s regime.
    "seaquest": (Check("CE at least 0.012 below image-blind's", "test/marginal/ce", -0.012, True,
                       relative_to="image-blind"),
                 Check("macro AUC at least 0.56", "test/marginal/auc", 0.56, False)),
}


def check_run(run: dict, checks: tuple[Check, ...]) -> list[dict]:
    """The checks one search misses: [{"check", "family", "value", "limit"}] (a missing value misses)."""
    missed = []
    for c in checks:
        base = family_mean(run, c.relative_to, c.key) if c.relative_to else 0.0
        limit = base + c.bound
        for family in c.families:
            value = family_mean(run, family, c.key)
            kept = math.isfinite(value) and math.isfinite(limit) and (value <= limit if c.at_most else value >= limit)
            if not kept:
                missed.append({"check": c.label, "family": family, "value": value, "limit": limit})
    return missed


def regime(scenario: str, runs: list[dict]) -> dict | None:
    """{"checks": labels, "kept": searches that miss none, "runs": [{"seed", "kept", "missed"}]};
    None for a scenario without declared checks."""
    checks = REGIMES.get(scenario)
    if checks is None:
        return None
    per_run = [{"seed": r["seed"], "missed": missed, "kept": not missed}
               for r, missed in ((r, check_run(r, checks)) for r in runs)]
    return {"checks": [c.label for c in checks], "kept": sum(r["kept"] for r in per_run), "runs": per_run}


def main(argv: list[str] | None = None) -> int:
    """``python -m focus_tune.replicate.regime --game hero FOLDER...``: the regime section for
    finished searches' reports (folders holding a results.csv, searched recursively)."""
    import argparse
    from pathlib import Path

    from ..report.tables import read_finals
    from .replication_md import regime_lines

    ap = argparse.ArgumentParser(prog="python -m focus_tune.replicate.regime", description=main.__doc__)
    ap.add_argument("--game", dest="scenario", required=True, choices=sorted(REGIMES))
    ap.add_argument("folders", nargs="+", type=Path)
    args = ap.parse_args(argv)
    files = sorted({f for folder in args.folders for f in ([folder] if folder.is_file() else folder.rglob("results.csv"))})
    if not files:
        ap.error("no results.csv under " + ", ".join(map(str, args.folders)))
    # a search's name: its folder (a run folder's report/ is named by the run folder)
    runs = [{"seed": (f.parent.parent if f.parent.name == "report" else f.parent).name, "finals": read_finals(f)}
            for f in files]
    print("\n".join(regime_lines(regime(args.scenario, runs), len(runs), name="search")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
