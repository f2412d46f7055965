"""Right-censored sequences through the loss, the metrics and evaluation.

On a censored item only a prefix of entries is observed (``Split.observed``) and, when the
event is not among them, T is only known to exceed the last observed entry
(``Split.censored``). The loss and the entry-level metrics count observed entries only; the
time-to-event metrics weigh the uncensored items by inverse probability of censoring (IPCW,
docs/METRICS.md "Censored items"). Each fast path is checked against a plain loop; an
all-True mask gives the unmasked numbers; and on a large sample with independent censoring
the IPCW estimates recover the values the uncensored times give.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from _reference import naive_sequence_metrics
from focus_tune.data.dataset_reader import Split
from focus_tune.data.sequences import censored_items, time_to_event as stored_time_to_event
from focus_tune.scoring import metrics, survival
from focus_tune.scoring.evaluation import evaluate, score
from focus_tune.scoring.montecarlo import Estimates
from focus_tune.scoring.packed_eval import evaluate_packed
from focus_tune.scoring.temperature import fit_per_entry, fit_pooled
from focus_tune.sim.device_split import DeviceSplit
from focus_tune.sim.model import Simulator
from focus_tune.sim.packed import Member, PackTrainer, member_state_dict, new_pack
from focus_tune.sim.regularization import regularized_loss
from focus_tune.sim.train import train_one_epoch

L, C, EVENT = 7, 4, 3
KEYS = ("ece", "ece_debiased_sq", "overconfidence", "auc", "brier", "ce")


def _prefix_mask(lengths: np.ndarray, length: int = L) -> np.ndarray:
    return np.arange(1, length + 1)[None, :] <= np.asarray(lengths)[:, None]


def _probs_labels(n: int, seed: int, length: int = L):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.ones(C), size=(n, length))
    labels = rng.integers(0, C, (n, length))
    return probs, labels, rng


# ----------------------------------------------------------------------------- the loss


def _loop_loss(z: torch.Tensor, y: torch.Tensor, lam: torch.Tensor, observed: np.ndarray) -> float:
    """Eq. 2 over the observed (item, entry) pairs, one at a time, averaged over the items."""
    B = z.shape[0]
    total = 0.0
    for b in range(B):
        for i in range(z.shape[1]):
            if observed[b, i]:
                zi = z[b, i].double()
                total += float(-torch.log_softmax(zi, 0)[y[b, i]] + lam[i] * torch.sqrt((zi * zi).sum()))
    return total / B


def test_masked_loss_is_a_loop_over_observed_pairs():
    g = torch.Generator().manual_seed(0)
    z, y, lam = torch.randn(6, L, C, generator=g), torch.randint(0, C, (6, L), generator=g), torch.rand(L, generator=g)
    observed = _prefix_mask([1, 3, 7, 2, 5, 4])
    got = regularized_loss(z, y, lam, torch.as_tensor(observed))
    assert got.item() == pytest.approx(_loop_loss(z, y, lam, observed), rel=1e-6)
    # With a member axis: [K, B, L, c], lambdas [K, L], one mask per member -> [K].
    zk, yk = torch.randn(3, 6, L, C, generator=g), torch.randint(0, C, (3, 6, L), generator=g)
    lk = torch.rand(3, L, generator=g)
    masks = np.stack([_prefix_mask(np.random.default_rng(k).integers(1, L + 1, 6)) for k in range(3)])
    got = regularized_loss(zk, yk, lk, torch.as_tensor(masks))
    assert got.shape == (3,)
    for k in range(3):
        assert got[k].item() == pytest.approx(_loop_loss(zk[k], yk[k], lk[k], masks[k]), rel=1e-6)
        assert got[k].item() == pytest.approx(regularized_loss(zk[k], yk[k], lk[k], torch.as_tensor(masks[k])).item(),
                                              rel=1e-6)


def test_an_all_true_mask_is_the_unmasked_loss_and_lambdas_are_checked_per_member():
    g = torch.Generator().manual_seed(1)
    z, y, lam = torch.randn(5, L, C, generator=g), torch.randint(0, C, (5, L), generator=g), torch.rand(L, generator=g)
    everything = torch.ones(5, L, dtype=torch.bool)
    assert torch.equal(regularized_loss(z, y, lam, everything), regularized_loss(z, y, lam))
    with pytest.raises(ValueError, match="for each of the 2 members"):
        regularized_loss(z.expand(2, *z.shape), y.expand(2, *y.shape), lam)  # [L] for a pack of 2


def test_the_masked_loss_passes_no_gradient_to_unobserved_logits():
    g = torch.Generator().manual_seed(2)
    z = torch.randn(4, L, C, generator=g, requires_grad=True)
    y = torch.randint(0, C, (4, L), generator=g)
    observed = torch.as_tensor(_prefix_mask([2, 7, 1, 4]))
    regularized_loss(z, y, torch.full((L,), 0.1), observed).backward()
    assert (z.grad[~observed] == 0).all() and (z.grad[observed].abs().sum(-1) > 0).all()


# ----------------------------------------------------------------------------- entry-level metrics


@pytest.mark.filterwarnings("ignore:Mean of empty slice")  # the naive AUC of a one-item entry
def test_masked_metrics_are_the_naive_references_over_each_entrys_observed_items():
    probs, labels, rng = _probs_labels(60, 3)
    lengths = rng.integers(1, L + 1, 60)
    lengths[:3] = L
    observed = _prefix_mask(lengths)
    observed[:, -1] = False  # an entry no item reaches: NaN, out of the means
    observed[0, -1] = True  # ... then one item: AUC undefined (one label value), the rest defined
    got = metrics.sequence_metrics(probs, labels, observed=observed)
    for i in range(L):
        rows = observed[:, i]
        want = naive_sequence_metrics(probs[rows, i : i + 1], labels[rows, i : i + 1])["per_entry"]
        for key in KEYS:
            assert got["per_entry"][key][i] == pytest.approx(want[key][0], abs=1e-12, nan_ok=True), (key, i)
    assert math.isnan(got["per_entry"]["auc"][-1]) and not math.isnan(got["per_entry"]["ece"][-1])
    for key in ("ece", "overconfidence", "brier", "ce", "ece_debiased_sq"):
        assert got[key] == pytest.approx(np.mean(got["per_entry"][key]), abs=1e-12)
    assert got["auc"] == pytest.approx(np.nanmean(got["per_entry"]["auc"]), abs=1e-12)
    assert got["ece_debiased"] == pytest.approx(metrics.signed_root(got["ece_debiased_sq"]), abs=1e-15)
    # Entries without observed items are NaN and left out of the sequence means.
    observed[:, -1] = False
    empty = metrics.sequence_metrics(probs, labels, observed=observed)
    assert all(math.isnan(empty["per_entry"][k][-1]) for k in KEYS)
    assert empty["ece"] == pytest.approx(np.mean(empty["per_entry"]["ece"][:-1]), abs=1e-12)
    # The filler is never read: other labels and probabilities there give the same numbers.
    other_labels, other_probs = labels.copy(), probs.copy()
    other_labels[~observed] = (labels[~observed] + 1) % C
    other_probs[~observed] = probs[~observed][:, ::-1]
    again = metrics.sequence_metrics(other_probs, other_labels, observed=observed, threads=3)
    assert {k: again[k] for k in KEYS} == pytest.approx({k: empty[k] for k in KEYS}, abs=1e-12, nan_ok=True)


def test_an_all_true_mask_gives_the_unmasked_metrics():
    probs, labels, _ = _probs_labels(80, 4)
    everything = np.ones(labels.shape, bool)
    plain = metrics.sequence_metrics(probs, labels)
    masked = metrics.sequence_metrics(probs, labels, observed=everything)
    assert masked.keys() == plain.keys()
    for key in plain:
        if key == "per_entry":
            for k, v in plain["per_entry"].items():
                np.testing.assert_allclose(masked["per_entry"][k], v, rtol=0, atol=1e-12)
        else:
            assert masked[key] == pytest.approx(plain[key], abs=1e-12)
    # observed=None is the vectorized path itself: the same numbers bit for bit.
    none = metrics.sequence_metrics(probs, labels, observed=None)
    assert all(np.array_equal(none["per_entry"][k], v) for k, v in plain["per_entry"].items())
    assert {k: v for k, v in none.items() if k != "per_entry"} == {k: v for k, v in plain.items() if k != "per_entry"}
    for metric in ("ece", "ece_debiased", "brier", "ce"):
        np.testing.assert_allclose(metrics.item_influence(probs, labels, metric, observed=everything),
                                   metrics.item_influence(probs, labels, metric), rtol=0, atol=1e-12)
    assert metrics.sequence_ece(probs, labels, observed=everything) == pytest.approx(plain["ece"], abs=1e-12)


@pytest.mark.parametrize("metric", ["ece", "brier", "ce"])
def test_masked_influences_sum_to_the_masked_score(metric):
    probs, labels, rng = _probs_labels(70, 5)
    observed = _prefix_mask(rng.integers(1, L + 1, 70))
    observed[:, -1] = False
    share = metrics.item_influence(probs, labels, metric, observed=observed)
    scored = metrics.sequence_metrics(probs, labels, observed=observed)[metric]
    assert share.sum() == pytest.approx(scored, abs=1e-12)
    if metric != "ece":  # means over items: item n's share is its own mean, entry by entry
        entries = np.flatnonzero(observed.any(axis=0))
        p_true = np.take_along_axis(probs, labels[..., None], 2)[..., 0]
        for n in range(0, 70, 7):
            want = 0.0
            for i in entries:
                if observed[n, i]:
                    value = (probs[n, i] ** 2).sum() - 2 * p_true[n, i] + 1 if metric == "brier" \
                        else -math.log(max(p_true[n, i], metrics.CE_EPS))
                    want += value / observed[:, i].sum() / len(entries)
            assert share[n] == pytest.approx(want, abs=1e-12)


def test_masked_label_noise_reads_the_masked_scores():
    probs, labels, rng = _probs_labels(50, 6)
    observed = _prefix_mask(rng.integers(1, L + 1, 50))
    draws = [rng.integers(0, C, labels.shape) for _ in range(4)]
    it = iter(draws)
    noise = metrics.label_noise(probs, lambda: next(it), redraws=4, observed=observed)
    eces = [metrics.sequence_metrics(probs, d, observed=observed) for d in draws]
    assert noise[metrics.LABEL_SD_KEYS[0]] == pytest.approx(np.std([e["ece"] for e in eces], ddof=1), abs=1e-12)
    assert noise[metrics.LABEL_SD_KEYS[1]] == pytest.approx(np.std([e["ece_debiased_sq"] for e in eces], ddof=1),
                                                            abs=1e-12)


# ----------------------------------------------------------------------------- IPCW


def _loop_G(t, censored, upto):
    """G(upto) = prod over s < upto of (1 - h(s)), the reverse Kaplan-Meier, by counting."""
    t = [int(v) for v in t]
    G = 1.0
    for s in range(1, upto):
        # at risk of a censoring seen at s: observed beyond s, or censored at s
        at_risk = sum(1 for u, c in zip(t, censored) if u > s or (u == s and c))
        cens = sum(1 for u, c in zip(t, censored) if c and u == s)
        G *= 1 - cens / max(at_risk, 1)
    return G


def _loop_weights(t, censored):
    """Reverse Kaplan-Meier of the censoring times, and w = delta / G(T), item by item."""
    return [0.0 if c else 1 / _loop_G(t, censored, int(u)) for u, c in zip(t, censored)]


def _loop_known(t, censored, hi=None, length=None):
    """Per item (T or None, weight): T known once entry tau = min(T, floor(hi), L - 1) is seen
    (an item cut at L - 1 has T = L; one observed through floor(hi) is a known miss)."""
    out = []
    for n, (u, c) in enumerate(zip(t, censored)):
        cap = math.inf if length is None else length - 1
        if hi is not None:
            cap = min(cap, max(math.floor(hi[n]), 1))
        if not c:
            out.append((float(u), 1 / _loop_G(t, censored, int(min(u, cap)))))
        elif u >= cap:  # censored at or after tau: T > u >= cap
            T = float(length) if length is not None and u >= length - 1 else None
            out.append((T, 1 / _loop_G(t, censored, int(cap))))
        else:
            out.append((None, 0.0))
    return out


def _loop_interval(lo, hi, point, stored, censored, alpha, length=None):
    known = _loop_known(stored, censored, length=length)
    w = [k[1] for k in known]
    t = [k[0] if k[0] is not None else 0.0 for k in known]
    W = sum(w)
    mean_t = sum(wi * ti for wi, ti in zip(w, t)) / W
    cover_known = _loop_known(stored, censored, hi, length)
    Wc = sum(k[1] for k in cover_known)
    cover = sum(k[1] for k, a, b in zip(cover_known, lo, hi) if k[0] is not None and a <= k[0] <= b) / Wc
    width = sum(b - a for a, b in zip(lo, hi)) / len(lo)
    mae = sum(wi * abs(ti - p) for wi, ti, p in zip(w, t, point)) / W
    scores = 0.0
    for wi, a, b, ti in zip(w, lo, hi, t):
        s = b - a
        if ti < a:
            s += 2 / (1 - alpha) * (a - ti)
        elif ti > b:
            s += 2 / (1 - alpha) * (ti - b)
        scores += wi * s
    return {"coverage": cover, "relative_width": width / mean_t, "relative_mae": mae / mean_t,
            "interval_score": scores / W / mean_t}


def _loop_crps(pmf, stored, censored):
    known = _loop_known(stored, censored, length=len(pmf[0]))
    w = [k[1] for k in known]
    t = [k[0] if k[0] is not None else 0.0 for k in known]
    total = 0.0
    for wi, row, ti in zip(w, pmf, t):
        F, s = 0.0, 0.0
        for k in range(1, len(row) + 1):
            F += row[k - 1]
            s += (F - (1.0 if ti <= k else 0.0)) ** 2
        total += wi * s
    return total / sum(wi * ti for wi, ti in zip(w, t))


def _censored_sample(n: int, length: int, rng, p: float = 0.12):
    """Times T in 1..length (geometric with p, capped) and independent censoring: (observed
    time, censored, T)."""
    T = np.minimum(rng.geometric(p, n), length)
    C_ = rng.integers(1, length + 1, n)  # entries 1..C observed; C = length: fully observed
    censored = (C_ < T)
    return np.where(censored, C_, T), censored, T


def test_an_event_hides_a_censoring_at_the_same_entry():
    # Item 1: event at 1; item 2: censored at 1; item 3: event at 2. At s = 1 a censoring is
    # seen on items observed beyond 1 or censored at 1 (2 and 3), not on item 1, whose event
    # at 1 was seen because entry 1 was: h(1) = 1/2, G(2) = 1/2.
    w = metrics.ipcw_weights(np.array([1, 1, 2]), np.array([False, True, False]))
    assert w.tolist() == [1.0, 0.0, 2.0]


def test_ipcw_weights_and_metrics_are_the_plain_loops():
    rng = np.random.default_rng(7)
    t, censored, _ = _censored_sample(120, 15, rng)
    w = metrics.ipcw_weights(t, censored)
    assert w == pytest.approx(_loop_weights(t, censored), rel=1e-12)
    assert (w[censored] == 0).all() and (w[~censored] >= 1).all()
    lo = rng.integers(1, 8, 120)
    hi = lo + rng.integers(0, 8, 120)
    point = (lo + hi) / 2 + rng.normal(size=120)
    got = metrics.interval_metrics(lo, hi, point, t, 0.8, censored)
    assert got == pytest.approx(_loop_interval(lo, hi, point, t, censored, 0.8), rel=1e-12)
    # With L: an item cut at L - 1 has T = L, known at L - 1.
    assert (censored & (t == 14)).any()
    got = metrics.interval_metrics(lo, hi, point, t, 0.8, censored, length=15)
    assert got == pytest.approx(_loop_interval(lo, hi, point, t, censored, 0.8, length=15), rel=1e-12)
    pmf = rng.dirichlet(np.ones(15), size=120)
    assert metrics.crps(pmf, t, censored) == pytest.approx(_loop_crps(pmf, t, censored), rel=1e-12)
    # No item censored: every weight is 1, the plain means.
    none = np.zeros(120, bool)
    assert metrics.interval_metrics(lo, hi, point, t, 0.8, none) == pytest.approx(
        metrics.interval_metrics(lo, hi, point, t, 0.8), rel=1e-12)
    assert metrics.crps(pmf, t, none) == pytest.approx(metrics.crps(pmf, t), rel=1e-12)
    # Every item censored: nothing is known of T.
    assert all(math.isnan(v) for v in metrics.interval_metrics(lo, hi, point, t, 0.8, ~none).values())
    assert math.isnan(metrics.crps(pmf, np.minimum(t, 13), ~none))
    # ... but an item cut at L - 1 = 14 has T = L = 15: known, and it stands for the others.
    assert metrics.crps(pmf, t, ~none) == pytest.approx(_loop_crps(pmf, t, ~none), rel=1e-12)


def test_ipcw_recovers_the_uncensored_values_under_independent_censoring():
    """200,000 items, T geometric (capped at L), C uniform and independent of T and of the
    item's interval; about 40 % censored. The IPCW estimate on the censored data is compared
    with the same metric of the true times; the tolerance is 5 standard errors of that
    difference by the delta method (first order: (w - 1)(a - R b) / mean(b) per item for
    R = mean(a) / mean(b)). Ignoring the censoring (the last observed entry as T) misses
    coverage, width, interval score and CRPS by many times the tolerance, so the check has
    power. (So does an event at s left in the risk set of a censoring at s: coverage then
    reads 0.010-0.013 high on four seeds, 6-7 standard errors.)"""
    rng = np.random.default_rng(8)
    n, length, alpha = 200_000, 40, 0.9
    t, censored, T = _censored_sample(n, length, rng, p=0.05)
    assert 0.3 < censored.mean() < 0.5
    x = rng.random(n)  # the item: its interval depends on it, the censoring does not
    lo = np.maximum(1, np.round(2 + 6 * x)).astype(float)
    hi = lo + np.round(4 + 14 * x)
    point = (lo + hi) / 2
    pmf = np.full((n, length), 1 / length)
    w = metrics.ipcw_weights(t, censored)
    full = metrics.interval_metrics(lo, hi, point, T, alpha)
    got = metrics.interval_metrics(lo, hi, point, t, alpha, censored)
    naive = metrics.interval_metrics(lo, hi, point, t, alpha)

    def tolerance(a, b, a_weighted=True):
        R = a.mean() / b.mean()
        d = ((w - 1) * a if a_weighted else 0.0) - R * (w - 1) * b
        return 5 * d.std() / b.mean() / math.sqrt(n)

    miss = 2 / (1 - alpha) * (np.maximum(lo - T, 0) + np.maximum(T - hi, 0))
    cdf = np.cumsum(pmf, 1)
    crps_i = ((cdf - (np.arange(1, length + 1)[None] >= T[:, None])) ** 2).sum(1)
    checks = {
        "coverage": tolerance(((T >= lo) & (T <= hi)).astype(float), np.ones(n)),
        "relative_width": tolerance(hi - lo, T.astype(float), a_weighted=False),
        "relative_mae": tolerance(np.abs(T - point), T.astype(float)),
        "interval_score": tolerance(hi - lo + miss, T.astype(float)),
    }
    for key, tol in checks.items():
        assert abs(got[key] - full[key]) < tol, (key, got[key], full[key], tol)
        if key != "relative_mae":  # its numerator and denominator shrink alike here: ignoring censoring is ~0.3 % off
            assert abs(naive[key] - full[key]) > 3 * tol, (key, naive[key], full[key], tol)
    tol = tolerance(crps_i, T.astype(float))
    assert abs(metrics.crps(pmf, t, censored) - metrics.crps(pmf, T)) < tol
    assert abs(metrics.crps(pmf, t) - metrics.crps(pmf, T)) > 3 * tol


# ----------------------------------------------------------------------------- evaluation


def _censored_arrays(n: int, seed: int):
    """Sequences that end in EVENT (absorbing), cut at random lengths: (sequences, lengths)."""
    rng = np.random.default_rng(seed)
    seq = rng.integers(0, EVENT, (n, L))
    ends = rng.integers(2, L + 3, n)  # the event's entry (beyond L: none)
    seq[np.arange(L)[None, :] + 1 >= ends[:, None]] = EVENT
    lengths = rng.integers(1, L + 1, n)
    lengths[: n // 3] = L
    return seq, lengths


def _censored_split(n: int, seed: int, filler: int | None = None) -> DeviceSplit:
    seq, lengths = _censored_arrays(n, seed)
    if filler is not None:  # other values where nothing is observed
        seq = np.where(_prefix_mask(lengths), seq, (seq + filler) % C)
    split = Split("train", np.random.default_rng(seed).integers(0, 256, (n, 3, 16, 16), dtype=np.uint8), seq,
                  stored_time_to_event(seq, EVENT, lengths), None, observed_length=lengths, event_class=EVENT)
    return DeviceSplit.from_arrays(split)


def test_a_device_split_carries_the_mask_and_the_censored_items():
    seq, lengths = _censored_arrays(30, 9)
    split = Split("val", np.zeros((30, 3, 4, 4), np.uint8), seq, stored_time_to_event(seq, EVENT, lengths), None,
                  observed_length=lengths, event_class=EVENT)
    data = DeviceSplit.from_arrays(split, items=20)
    assert data.observed.dtype == torch.bool and data.observed.shape == (20, L)
    np.testing.assert_array_equal(data.observed_numpy, _prefix_mask(lengths[:20]))
    np.testing.assert_array_equal(data.censored, censored_items(seq, EVENT, lengths)[:20])
    full = DeviceSplit.from_arrays(Split("val", split.images, seq, split.time_to_event, None))
    assert full.observed is None and full.censored is None


def test_score_with_censoring_counts_and_weighs():
    seq, lengths = _censored_arrays(90, 10)
    observed, censored = _prefix_mask(lengths), censored_items(seq, EVENT, lengths)
    assert censored.any() and (~censored & (lengths < L)).any()
    t = stored_time_to_event(seq, EVENT, lengths)
    probs, _, rng = _probs_labels(90, 11)
    lo = rng.integers(1, 4, 90).astype(float)
    hi = lo + rng.integers(0, 4, 90)
    cond = rng.dirichlet(np.ones(C), size=(int((seq[:, 0] == 0).sum()), L - 1))
    est = Estimates(probs, lo, hi, (lo + hi) / 2, cond, rng.dirichlet(np.ones(L), size=90))
    group = rng.random(90) < 0.5
    out, extras = score(est, seq, t, condition_class=0, groups={"half": group}, observed=observed, censored=censored)
    assert out["data/censored_items"] == censored.sum() and out["data/unobserved_entries"] == (~observed).sum()
    weights = survival.entry_weights(observed, t, censored)
    assert out["marginal/ece"] == metrics.sequence_metrics(probs, seq, weights=weights)["ece"]
    keep = np.flatnonzero(seq[:, 0] == 0)
    want = metrics.sequence_metrics(cond, seq[keep, 1:], weights=weights[keep, 1:])
    assert out["conditional/ece"] == want["ece"] and out["conditional/brier"] == want["brier"]
    assert out["interval/coverage"] == metrics.interval_metrics(lo, hi, est.point, t, 0.9, censored,
                                                                length=L)["coverage"]
    assert out["interval/crps"] == metrics.crps(est.time_pmf, t, censored)
    known = _loop_known(t, censored, hi, L)
    inside = [k[1] for k, g, a, b in zip(known, group, lo, hi) if g and k[0] is not None and a <= k[0] <= b]
    assert out["interval/coverage_half"] == pytest.approx(sum(inside) / sum(k[1] for k, g in zip(known, group) if g))
    plain, _ = score(est, seq, t, condition_class=0, groups={"half": group})
    assert not any(k.startswith("data/") or k.endswith("_se") for k in plain)
    assert set(out) - set(plain) == {
        "data/censored_items", "data/unobserved_entries", "data/entry_effective_items", "data/largest_entry_weight",
        "data/effective_items", "data/coverage_effective_items", "data/largest_weight", "interval/coverage_se",
        "interval/relative_width_se", "interval/relative_mae_se", "interval/interval_score_se", "interval/crps_se"}


def _model(seed: int) -> Simulator:
    torch.manual_seed(seed)
    return Simulator(C, encoder="small", embed_dim=8, hidden=8).double()


def test_a_training_epoch_on_censored_data_ignores_the_filler():
    """The same model, batches and observed entries, other values in the unobserved ones:
    the same losses and weights bit for bit (an unobserved entry adds exactly 0; the
    observed logits depend on the observed prefix alone)."""
    runs = []
    for filler in (None, 1, 2):
        data = _censored_split(48, 12, filler)
        model = _model(0)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        gen = torch.Generator().manual_seed(0)
        losses = [train_one_epoch(model, opt, data, torch.full((L,), 0.02), 16, gen)["train/loss"] for _ in range(2)]
        runs.append((losses, model.state_dict()))
    assert runs[0][0][1] < runs[0][0][0]
    for losses, state in runs[1:]:
        assert losses == runs[0][0]
        assert all(torch.equal(v, runs[0][1][k]) for k, v in state.items())
    # ... while the unmasked loss reads the filler.
    data, other = _censored_split(48, 12), _censored_split(48, 12, 1)
    data.observed = other.observed = None
    z = [train_one_epoch(_model(0), torch.optim.SGD(_model(0).parameters(), lr=0.0), d, torch.zeros(L), 48,
                         torch.Generator().manual_seed(0))["train/loss"] for d in (data, other)]
    assert z[0] != z[1]


def test_pack_members_on_censored_data_are_their_solo_trials():
    data = _censored_split(40, 13)
    seeds = (0, 1)
    packed, opt = new_pack([_model(s) for s in seeds], lr=1e-2)
    lambdas = [torch.zeros(L, dtype=torch.float64), torch.full((L,), 0.05, dtype=torch.float64)]
    members = [Member(lambdas[k], torch.Generator().manual_seed(s)) for k, s in enumerate(seeds)]
    trainer = PackTrainer(packed, opt, [data], members, 16)
    outs = [trainer.epoch() for _ in range(2)]
    for k, seed in enumerate(seeds):
        model = _model(seed)
        sopt = torch.optim.Adam(model.parameters(), lr=1e-2)
        gen = torch.Generator().manual_seed(seed)
        solo = [train_one_epoch(model, sopt, data, lambdas[k], 16, gen)["train/loss"] for _ in range(2)]
        assert [o[k]["train/loss"] for o in outs] == pytest.approx(solo, abs=1e-9)
        state = member_state_dict(packed, k)
        assert max((state[n] - v).abs().max().item() for n, v in model.state_dict().items()) < 1e-9


def test_evaluate_on_censored_data_and_the_pack_agree():
    data = _censored_split(36, 14)
    models = [_model(s) for s in (0, 1)]
    got = evaluate_packed(new_pack(models, lr=1e-2)[0], [data, data], 12, EVENT,
                          [torch.Generator().manual_seed(k) for k in (0, 1)], threads=1)
    for k, model in enumerate(models):
        want = evaluate(model, data, 12, EVENT, torch.Generator().manual_seed(k))
        assert want["data/censored_items"] == data.censored.sum() > 0
        assert got[k].keys() == want.keys()
        for key, value in want.items():
            assert got[k][key] == pytest.approx(value, abs=1e-9, nan_ok=True), key
    # Filler never enters: other unobserved values, the same scores (same draws: the model
    # does not see the labels when it samples).
    other = _censored_split(36, 14, filler=2)
    again = evaluate(models[0], other, 12, EVENT, torch.Generator().manual_seed(0))
    first = evaluate(models[0], data, 12, EVENT, torch.Generator().manual_seed(0))
    assert again == pytest.approx(first, abs=1e-12, nan_ok=True)


def test_temperature_fits_use_the_observed_live_rows_only():
    rng = np.random.default_rng(15)
    seq, lengths = _censored_arrays(200, 15)
    observed = _prefix_mask(lengths)
    z = rng.normal(size=(200, L, C)) * 2
    other = np.where(observed, seq, (seq + 1) % C)
    a, b = fit_pooled(z, seq, EVENT, observed=observed), fit_pooled(z, other, EVENT, observed=observed)
    assert a.pooled == b.pooled
    c, d = (fit_per_entry(z, y, EVENT, min_rows=20, observed=observed) for y in (seq, other))
    np.testing.assert_array_equal(c.temperature, d.temperature)
    assert (c.live_rows <= observed.sum(0)).all()
    everything = np.ones(seq.shape, bool)
    assert fit_pooled(z, seq, EVENT, observed=everything).pooled == fit_pooled(z, seq, EVENT).pooled


def test_a_final_trials_test_metrics_on_censored_data():
    """A final's scoring (trial.score_final: the test evaluation, the temperature's validation
    choice and its scaled row), without Ray: censoring counted under test/data/..., filler never read."""
    import dataclasses

    from chain import chain_simulator, draw_chain
    from focus_tune.config.space import load_search_config, space_path
    from focus_tune.procedure.job import Splits
    from focus_tune.sim.model_io import DataInfo
    from focus_tune.trial import TrialSplits, score_final

    n, length, event = 150, 20, 2
    sim = chain_simulator()

    def split(name, seed, filler=0):
        rng = np.random.default_rng(seed)
        seq = draw_chain(n, 1, length, rng)[:, 0]
        lengths = rng.integers(1, length + 1, n)
        seq = np.where(_prefix_mask(lengths, length), seq, (seq + filler) % 3)
        return Split(name, np.zeros((n, 3, 8, 8), np.uint8), seq, stored_time_to_event(seq, event, lengths), None,
                     observed_length=lengths, event_class=event)

    train = dataclasses.replace(load_search_config(space_path("hero"), "smoke").train, num_samples=20,
                                val_items=None, test_items=None, event_sampling="model")
    info = DataInfo(num_classes=3, event=event, condition_class=0, in_channels=3)
    outs, files = [], []
    for filler in (0, 1):
        data = Splits(split("train", 3, filler), split("val", 1, filler), split("test", 2, filler))
        out, per_entry = score_final(sim, TrialSplits(data, train, info, torch.device("cpu")), train, info, seed=0,
                                     with_temperature=True)
        out.pop("time/test_s"), out.pop("time/temperature_s"), out.pop("time/conformal_s")
        outs.append(out)
        files.append(per_entry)
    test = split("test", 2)
    # the +conformal rows: calibrated on the censored validation split (IPCW), scored like the others
    assert 0 < outs[0]["conformal/test/interval/conformal_items"] < n
    assert outs[0]["temperature-scaled/conformal/test/interval/coverage"] >= 0
    assert outs[0]["test/data/censored_items"] == test.censored.sum() > 0
    assert outs[0]["test/data/unobserved_entries"] == (~test.observed).sum()
    assert outs[0]["temperature-scaled/test/data/censored_items"] == test.censored.sum()
    assert outs[1] == pytest.approx(outs[0], abs=1e-12, nan_ok=True)
    reliability = files[-1]["test_per_entry"]["reliability"]
    for entry, curve in reliability.items():
        # the weighted curve: its counts are the sums of the observed items' weights
        weights = survival.entry_weights(test.observed, test.time_to_event, test.censored)[:, int(entry) - 1]
        assert sum(curve["count"]) == pytest.approx(weights.sum(), rel=1e-12)
        assert weights.sum() > test.observed[:, int(entry) - 1].sum() or int(entry) == 1
