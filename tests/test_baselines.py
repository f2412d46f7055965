"""The baselines against independent computations: scipy, naive loops, the generators' exact truth."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from focus_tune.data import DatasetWriter, build_dataset, ensure_dataset, load_dataset
from focus_tune.data.builtin import ale, facemed
from focus_tune.scoring import baselines
from focus_tune.scoring.baselines import (
    ImageBayes,
    ImageBlind,
    Oracle,
    Scoring,
    has_image_bayes,
    has_oracle,
    oracle_samples,
    split_temperature_scaled,
    with_baselines,
)
from focus_tune.scoring.metrics import LABEL_SD_KEYS
from focus_tune.scoring.montecarlo import marginal_probs

TRAIN = Scoring(num_samples=50, ece_bins=10, alpha=0.9)


# ----------------------------------------------------------------------------- temperature


def test_split_temperature_scaled_rows_by_hand():
    rows = [{"seed": 0, "test/marginal/ece": 0.1, "temperature-scaled/test/marginal/ece": 0.05,
             "temperature-scaled/test/per_entry": '{"a": 1}', "test_per_entry": "{}"},
            {"seed": 1, "test/marginal/ece": 0.2}]
    own, scaled = split_temperature_scaled(rows)
    assert own == [{"seed": 0, "test/marginal/ece": 0.1, "test_per_entry": "{}"}, rows[1]]
    assert scaled == [{"seed": 0, "test/marginal/ece": 0.05, "test_per_entry": '{"a": 1}'}]


# ----------------------------------------------------------------------------- image-blind


def test_image_blind_draws_training_sequences():
    rng = np.random.default_rng(2)
    n_train, L, c, b = 40, 6, 4, 0
    train = rng.integers(0, c, (n_train, L))
    blind = ImageBlind(train, num_items=5, num_classes=c)
    s = blind.sample(3000, np.random.default_rng(0))
    assert s.shape == (5, 3000, L)
    known = {tuple(x) for x in train.tolist()}
    assert all(tuple(x) in known for x in s.reshape(-1, L)[:500].tolist())  # only training sequences
    # Every item's counted marginals are the training frequencies up to Monte Carlo error.
    freq = marginal_probs(train[None], c)[0]
    assert _within(marginal_probs(s, c), np.broadcast_to(freq, (5, L, c)), 3000)
    np.testing.assert_array_equal(blind.marginals(), np.broadcast_to(freq, (5, L, c)))
    cond = blind.sample(50, np.random.default_rng(1), first=b, items=np.array([1, 3]))
    assert cond.shape == (2, 50, L) and np.all(cond[:, :, 0] == b)
    with pytest.raises(ValueError, match="starts with class"):
        ImageBlind(np.ones((3, L), dtype=int), 2, c).sample(2, rng, first=0)


# ----------------------------------------------------------------------------- oracle


@pytest.fixture(scope="module")
def hero_smoke(tmp_path_factory):
    return load_dataset(build_dataset("hero", "smoke", tmp_path_factory.mktemp("oracle") / "hero"))


@pytest.fixture(scope="module")
def facemed_smoke(tmp_path_factory):
    return load_dataset(ensure_dataset("facemed", "smoke", tmp_path_factory.mktemp("oracle")))


def _within(est, exact, M, z=5.0):
    """|estimate - truth| within z binomial standard errors (plus a small slack) everywhere."""
    return np.all(np.abs(est - exact) <= z * np.sqrt(exact * (1 - exact) / M) + 2e-3)


def _player_conditional(params, b):
    """P(Y_i = a | Y_1 = b, x) for the player chain, by a naive loop over states (one item)."""
    L, first = params.hazard.shape[1], np.zeros(ale.END + 1)
    first[b] = 1.0
    out = [first]
    for i in range(1, L):
        prev, cur = out[-1], np.zeros(ale.END + 1)
        cur[ale.END] += prev[ale.END]
        for a in range(ale.END):
            if prev[a] == 0:
                continue
            live = prev[a] * (1 - params.hazard[0, i])
            cur[ale.END] += prev[a] * params.hazard[0, i]
            cur[a] += live * params.stick[0]
            cur[:ale.END] += live * (1 - params.stick[0]) * params.switch[0]
        out.append(cur)
    return np.array(out)


def test_player_oracle_follows_the_exact_truth(hero_smoke):
    m, test = hero_smoke.manifest, hero_smoke.test
    assert has_oracle(m, test)
    idx, M = np.arange(3), 4000
    extras = {k: v[idx] for k, v in test.extras.items()}
    s = oracle_samples(m, test.images[idx], extras, M, np.random.default_rng(0), chunk=2)
    assert s.shape == (3, M, m.length)
    assert _within(marginal_probs(s, m.num_classes), test.exact_marginals[idx].astype(np.float64), M)
    b = m.condition_class
    cond = oracle_samples(m, test.images[idx], extras, M, np.random.default_rng(1), first=b)
    assert np.all(cond[:, :, 0] == b)
    params = ale.params_from_manifest(test.images[idx], m)
    for k in range(3):
        exact = _player_conditional(params.take(np.array([k])), b)
        assert _within(marginal_probs(cond[k:k + 1], m.num_classes)[0], exact, M)
    with pytest.raises(ValueError, match="action"):
        oracle_samples(m, test.images[idx], extras, 2, np.random.default_rng(0), first=ale.END)


def test_facemed_oracle_follows_the_chain(facemed_smoke):
    m, test = facemed_smoke.manifest, facemed_smoke.test
    assert has_oracle(m, test)
    ages = np.array([30, 60, 79, 85])
    images = np.zeros((4, *m.image_shape), np.uint8)
    M, L = 4000, m.length
    s = oracle_samples(m, images, {"age": ages}, M, np.random.default_rng(0))
    assert _within(marginal_probs(s, 3), facemed.exact_marginals_batch(ages, L), M)
    cond = oracle_samples(m, images, {"age": ages}, M, np.random.default_rng(1), first=facemed.HEALTHY)
    for k, age in enumerate(ages):
        p, exact = np.array([1.0, 0.0, 0.0]), [np.array([1.0, 0.0, 0.0])]  # Y_1 = healthy
        for i in range(1, L):  # entry i + 1 is reached with the transition of age + i
            p = p @ facemed.transition_matrix(age + i)
            exact.append(p)
        assert _within(marginal_probs(cond[k:k + 1], 3)[0], np.array(exact), M)
    with pytest.raises(ValueError, match="healthy"):
        oracle_samples(m, images, {"age": ages}, 2, np.random.default_rng(0), first=facemed.ILL)


# ----------------------------------------------------------------------------- report rows


def test_baseline_rows_on_a_dataset_with_truth(facemed_smoke):
    finals = {"none": [{"seed": 3, "test/marginal/ece": 0.2, "temperature-scaled/test/marginal/ece": 0.1}]}
    assert has_image_bayes(facemed_smoke.manifest, facemed_smoke.test)
    rows = with_baselines(finals, facemed_smoke, TRAIN, seeds=[3, 4])
    assert rows["none"] == [{"seed": 3, "test/marginal/ece": 0.2}]
    assert rows["temperature-scaled"][0]["test/marginal/ece"] == 0.1
    for family in ("oracle", "image-blind", "image-Bayes"):
        assert [r["seed"] for r in rows[family]] == [3, 4], family  # sampled: one row per final seed
    assert [r["seed"] for r in rows["exact"]] == [None]
    for family in ("oracle", "image-blind", "image-Bayes", "exact"):
        for row in rows[family]:
            for key in ("test/marginal/ece", "test/marginal/auc", "test/marginal/brier", "test/marginal/rmse",
                        "test/interval/coverage", "test/interval/crps", "test/conditional/items",
                        "test/interval/coverage_age_under_40"):
                assert np.isfinite(row[key]), (family, key)
            assert "marginal" in row["test_per_entry"]
    oracle, blind = rows["oracle"], rows["image-blind"]
    assert oracle[0]["test/marginal/leak"] == 0.0 == blind[0]["test/marginal/leak"]  # absorbing data
    assert oracle[0]["test/marginal/ece"] != oracle[1]["test/marginal/ece"]  # seeds differ
    assert blind[0]["test/marginal/ece"] != blind[1]["test/marginal/ece"]  # the blind row is sampled too
    assert rows["exact"][0]["test/marginal/rmse"] < 1e-6  # the stored truth is float32
    # The labels' own noise rides on the exact row only (redrawn sequences of the same items).
    sd_ece, sd_sq = (rows["exact"][0][k] for k in LABEL_SD_KEYS)
    assert 0 < sd_ece < 1 and 0 < sd_sq < 1  # a smoke split has few items: large, but finite
    assert not any(k in rows["oracle"][0] for k in LABEL_SD_KEYS)
    # Truth, then the best image-only predictor, then no image: further and further from the truth.
    rmse = {f: np.mean([r["test/marginal/rmse"] for r in rows[f]]) for f in ("oracle", "image-Bayes", "image-blind")}
    assert rmse["oracle"] < rmse["image-Bayes"] < rmse["image-blind"], rmse


def test_no_oracle_without_a_true_process(tmp_path):
    rng = np.random.default_rng(4)
    L, c = 5, 3
    with DatasetWriter(tmp_path / "ds", class_names=["a", "b", "END"], length=L, image_shape=(1, 2, 2),
                       event_class=2, has_exact_marginals=False) as w:
        for split, n in (("train", 30), ("val", 5), ("test", 8)):
            w.add(split, rng.integers(0, 255, (n, 1, 2, 2)), rng.integers(0, c, (n, L)))
        w.commit(name="x", source="test", game="hero", profile=None, sampling_freq=2,
                 generator="atari-head-import", generator_version="1", seed=0)
    ds = load_dataset(tmp_path / "ds")
    assert not has_oracle(ds.manifest, ds.test)
    rows = baselines.baseline_rows(ds, TRAIN, seeds=[0])
    assert rows["oracle"] == rows["exact"] == rows["image-Bayes"] == [] and len(rows["image-blind"]) == 1
    assert "test/marginal/rmse" not in rows["image-blind"][0]


def test_every_built_in_scenario_registers_its_true_process():
    from focus_tune.data import BUILTIN_SCENARIOS, true_process
    from focus_tune.data.builtin.process import register

    assert all(true_process(s) is not None for s in BUILTIN_SCENARIOS)
    assert true_process("hero") is true_process("roadrunner") is not true_process("facemed")  # one player process
    assert true_process(None) is None and true_process("mine") is None  # one's own data
    with pytest.raises(ValueError, match="has a true process already"):
        register(object(), "facemed")


def test_true_process_marginals_are_exact(hero_smoke, facemed_smoke):
    m, test = hero_smoke.manifest, hero_smoke.test
    idx = np.arange(3)
    truth = Oracle(m, test.images[idx], {k: v[idx] for k, v in test.extras.items()})
    np.testing.assert_allclose(truth.marginals(), test.exact_marginals[idx], atol=1e-6)  # stored as float32
    cond = truth.marginals(first=m.condition_class, items=np.array([1]))
    params = ale.params_from_manifest(test.images[1:2], m)
    np.testing.assert_allclose(cond[0], _player_conditional(params, m.condition_class), atol=1e-12)
    fm = facemed_smoke.manifest
    ages = np.array([30, 60, 85])
    truth = Oracle(fm, np.zeros((3, *fm.image_shape), np.uint8), {"age": ages})
    np.testing.assert_allclose(truth.marginals(), facemed.exact_marginals_batch(ages, fm.length))
    given = truth.marginals(first=facemed.HEALTHY)
    p = np.array([1.0, 0.0, 0.0])
    for i in range(1, fm.length):  # entry i + 1 is reached with the transition of age + i
        p = p @ facemed.transition_matrix(85 + i)
        np.testing.assert_allclose(given[2, i], p, atol=1e-12)


# ----------------------------------------------------------------------------- image-Bayes


def test_age_posterior_is_calibrated_and_sharp():
    """Subjects drawn like the generator's: the posterior's band probabilities match the
    band frequencies within each decile of predicted probability, and they are sharp."""
    from focus_tune.data.builtin.faces import apparent_age

    rng = np.random.default_rng(7)
    ages = facemed.sample_ages(20000, rng)
    looks = apparent_age(ages, rng)
    post = facemed.age_posterior(looks)
    assert post.shape == (20000, facemed.MAX_AGE + 1)
    np.testing.assert_allclose(post.sum(axis=1), 1.0)
    grid = np.arange(facemed.MAX_AGE + 1)
    for band, mask in facemed.age_bands(grid).items():
        p = post[:, mask].sum(axis=1)  # P(band | look)
        hit = facemed.age_bands(ages)[band]
        for lo in np.arange(0, 1, 0.1):
            sel = (p >= lo) & (p < lo + 0.1 + 1e-12)
            if sel.sum() >= 200:
                se = np.sqrt(p[sel].mean() * (1 - p[sel].mean()) / sel.sum())
                assert abs(hit[sel].mean() - p[sel].mean()) <= 4 * se + 0.01, (band, lo)
    true_band = np.stack([post[:, m].sum(axis=1) for m in facemed.age_bands(grid).values()], axis=1)
    which = np.argmax(np.stack(list(facemed.age_bands(ages).values()), axis=1), axis=1)
    assert true_band[np.arange(len(ages)), which].mean() > 0.85  # the face tells the regime
    # Clipped looks (babies often look 0): the clip's mass, not a density.
    assert (looks == 0).any() and post[looks == 0][:, :5].sum(axis=1).min() > 0.9


def test_image_bayes_samples_follow_the_posterior_mixture(facemed_smoke):
    looks = np.array([0.0, 35.0, 62.0, 90.0])
    L, M = 30, 6000
    bayes = ImageBayes(replace(facemed_smoke.manifest, length=L), {"apparent_age": looks})
    s = bayes.sample(M, np.random.default_rng(3))
    post = facemed.age_posterior(looks)
    mixture = np.einsum("na,alc->nlc", post, facemed.exact_marginals_batch(np.arange(post.shape[1]), L))
    assert _within(marginal_probs(s, 3), mixture, M)
    # Given Y_1 = healthy: the posterior reweighted by P(Y_1 = healthy | age), then the chain a year later.
    c = bayes.sample(M, np.random.default_rng(4), first=facemed.HEALTHY, items=np.array([3]))
    w = post[3] * facemed.healthy_at_first(np.arange(post.shape[1]))
    w /= w.sum()
    later = facemed.exact_marginals_batch(np.arange(post.shape[1]) + 1.0, L - 1)
    expected = np.concatenate([[[1.0, 0.0, 0.0]], np.einsum("a,alc->lc", w, later)])
    assert np.all(c[:, :, 0] == facemed.HEALTHY) and _within(marginal_probs(c, 3)[0], expected, M)


# ----------------------------------------------------------------------------- exact row


def test_exact_estimates_give_the_true_time_to_event_distribution():
    from focus_tune.scoring.montecarlo import estimates_from_marginals, interval, time_to_event

    ages = np.array([45.0, 70.0, 88.0])
    L = 40
    est = estimates_from_marginals(facemed.exact_marginals_batch(ages, L), None, facemed.DEAD, alpha=0.8)
    times = time_to_event(facemed.sample_sequences(np.repeat(ages, 20000), L, np.random.default_rng(5))
                          .reshape(3, 20000, L), facemed.DEAD)
    for k in range(3):
        counted = np.bincount(times[k], minlength=L + 1)[1:] / 20000
        np.testing.assert_allclose(est.time_pmf[k], counted, atol=0.012)
        np.testing.assert_allclose(est.time_pmf[k].sum(), 1.0)
    assert np.allclose(est.point, times.mean(axis=1), rtol=0.02)
    lo, hi = interval(times, 0.8)
    assert np.all(np.abs(est.lo - lo) <= 1) and np.all(np.abs(est.hi - hi) <= 1)
    # A subject under 40 - L never dies within L entries: T = L surely.
    young = estimates_from_marginals(facemed.exact_marginals_batch(np.array([10.0]), L), None, facemed.DEAD, 0.9)
    assert young.lo[0] == young.hi[0] == young.point[0] == L and young.time_pmf[0, -1] == 1.0


# ----------------------------------------------------------------------------- Rao-Blackwellized baselines


def test_empirical_conditionals_by_hand():
    seqs = np.array([[0, 1, 2], [0, 1, 1], [0, 2, 2], [1, 1, 2]])
    p = baselines.empirical_conditionals(seqs, 3)
    np.testing.assert_allclose(p[:, 0], [[0.75, 0.25, 0]] * 4)  # Y_1 over all four
    np.testing.assert_allclose(p[0, 1], [0, 2 / 3, 1 / 3])  # after 0: 1, 1, 2
    np.testing.assert_allclose(p[3, 1], [0, 1, 0])  # after 1: only the last sequence
    np.testing.assert_allclose(p[0, 2], [0, 0.5, 0.5])  # after 0, 1: 2 and 1
    np.testing.assert_allclose(p[2, 2], [0, 0, 1])


def test_facemed_and_player_conditionals_follow_their_chains(hero_smoke):
    seqs = np.array([[0, 1, 1, 2], [0, 0, 1, 0]])
    ages = np.array([79.0, 39.0])
    p = facemed.conditionals(seqs, ages)
    for n in range(2):
        prev = facemed.HEALTHY
        for i in range(4):
            np.testing.assert_allclose(p[n, i], facemed.transition_matrix(ages[n] + i)[prev])
            prev = seqs[n, i]
    m, test = hero_smoke.manifest, hero_smoke.test
    params = ale.params_from_manifest(test.images[:2], m)
    s = oracle_samples(m, test.images[:2], {}, 5, np.random.default_rng(0))
    p = ale.conditionals(params, s)
    for n in range(2):
        for k in range(5):
            for i in range(m.length):
                prev = s[n, k, i - 1] if i else None
                if prev == ale.END:
                    expected = np.eye(ale.END + 1)[ale.END]
                else:
                    h = params.hazard[n, i]
                    if i == 0:
                        actions = params.first[n]
                    else:
                        actions = (1 - params.stick[n]) * params.switch[n] + params.stick[n] * np.eye(ale.END)[prev]
                    expected = np.append((1 - h) * actions, h)
                np.testing.assert_allclose(p[n, k, i], expected, atol=1e-12)


def test_rao_blackwellized_baselines_are_unbiased_and_less_noisy(facemed_smoke):
    m, test = facemed_smoke.manifest, facemed_smoke.test
    n, M, R = 6, 30, 40
    extras = {k: np.asarray(v[:n]) for k, v in test.extras.items()}
    truth = Oracle(m, np.asarray(test.images[:n]), extras)
    bayes = ImageBayes(m, extras)
    blind = ImageBlind(facemed_smoke.train.sequences, n, 3)
    post = facemed.age_posterior(extras["apparent_age"])
    targets = {"oracle": (truth, truth.marginals()),
               "image-Bayes": (bayes, np.einsum("na,alc->nlc", post,
                                                facemed.exact_marginals_batch(np.arange(post.shape[1]), m.length))),
               "image-blind": (blind, blind.marginals())}
    for name, (predictor, exact) in targets.items():
        rb, counted = [], []
        for seed in range(R):
            samples, along = predictor.draw(M, np.random.default_rng(seed))
            rb.append(baselines.rao_blackwell(samples, along, facemed.DEAD, chunk=4).marginals)
            counted.append(marginal_probs(samples, 3))
        rb, counted = np.array(rb), np.array(counted)
        se = rb.std(axis=0, ddof=1) / np.sqrt(R) + 1e-12
        assert np.all(np.abs(rb.mean(axis=0) - exact) <= 5 * se + 2e-3), name  # slack: rare ages never drawn
        assert rb.var(axis=0).sum() < 0.9 * counted.var(axis=0).sum(), name


def test_rows_with_the_rao_blackwell_estimator(facemed_smoke):
    scoring = Scoring(num_samples=TRAIN.num_samples, ece_bins=10, alpha=0.9, estimator="rao_blackwell")
    rows = baselines.baseline_rows(facemed_smoke, scoring, seeds=[0])
    counted = baselines.baseline_rows(facemed_smoke, TRAIN, seeds=[0])
    for family in ("oracle", "image-Bayes", "image-blind"):
        r = rows[family][0]
        assert np.isfinite(r["test/marginal/ece"]) and np.isfinite(r["test/conditional/ece"]), family
    # The oracle's estimates move towards the truth.
    assert rows["oracle"][0]["test/marginal/rmse"] < counted["oracle"][0]["test/marginal/rmse"]
