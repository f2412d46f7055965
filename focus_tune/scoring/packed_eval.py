"""Packed evaluation: the Monte Carlo validation of every member of a pack at once.

:func:`sample_packed` is :meth:`Simulator.sample` for K members in one loop: one
``baddbmm`` per entry for all members' rows, many items per chunk (the solo sampler takes 64
items at a time and is launch-bound on a GPU), the draws kept on the device as bytes. Each
member draws its uniforms from its own generator on the CPU exactly as the solo sampler does,
so a member's samples equal its solo samples (the same seed gives the same draws whatever the
chunking: the CPU generator's stream does not depend on how it is cut).

:func:`evaluate_packed` turns them into :func:`focus_tune.scoring.evaluation.evaluate`'s result for each
member: each member's draws copied to the CPU (one byte per entry), then the estimates of
:func:`focus_tune.scoring.montecarlo.estimate` and :func:`~focus_tune.scoring.evaluation.score` (the one
estimator and the one implementation of the metrics), one thread per member. The counted
estimator (the paper's and the default) is supported; the Rao-Blackwellized one and
temperatures are the solo path's.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import torch

from ..names import EVENT_SAMPLING
from ..sim.device_split import DeviceSplit, stacked_observed
from ..sim.model import sampler_cell, sampler_weights
from ..sim.packed import PackedSimulator
from . import montecarlo
from .evaluation import score

# Rows (items x M) of all members simulated together: h, the cell and the gates take about
# 6 x hidden x 4 bytes per row (2^19 rows at hidden 256: ~3 GB); the uniforms of the next
# chunk are drawn on the CPU while the device samples this one.
DEFAULT_ROWS = 2**19


@torch.no_grad()
def sample_packed(packed: PackedSimulator, images: torch.Tensor, num_samples: int, length: int,
                  generators: Sequence[torch.Generator], forced_event: int | None = None,
                  rows: int = DEFAULT_ROWS) -> torch.Tensor:
    """Draws of every member: images uint8 [K, N, C, H, W] -> samples uint8 [K, N, M, L] on the device.

    ``forced_event``: the class forced to repeat once drawn (as :meth:`Simulator.sample`'s, which
    drops such rows; here they are masked, which gives the same draws). ``rows`` bounds the
    rows (all members' items x M) simulated at once; items go in chunks of ``rows // (K M)``.
    """
    K, N = images.shape[:2]
    if len(generators) != K:
        raise ValueError(f"{len(generators)} generators for a pack of {K}")
    c = packed.num_classes
    if c > 255:
        raise ValueError(f"{c} classes do not fit the sampler's byte draws")
    if forced_event is not None and not 0 <= forced_event < c:
        raise ValueError(f"forced_event (the absorbing class to force) must be in [0, {c}), got {forced_event}")
    was_training = packed.training
    packed.eval()
    chunk = max(1, rows // (K * num_samples))
    starts = list(range(0, N, chunk))

    def uniforms(start: int) -> torch.Tensor:
        # The solo sampler's uniforms: one per (row, entry), drawn on the CPU in float64, in
        # item order (so the chunking does not change them). Drawn one chunk ahead, in a
        # thread, while the device samples the chunk before.
        n = min(chunk, N - start) * num_samples
        return torch.stack([torch.rand(n, length, generator=g, dtype=torch.float64) for g in generators])

    parts = []
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            ahead = pool.submit(uniforms, starts[0])
            for n, start in enumerate(starts):
                u = ahead.result()
                if n + 1 < len(starts):
                    ahead = pool.submit(uniforms, starts[n + 1])
                parts.append(_sample_chunk(packed, images[:, start : start + chunk], num_samples, length, u,
                                           forced_event))
    finally:
        packed.train(was_training)
    return torch.cat(parts, dim=1)


def _sample_chunk(packed, images, M, L, u, forced_event):
    K, B = images.shape[:2]
    device, c = packed.device, packed.num_classes
    R = B * M
    u = u.to(device).permute(2, 0, 1).contiguous()  # (L, K, R): entry i's uniforms contiguous
    p = packed.params
    table, w_hh = sampler_weights(p["token.weight"], p["lstm.weight_ih_l0"], p["lstm.weight_hh_l0"],
                                  p["lstm.bias_ih_l0"], p["lstm.bias_hh_l0"])  # the solo sampler's, per member
    h = packed.encode(images).repeat_interleave(M, dim=1)  # (K, R, H)
    cell = torch.zeros_like(h)
    prev = torch.full((K, R), packed.start_token, dtype=torch.long, device=device)
    out = torch.empty(K, R, L, dtype=torch.uint8, device=device)
    done = torch.zeros(K, R, dtype=torch.bool, device=device) if forced_event is not None else None
    for i in range(L):
        h, cell = sampler_cell(packed.step_gates(table, prev, h, w_hh), cell)
        p = torch.softmax(packed._head(h).double(), dim=-1)  # (K, R, c)
        draw = torch.searchsorted(p.cumsum(dim=-1), u[i].unsqueeze(-1)).squeeze(-1).clamp_(max=c - 1)
        if done is not None:
            draw = torch.where(done, forced_event, draw)
            done |= draw == forced_event
        out[:, :, i] = draw
        prev = draw
    return out.view(K, B, M, L)


@torch.no_grad()
def stay_probability(packed: PackedSimulator, images: torch.Tensor, sequences: torch.Tensor, event: int,
                     rows: int = 2**13, observed: torch.Tensor | None = None) -> list[float]:
    """:func:`focus_tune.scoring.evaluation.event_stay_probability` of every member's teacher-forced logits.

    images [K, N, ...], sequences [K, N, L]: the mean p(y_i = event | x, y_<i) where the true
    y_{i-1} is the event; NaN where no item has it. ``rows`` (all members' items) per forward.
    ``observed`` bool [K, N, L] (right-censored data): only observed entries i count.
    """
    was_training = packed.training
    packed.eval()
    K, N, L = sequences.shape
    chunk = max(1, rows // K)
    stays: list[list[torch.Tensor]] = [[] for _ in range(K)]
    try:
        for i in range(0, N, chunk):
            y = sequences[:, i : i + chunk]
            p = torch.softmax(packed(images[:, i : i + chunk], y).double(), dim=-1)[:, :, 1:, event]
            after = y[:, :, :-1] == event
            if observed is not None:
                after &= observed[:, i : i + chunk, 1:]
            for k in range(K):
                stays[k].append(p[k][after[k]])
    finally:
        packed.train(was_training)
    # The mean of the values in item order, as the solo function takes it (the same rounding).
    return [float(torch.cat(s).mean()) if sum(len(t) for t in s) else float("nan") for s in stays]


def evaluate_packed(packed: PackedSimulator, splits: Sequence[DeviceSplit], num_samples: int, event: int,
                    generators: Sequence[torch.Generator], n_bins: int = 10, alpha: float = 0.9,
                    event_sampling: str = "model", per_entry: bool = False, rows: int = DEFAULT_ROWS,
                    threads: int | None = None) -> list[dict]:
    """:func:`focus_tune.scoring.evaluation.evaluate` (marginal and interval metrics, leak, p_stay) of every
    member: member k on ``splits[k]`` (the same split object for a search's members, or each
    its own) with ``generators[k]``. The splits must have one size. ``threads`` (default: the
    CPU's) score the members, and the entries of each, in parallel. A right-censored split
    (``observed``, ``censored``) is scored as :func:`~focus_tune.scoring.evaluation.evaluate` scores it.
    """
    if event_sampling not in EVENT_SAMPLING:
        raise ValueError(f"event_sampling must be one of {EVENT_SAMPLING}, got {event_sampling!r}")
    K = packed.size
    if len(splits) != K or len({len(s) for s in splits}) != 1:
        raise ValueError(f"a pack of {K} needs {K} splits of one size")
    same = all(s is splits[0] for s in splits)
    images = splits[0].images.expand(K, *splits[0].images.shape) if same else torch.stack([s.images for s in splits])
    seqs = (splits[0].sequences.expand(K, *splits[0].sequences.shape) if same
            else torch.stack([s.sequences for s in splits]))
    L, c = seqs.shape[-1], packed.num_classes
    observed = stacked_observed(splits)
    samples = sample_packed(packed, images, num_samples, L, generators,
                            forced_event=event if event_sampling == "forced" else None, rows=rows)
    p_stay = stay_probability(packed, images, seqs, event, observed=observed)
    drawn = [montecarlo.Drawn(s.cpu().numpy()) for s in samples]  # (N, M, L) bytes per member
    del samples

    def member(k: int) -> dict:
        est = montecarlo.estimate(drawn[k], "counted", event, c, alpha)
        split = splits[k]
        out, extras = score(est, split.sequences.cpu().numpy(), split.time_to_event.cpu().numpy(), n_bins,
                            split.exact_marginals, None, alpha, threads=per_member, observed=split.observed_numpy,
                            censored=split.censored)
        out["marginal/leak"], _ = montecarlo.leak(drawn[k].samples, event)
        out["marginal/p_stay"] = p_stay[k]
        if per_entry:
            out["per_entry"] = extras
            out["probs"] = est.probs
        return out

    threads = threads or os.cpu_count() or 1
    workers = max(1, min(K, threads))
    per_member = max(1, threads // workers)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(member, range(K)))
