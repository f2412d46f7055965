"""Rao-Blackwellized vs counted Monte Carlo estimates: noise at equal draws, and their cost.

A simulator whose weights encode a known Markov chain (tests/chain.py: the simulator *is*
the chain, so the exact marginals and time-to-event pmf are known) is sampled R times with
M draws per item, with and without the Rao-Blackwellized sums (the same draws). Printed: the
RMSE to the exact marginals and pmf of each estimator, the ratio, the M that counting would
need for the Rao-Blackwellized RMSE (RMSE ~ 1/sqrt(M)), and the time of both samplers.

    python benchmarks/bench_rao_blackwell.py [--items 64 --draws 100 --length 100 --repeats 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from chain import chain_simulator, exact_marginals  # noqa: E402
from focus_tune.scoring.montecarlo import marginal_probs, time_pmf, time_to_event  # noqa: E402

# A slower chain than the tests' (mean time to the absorbing class ~ 12 entries), so that
# many entries are uncertain, as in the H.E.R.O. data (mean length ~ 44 of 300 entries).
P = np.array([[0.85, 0.1, 0.05], [0.15, 0.75, 0.1], [0.0, 0.0, 1.0]])
P0 = np.array([0.6, 0.35, 0.05])
EVENT = 2


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=64)
    ap.add_argument("--draws", type=int, default=100, help="M")
    ap.add_argument("--length", type=int, default=100, help="L")
    ap.add_argument("--repeats", type=int, default=20, help="R: independent estimates")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    sim = chain_simulator(P, P0)
    B, M, L = args.items, args.draws, args.length
    images = torch.zeros(B, 3, 8, 8, dtype=torch.uint8)
    exact = exact_marginals(L, P, P0)
    exact_t = np.diff(exact[:, EVENT], prepend=0.0)
    exact_t[-1] = 1 - exact_t[:-1].sum()
    err = {k: [] for k in ("counted", "rb", "counted_t", "rb_t")}
    t_plain, t_rb = [], []
    for seed in range(args.repeats):
        t0 = time.perf_counter()
        plain = sim.sample(images, M, L, torch.Generator().manual_seed(seed))
        t_plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        samples, marg, pmf = sim.sample(images, M, L, torch.Generator().manual_seed(seed), rao_blackwell=EVENT)
        t_rb.append(time.perf_counter() - t0)
        assert torch.equal(plain, samples)
        err["counted"].append(marginal_probs(samples, 3) - exact)
        err["rb"].append(marg.numpy() - exact)
        err["counted_t"].append(time_pmf(time_to_event(samples, EVENT), L) - exact_t)
        err["rb_t"].append(pmf.numpy() - exact_t)
    rmse = {k: float(np.sqrt(np.mean(np.square(v)))) for k, v in err.items()}
    print(f"chain simulator, {B} items x M = {M} x L = {L}, R = {args.repeats}, {args.threads} thread(s)")
    print(f"{'quantity':<22}{'counted RMSE':>14}{'RB RMSE':>12}{'ratio':>8}{'M for counting':>16}")
    for name, a, b in (("marginals", "counted", "rb"), ("time-to-event pmf", "counted_t", "rb_t")):
        ratio = rmse[b] / rmse[a]
        print(f"{name:<22}{rmse[a]:>14.5f}{rmse[b]:>12.5f}{ratio:>8.3f}{M / ratio**2:>16.0f}")
    sp, sr = np.median(t_plain), np.median(t_rb)
    print(f"sampling time (median): {sp * 1e3:.1f} ms plain, {sr * 1e3:.1f} ms with the sums ({sr / sp:.2f}x)")


if __name__ == "__main__":
    main()
