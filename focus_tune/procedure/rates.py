"""Where a search's time per training comes from: the user's --trial-minutes, a finished
run of the same search, or the GPU rates that ``benchmarks/gpu_check.py`` measured (the
packaged ``focus_tune/procedure/gpu_rates.json``, one NVIDIA H200; or the user's own GPU's, written by
``gpu_check.py --rates-out PATH`` and read from ``--rates PATH`` or ``$FOCUS_TUNE_GPU_RATES``);
and the packs' rates that ``benchmarks/gpu_packed.py`` measured
(``focus_tune/procedure/gpu_pack_rates.json``), which ``--pack auto`` and the dry run read."""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from pathlib import Path
from typing import Mapping

from ..errors import RatesError


def measured_trial_minutes(trial_seconds: Mapping[str, float], seed: int | None = None) -> float | None:
    """Median training time (minutes) of a search from its trials' seconds (the search state's
    ``trial_seconds``). The finals with the search ``seed`` are left out: they only evaluated
    a search trial's checkpoint."""
    reused = f"-s{seed}" if seed is not None else None
    seconds = [sec for tid, sec in trial_seconds.items()
               if sec and sec > 0 and not (tid.startswith("final-") and reused and tid.endswith(reused))]
    return statistics.median(seconds) / 60 if seconds else None


GPU_RATES = Path(__file__).with_name("gpu_rates.json")
GPU_RATES_ENV = "FOCUS_TUNE_GPU_RATES"  # a rates file of one's own GPU, where --rates is not given
RATES_KEYS = ("device", "measured", "command", "precision", "train_samples_per_s_alone", "sharing_slowdown",
              "val_s_per_item_entry")


def load_gpu_rates(path: Path | None = None) -> dict | None:
    """The GPU rates measured by ``benchmarks/gpu_check.py``: those of ``path`` (``--rates``),
    else of ``$FOCUS_TUNE_GPU_RATES``, else the packaged ones (None if that file is absent). A
    file that was asked for must exist and hold every key the dry run reads (:data:`RATES_KEYS`),
    else :class:`RatesError`."""
    if path is None and not os.environ.get(GPU_RATES_ENV):
        return json.loads(GPU_RATES.read_text()) if GPU_RATES.exists() else None
    where = f"--rates {path}" if path is not None else f"${GPU_RATES_ENV}={os.environ[GPU_RATES_ENV]}"
    path = Path(path if path is not None else os.environ[GPU_RATES_ENV])
    try:
        rates = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise RatesError(f"{where}: cannot read the GPU rates ({type(err).__name__}: {err}); write them on your GPU "
                         "with python benchmarks/gpu_check.py --rates-out PATH") from None
    missing = [key for key in RATES_KEYS if key not in rates] if isinstance(rates, dict) else list(RATES_KEYS)
    if missing:
        raise RatesError(f"{where}: not a rates file of benchmarks/gpu_check.py: no {', '.join(missing)}")
    return rates


def same_gpu(gpu_type: str, device: str) -> bool:
    """Whether the GPU type a user names (``--gpu-type A10G``, as Ray's ``accelerator_type:A10G``)
    is the card ``device`` (torch's name of it, which a rates file records: ``NVIDIA A10G``):
    every word of the type is a word of the device's name, case aside and a memory size's
    ``GB`` written ``G`` as Ray does (``A100-80G`` is ``NVIDIA A100-SXM4-80GB``; ``L4`` is not
    ``NVIDIA L40S``, nor ``A10G`` ``NVIDIA H200``)."""
    def words(name: str) -> list[str]:
        return [re.sub(r"^(\d+)gb$", r"\1g", w) for w in re.findall(r"[a-z0-9]+", name.lower())]

    wanted, have = words(gpu_type), set(words(device))
    return bool(wanted) and all(w in have for w in wanted)


def _slowdown(rates: dict, gpus_per_trial: float) -> float | None:
    return next((v for k, v in rates["sharing_slowdown"].items()
                 if math.isclose(float(k), gpus_per_trial, rel_tol=1e-3)), None)


def training_minutes_from_rates(rates: dict, spec, cfg, gpus_per_trial: float) -> float | None:
    """Minutes of one training of ``cfg`` on the dataset ``spec`` at ``gpus_per_trial``, from
    measured GPU rates; None when the rates hold no measurement of this image shape and length
    or of this GPU fraction.

    Training: epochs x train items / (samples/s alone / slow-down at this fraction). Validation:
    one Monte Carlo evaluation (M = 100) every ``eval_every`` epochs, val items x L x the
    measured seconds per item-entry, slowed down as training is when trials share a GPU.
    The rates were measured at batch 256 and M = 100 (the paper profile's values).
    """
    c, h, w = spec.image_shape
    sps = rates["train_samples_per_s_alone"].get(f"{c}x{h}x{w} L={spec.length}")
    slow = _slowdown(rates, gpus_per_trial)
    if sps is None or slow is None:
        return None
    train = cfg.train
    val_items = min(spec.val, train.val_items) if train.val_items else spec.val
    evaluations = math.ceil(train.epochs / train.eval_every)
    train_s = train.epochs * spec.train * slow / sps
    val_s = evaluations * val_items * spec.length * rates["val_s_per_item_entry"] * slow
    return (train_s + val_s) / 60


def evaluation_minutes_from_rates(rates: dict, spec, cfg, gpus_per_trial: float) -> float | None:
    """Minutes of one final's test evaluation (M Monte Carlo samples of the test split; the
    unregularized final draws a second set for its temperature-scaled baseline, which is not
    counted here) from measured GPU rates; None where the fraction was not measured."""
    slow = _slowdown(rates, gpus_per_trial)
    if slow is None:
        return None
    items = min(spec.test, cfg.train.test_items) if cfg.train.test_items else spec.test
    return items * spec.length * rates["val_s_per_item_entry"] * slow / 60


def trial_minutes_for(user_minutes: float | None, measured: float | None, measured_from: str, cfg, scenario: str,
                      profile: str, gpus_per_trial: float, builtin_data: bool = True,
                      rates: dict | None = None) -> tuple[float | None, float | None, str]:
    """(minutes per training, minutes per test evaluation or None for the default, source):
    the per-training time the dry run costs with, and where it comes from: the user's
    ``--trial-minutes``; else ``measured``, the median training of an earlier run of this
    search (:func:`measured_trial_minutes`; ``measured_from`` says where); else, for a built-in
    dataset and a GPU fraction the GPU check measured, the GPU ``rates``
    (:func:`training_minutes_from_rates`; the source then names their GPU)."""
    if user_minutes:
        return user_minutes, None, "--trial-minutes"
    if measured:
        return measured, None, measured_from
    if rates and builtin_data:
        from ..data.builtin.profiles import get_spec

        spec = get_spec(scenario, profile)
        fraction = gpus_per_trial or 1.0
        minutes = training_minutes_from_rates(rates, spec, cfg, fraction)
        if minutes:
            return minutes, evaluation_minutes_from_rates(rates, spec, cfg, fraction), (
                f"rates measured on one {rates['device']} ({rates['measured']}, "
                f"{rates['command']}): {rates['precision']}, {cfg.train.epochs} epochs, "
                f"validation every {cfg.train.eval_every}")
    return None, None, ""


GPU_PACK_RATES = Path(__file__).with_name("gpu_pack_rates.json")
AUTO_PACK_WITHIN = 0.10  # --pack auto: the smallest K within 10 % of the best measured aggregate rate


def load_pack_rates(path: Path = GPU_PACK_RATES) -> dict | None:
    """The packs' rates measured by ``benchmarks/gpu_packed.py --rates-out``, or None."""
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def _shape(spec) -> str:
    c, h, w = spec.image_shape
    return f"{c}x{h}x{w} L={spec.length}"


def auto_pack(rates: dict | None, spec, gpus_per_trial: float) -> tuple[int, str]:
    """``--pack auto``: (K, why). 1 without a GPU per trial (packing does not pay on a CPU);
    with one, the smallest measured K whose aggregate samples/s is within 10 % of the best
    measured for this data shape and whose peak memory fits the trial's share of the measured
    card; 1 where this shape was not measured."""
    if gpus_per_trial <= 0:
        return 1, "no GPU per trial: one training per trial (packing does not pay on a CPU)"
    size = (rates or {}).get("sizes", {}).get(_shape(spec))
    if not size:
        return 1, f"no pack rates measured for {_shape(spec)} (benchmarks/gpu_packed.py): one training per trial"
    memory = rates["device_memory_gib"] * min(gpus_per_trial, 1.0)
    fits = {int(k): r for k, r in size["packs"].items() if r["peak_gib"] <= memory}
    if not fits:
        return 1, f"no measured pack fits {memory:.0f} GiB of GPU memory: one training per trial"
    best = max(r["samples_per_s"] for r in fits.values())
    k = min(k for k, r in fits.items() if r["samples_per_s"] >= (1 - AUTO_PACK_WITHIN) * best)
    return k, (f"{k}: within {AUTO_PACK_WITHIN:.0%} of the best aggregate rate measured for {_shape(spec)} on one "
               f"{rates['device']} ({fits[k]['samples_per_s']:,.0f} samples/s, {fits[k]['peak_gib']:.0f} GiB)")


def resolve_pack(pack: int | str, gpus_per_trial: float, shape) -> tuple[int, str]:
    """``--pack`` as a number of trainings per trial, and why (``auto``: :func:`auto_pack` for
    the data's ``image_shape`` and ``length``)."""
    if pack != "auto":
        return int(pack), "--pack"
    return auto_pack(load_pack_rates(), shape, gpus_per_trial)


def pack_minutes_from_rates(rates: dict, spec, cfg, k: int) -> float | None:
    """Minutes of one pack of ``k`` trainings of ``cfg`` on ``spec`` on one GPU (every member's
    wall time), from measured pack rates; None where (shape, k) was not measured. Training:
    epochs x k x train items at the pack's aggregate rate (measured at the paper batch of that
    shape); validation: each member's, one after another (packing does not shorten it)."""
    size = rates.get("sizes", {}).get(_shape(spec))
    pack = (size or {}).get("packs", {}).get(str(k))
    if pack is None:
        return None
    train = cfg.train
    val_items = min(spec.val, train.val_items) if train.val_items else spec.val
    evaluations = math.ceil(train.epochs / train.eval_every)
    train_s = train.epochs * spec.train * k / pack["samples_per_s"]
    val_s = evaluations * k * val_items * spec.length * rates["val_s_per_item_entry"]
    return (train_s + val_s) / 60
