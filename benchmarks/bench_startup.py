"""What every search pays before and besides its trials, old and new side by side in one run.

Two fixed costs that the test suite pays in every one of its ~40 searches (and a user in every
search's trial processes and every new store):

- **A trial worker's imports.** Each trial's Ray actor imports Ray Tune, torch and the
  trainable. Building the encoder with torchvision imported torchvision, and with it
  torch._dynamo; the encoder is now written out in ``focus_tune.sim.model`` (equal to
  torchvision's bit for bit, tests/test_core_model.py). "before" imports torchvision on top of
  what the trainable imports now, which is what the trainable imported then.
- **A new MLflow store.** MLflow creates a SQLite store by running its migrations; a new
  local store is now a copy of an empty one made once per MLflow version
  (``focus_tune.tracking.backend.create_local_store``).

Each measurement is a fresh Python process (CPU seconds: user + system of the child, which is
what the suite's two cores are short of), the two sides alternating, the median of --repeats.

    python benchmarks/bench_startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile

IMPORTS = {
    "before": "import ray, ray.tune, torchvision, focus_tune.search.trainable",
    "now": "import ray, ray.tune, focus_tune.search.trainable",
}
STORE = {
    "before": "from mlflow.tracking import MlflowClient; MlflowClient('sqlite:///{db}').search_experiments()",
    "now": ("from focus_tune.tracking.backend import create_local_store; from mlflow.tracking import MlflowClient; "
            "create_local_store('sqlite:///{db}'); MlflowClient('sqlite:///{db}').search_experiments()"),
}
# Opening a store that exists (the imports, the engine, the schema check): what both sides pay anyway.
BASE = ("from mlflow.tracking import MlflowClient; import focus_tune.tracking.backend; "
        "MlflowClient('sqlite:///{existing}').search_experiments()")


def child_cpu(code: str) -> float:
    """CPU seconds (user + system) of a new Python process running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def medians(codes: dict[str, str], repeats: int) -> dict[str, float]:
    """Each code's median CPU seconds, the codes alternating; ``{db}`` is a new file each time,
    ``{existing}`` one store made before."""
    times: dict[str, list[float]] = {k: [] for k in codes}
    with tempfile.TemporaryDirectory() as tmp:
        existing = os.path.join(tmp, "existing.db")
        child_cpu(BASE.format(existing=existing))
        for r in range(repeats):
            for side, code in codes.items():
                times[side].append(child_cpu(code.format(db=os.path.join(tmp, f"{side}-{r}.db"), existing=existing)))
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from focus_tune.tracking.backend import store_template

    store_template()  # made once per MLflow version: not part of what a new store costs
    print(f"CPU seconds of a fresh process, median of {args.repeats}, the sides alternating")
    imports = medians(IMPORTS, args.repeats)
    print(f"  trial worker's imports     before {imports['before']:6.2f}   now {imports['now']:6.2f}   "
          f"ratio {imports['before'] / imports['now']:.2f}x")
    store = medians({**STORE, "base": BASE}, args.repeats)
    base = store["base"]
    before, now = store["before"] - base, store["now"] - base
    print(f"  a new MLflow store         before {before:6.2f}   now {now:6.2f}   saved {before - now:.2f}"
          f"   (beyond the {base:.2f} s of opening a store that exists)")


if __name__ == "__main__":
    main()
