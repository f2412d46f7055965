"""Which debiased ECE: a simulation on the exact marginals of the built datasets.

The predictions are realistic: the exact marginal probabilities P(Y_i | x) [N, L, c] that the
data generators store with the FaceMed and H.E.R.O. datasets (val split: n = 250 items, test
split: n = 1000 items, L entries each). Labels are drawn R times, independently per item and
entry, from the exact probabilities, and every candidate estimator is computed per entry
and averaged over entries (the sequence-level value, as in focus_tune.scoring.metrics). Predictors:

* calibrated: the exact probabilities themselves (true calibration error 0);
* tempered T: p^(1/T) renormalized (T < 1 sharpens: overconfident);
* Monte Carlo M: the class frequencies of M draws from the exact probabilities, drawn once
  (the kind of prediction the project scores; the noise makes it overconfident).

The truth of a predictor: the same error with every label replaced by its exact probability
of being right (P(Y = top class of the prediction), i.e. the limit of infinitely many label
draws per item), with the same equal-mass bins (they depend on the predictions only). The
l1 estimators are compared with the l1 truth (the paper's ECE scale), the squared ones with
the squared truth.

Candidates (all per entry, 10 equal-mass bins of focus_tune.scoring.metrics unless said; d =
accuracy - mean confidence of a bin, n_b its size):

* paper    : mean over bins of |d| (focus_tune.scoring.metrics.ece, the plug-in);
* kumar_l1 : |d| - (E|N(d, s^2)| - |d|), s^2 = acc (1 - acc) / n_b: the plug-in minus its
             Gaussian-approximation bias (Kumar, Liang & Ma 2019), in closed form;
* sweep_l1 : Roelofs et al. 2022: the largest number of equal-mass bins (split of the sorted
             confidences) whose accuracies are monotone, then the mass-weighted mean |d|
             (its own bins: compared with the 10-bin l1 truth);
* plug_l2  : mean over bins of d^2;
* kumar_l2 : mean over bins of d^2 - acc (1 - acc) / (n_b - 1) (Kumar et al. 2019);
* l2+spread: kumar_l2 + v_b / (n_b - 1), v_b = the variance of the confidences in bin b
             (makes it exactly unbiased for a calibrated predictor whatever the spread in a
             bin): focus_tune.scoring.metrics.ece_debiased, computed by its code.

Printed per case: truth, mean and SD over the R repetitions of each estimator, its bias
(mean - truth) with the bias's standard error SD / sqrt(R), and its RMSE.

    python benchmarks/bench_ece_estimators.py [--games facemed hero] [--profile quick] [--reps 200]
"""

import argparse
import time

import numpy as np
from scipy.stats import norm

from focus_tune.data import ensure_dataset, load_dataset
from focus_tune.scoring.metrics import _bin_ids, _calibration

L1 = ("paper", "kumar_l1", "sweep_l1")
L2 = ("plug_l2", "kumar_l2", "l2+spread")


def tempered(p: np.ndarray, t: float) -> np.ndarray:
    z = np.power(p, 1.0 / t)
    return z / z.sum(-1, keepdims=True)


def monte_carlo(p: np.ndarray, m: int, rng) -> np.ndarray:
    """Class frequencies of m draws per (item, entry): [N, L, c] -> [N, L, c]."""
    return rng.multinomial(m, p) / m


def binned_sums(bins: np.ndarray, values: np.ndarray, n_bins: int) -> np.ndarray:
    """Per (column, bin) sums of values [..., N, L] (leading axes: repetitions) -> [..., L, B]."""
    N, L = bins.shape
    flat = (np.arange(L)[None, :] * n_bins + bins).ravel()
    lead = values.shape[:-2]
    v = values.reshape(-1, N * L)
    out = np.stack([np.bincount(flat, weights=row, minlength=L * n_bins) for row in v])
    return out.reshape(lead + (L, n_bins))


def sweep_l1(conf: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """Roelofs et al.'s monotone sweep, per (repetition, entry): conf [N, L], correct [R, N, L] -> [R, L]."""
    N, L = conf.shape
    order = np.argsort(conf, axis=0, kind="stable")  # [N, L]
    cs = np.take_along_axis(conf, order, 0)
    ys = np.take_along_axis(correct, order[None], 1)  # [R, N, L]
    cum_c = np.concatenate([np.zeros((1, L)), np.cumsum(cs, 0)])  # [N+1, L]
    cum_y = np.concatenate([np.zeros(ys.shape[:1] + (1, L)), np.cumsum(ys, 1)], axis=1)  # [R, N+1, L]
    result = np.full(correct.shape[:1] + (L,), np.nan)
    # All right (or all wrong): every split is monotone and |acc - conf| has one sign, so
    # every b gives the 1-bin value; stop those columns after b = 1 (else they run to b = N).
    alive = ~(correct == correct[:, :1]).all(axis=1)  # [R, L]
    first = True
    for b in range(1, N + 1):
        # np.array_split's boundaries: the first N % b chunks hold one item more.
        sizes = np.full(b, N // b) + (np.arange(b) < N % b)
        edge = np.concatenate([[0], np.cumsum(sizes)])
        acc = np.diff(cum_y[:, edge], axis=1) / sizes[None, :, None]  # [R, b, L]
        mean_c = np.diff(cum_c[edge], axis=0) / sizes[:, None]  # [b, L]
        monotone = (np.diff(acc, axis=1) >= 0).all(axis=1)  # [R, L]
        value = (np.abs(acc - mean_c[None]) * (sizes / N)[None, :, None]).sum(1)
        alive &= monotone
        result = np.where(alive | first, value, result)  # ends as the last monotone b's value
        first = False
        if not alive.any():
            break
    return result


def estimators(conf: np.ndarray, correct: np.ndarray, n_bins: int) -> dict[str, np.ndarray]:
    """Every candidate's sequence-level value per repetition: conf [N, L], correct [R, N, L] -> {name: [R]}."""
    bins = _bin_ids(conf, n_bins)
    count = binned_sums(bins, np.ones_like(conf), n_bins)  # [L, B]
    sum_c = binned_sums(bins, conf, n_bins)
    sum_y = binned_sums(bins, correct, n_bins)  # [R, L, B]
    filled = count > 0
    n = np.where(filled, count, 1)
    acc, cbar = sum_y / n, sum_c / n
    d = acc - cbar
    s = np.sqrt(acc * (1 - acc) / n)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(s > 0, d / s, 0.0)
    e_abs = np.where(s > 0, s * 2 * norm.pdf(r) + d * (2 * norm.cdf(r) - 1), np.abs(d))  # E|N(d, s^2)|
    var_hat = np.where(n > 1, acc * (1 - acc) / np.maximum(n - 1, 1), 0.0)
    per_bin = {
        "paper": np.abs(d),
        "kumar_l1": 2 * np.abs(d) - e_abs,
        "plug_l2": d**2,
        "kumar_l2": d**2 - var_hat,
    }
    out = {k: (np.where(filled, v, 0).sum(-1) / filled.sum(-1)).mean(-1) for k, v in per_bin.items()}
    out["sweep_l1"] = sweep_l1(conf, correct).mean(-1)
    # kumar_l2 + v_b / (n_b - 1): the library's own code, so these rows are ece_debiased's.
    out["l2+spread"] = np.array([_calibration(conf, c, n_bins)[1].mean() for c in correct])
    return out


def truth(conf: np.ndarray, q: np.ndarray, n_bins: int) -> dict[str, float]:
    """The binned errors with each label replaced by its exact probability q of being right."""
    bins = _bin_ids(conf, n_bins)
    count = binned_sums(bins, np.ones_like(conf), n_bins)
    filled = count > 0
    gap = (binned_sums(bins, q, n_bins) - binned_sums(bins, conf, n_bins)) / np.where(filled, count, 1)
    l1 = (np.where(filled, np.abs(gap), 0).sum(-1) / filled.sum(-1)).mean()
    l2 = (np.where(filled, gap**2, 0).sum(-1) / filled.sum(-1)).mean()
    return {"l1": float(l1), "l2": float(l2)}


def run_case(name: str, pred: np.ndarray, exact: np.ndarray, reps: int, n_bins: int, rng, chunk: int = 25) -> None:
    conf = pred.max(-1)
    q = np.take_along_axis(exact, pred.argmax(-1)[..., None], -1)[..., 0]  # P(right) [N, L]
    true = truth(conf, q, n_bins)
    values: dict[str, list] = {}
    for start in range(0, reps, chunk):
        k = min(chunk, reps - start)
        correct = (rng.random((k,) + q.shape) < q[None]).astype(np.float64)  # [k, N, L]
        for key, v in estimators(conf, correct, n_bins).items():
            values.setdefault(key, []).append(v)
    print(f"  {name}: true l1 {true['l1']:.5f}, true l2 {true['l2']:.3e}")
    for key in L1 + L2:
        v = np.concatenate(values[key])
        t = true["l1"] if key in L1 else true["l2"]
        bias, sd = v.mean() - t, v.std(ddof=1)
        rmse = np.sqrt(np.mean((v - t) ** 2))
        fmt = ".5f" if key in L1 else ".3e"
        se = sd / np.sqrt(len(v))
        print(f"    {key:10s} mean {v.mean():{fmt}}  sd {sd:{fmt}}  bias {bias:+{fmt}} (se {se:{fmt}})"
              f"  rmse {rmse:{fmt}}  rmse/truth {rmse / t if t > 0 else float('nan'):6.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--games", nargs="+", default=["facemed", "hero"])
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--data-root", default="data_cache")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--bins", type=int, default=10)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.8, 1.25])
    ap.add_argument("--mc", type=int, default=100, help="M of the Monte Carlo predictor")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    print(f"R = {args.reps} repetitions, {args.bins} bins, seed {args.seed}")
    for game in args.games:
        ds = load_dataset(ensure_dataset(game, args.profile, root=args.data_root))
        m = ds.manifest
        for split in ("val", "test"):
            exact = np.asarray(getattr(ds, split).exact_marginals, dtype=np.float64)
            exact /= exact.sum(-1, keepdims=True)
            N, L, c = exact.shape
            print(f"\n{game} {args.profile} ({m.generator_version}) {split}: n = {N} items, L = {L}, c = {c}, "
                  f"mean top probability {exact.max(-1).mean():.3f}")
            run_case("calibrated", exact, exact, args.reps, args.bins, rng)
            for t in args.temperatures:
                run_case(f"tempered T={t:g}", tempered(exact, t), exact, args.reps, args.bins, rng)
            if args.mc:
                run_case(f"Monte Carlo M={args.mc}", monte_carlo(exact, args.mc, rng), exact, args.reps, args.bins, rng)
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
