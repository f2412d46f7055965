"""The summary `python -m focus_tune.data info` prints (and :func:`focus_tune.data.describe_dataset`)."""
from __future__ import annotations

import os

from .dataset_format import SPLITS
from .dataset_reader import Dataset, load_dataset
from .manifest import Manifest


def describe(manifest: Manifest) -> str:
    """A human-readable summary: manifest, sizes, class frequencies, mean length."""
    m = manifest
    own = m.game is None  # a user's own data: no generator, no frame rate
    lines = [
        f"name           {m.name}",
        f"source         {m.source}",
        f"importer       {m.generator} (your own data; scenario {m.scenario})" if own else
        f"generator      {m.generator} v{m.generator_version}, seed {m.seed}, profile {m.profile}",
        f"image shape    {list(m.image_shape)} (C, H, W)",
        f"classes        {m.num_classes}: {', '.join(m.class_names)}",
        f"length L       {m.length}" if own else f"length L       {m.length}, sampling freq {m.sampling_freq}",
        f"event class    {m.event_class} ({m.class_names[m.event_class]}), "
        f"condition class {m.condition_class} ({m.class_names[m.condition_class]})",
    ]
    if m.absorbing is not None and m.absorbing != [m.event_class]:
        lines.append(f"absorbing      {', '.join(m.class_names[a] for a in m.absorbing)}")
    lines.append(f"exact truth    {'exact_marginals stored' if m.has_exact_marginals else 'none'}")
    for split in SPLITS:
        stats = m.stats[split]
        mean = stats["mean_time_to_event"]
        if m.game == "facemed":
            unit = "years"
        elif own:
            unit = "entries"
        else:
            unit = f"entries = {mean * m.sampling_freq / 60:.3f} s"
        counts = stats["class_counts"]
        total = sum(counts) or 1
        top = sorted(range(m.num_classes), key=lambda c: -counts[c])[:6]
        freqs = ", ".join(f"{m.class_names[c]} {counts[c] / total:.1%}" for c in top)
        line = f"{split:<6} {m.splits[split]:>7} items, mean time-to-event {mean:.2f} {unit}"
        if m.censored:
            line += (f"; {stats.get('censored_items', 0)} censored, "
                     f"{stats.get('unobserved_entries', 0)} entries unobserved")
        lines.append(line)
        lines.append(f"       entry frequencies: {freqs}")
    if m.censored:
        lines.append("censored       the mean time-to-event counts a censored item at its last observed entry "
                     "(its T is larger)")
    for key, value in m.details.items():
        if key in ("counts", "exact_mean_length", "mean_length_target", "skipped_malformed_names",
                   "skipped_unreadable", "images_found", "behaviour_policy", "censored_items",
                   "cut_short_items", "unobserved_entries", "padded_items", "truncated_items"):
            lines.append(f"{key:<14} {value}")
        elif key == "split" and isinstance(value, dict):
            seed = f", seed {value['seed']}" if "seed" in value else ""
            lines.append(f"{'split':<14} {value.get('rule')}{seed}")
        elif key in ("table", "arrays") and isinstance(value, dict):
            lines.append(f"{key:<14} {value.get('path')} (SHA-256 {str(value.get('sha256'))[:12]}...)")
        elif key == "folder" and isinstance(value, dict):
            files = value.get("metadata") or []
            lines.append(f"{key:<14} {value.get('path')} ({len(files)} metadata file{'s' * (len(files) != 1)})")
    return "\n".join(lines)


def verified(path) -> "Dataset":
    """load_dataset, then decode every split so that its contents are checked too (class ids,
    time to event, exact marginals are probabilities)."""
    dataset = load_dataset(path)
    for split in SPLITS:
        dataset.split(split)
    return dataset


def describe_dataset(path: str | os.PathLike) -> str:
    """A dataset folder's summary after verifying it and decoding every split (what
    `python -m focus_tune.data info` prints)."""
    return describe(verified(path).manifest)
