"""Test-only: the search CLI with injected faults, through the driver's ``trainable`` seam.

``FOCUS_TUNE_TEST_FAULTS='{"<trial_id>": "nan" | "raise@<epoch>" | "slow" | "slow@<epoch>"}'``:
"nan" makes that trial's loss non-finite (its head's bias turns NaN), "raise@N" makes it
raise once at epoch N (not after a resume), to exercise retries from checkpoints, "slow"
makes its first epoch take SLOW_S seconds longer (trials that must overlap, e.g. on two
nodes), and "slow@N" sleeps SLOW_S before epoch N, after the checkpoint of epoch N - 1, unless
the trial was resumed (a window to kill a node or a driver in). Run it like the CLI:
``python tests/fault_search.py --game facemed --profile smoke ...``.
"""

import json
import os
import sys

FAULTS = json.loads(os.environ.get("FOCUS_TUNE_TEST_FAULTS", "{}"))
SLOW_S = float(os.environ.get("FOCUS_TUNE_TEST_SLOW_S", "15"))  # a test may shorten it


def inject(job, epoch, model, resumed):
    fault = FAULTS.get(job.trial_id)
    if fault == "nan":
        import torch

        with torch.no_grad():
            model.head.bias.fill_(float("nan"))
    elif fault == f"raise@{epoch}" and not resumed:
        raise RuntimeError(f"injected fault in {job.trial_id} at epoch {epoch}")
    elif (fault == "slow" and epoch == 1) or (fault == f"slow@{epoch}" and not resumed):
        import time

        time.sleep(SLOW_S)


def faulty_trial(config, data):
    # Imported here, in the trial's process: the driver must not import Ray before it has
    # set the local Ray's token.
    from focus_tune.trainable import run_trial

    run_trial(config, data, on_epoch=inject)


if __name__ == "__main__":
    from focus_tune.search.driver import main

    sys.exit(main(sys.argv[1:], trainable=faulty_trial))
