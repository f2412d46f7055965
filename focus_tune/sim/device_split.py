"""A split's tensors on the device a model trains and is evaluated on (``DeviceSplit``).

Training (``train.py``, ``packed.py``) and evaluation (``evaluation.py``, ``packed_eval.py``)
both take it; it is moved to the device once per trial.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class DeviceSplit:
    """Tensors of one split, already on the training device.

    images: uint8 [N, C, H, W]; sequences: long [N, L]; time_to_event: long [N];
    exact_marginals: float [N, L, c] or None (only where the data has ground truth).
    Right-censored data (``focus_tune.data.dataset_reader.Split.observed_length``): observed, bool
    [N, L] on the device, which entries are observed (a prefix of each item; the sequence
    after it is filler), and censored, numpy bool [N], the items whose time to event is only
    known to exceed ``time_to_event``. Both None when every entry of every item is observed.
    """

    images: torch.Tensor
    sequences: torch.Tensor
    time_to_event: torch.Tensor
    exact_marginals: np.ndarray | None = None
    observed: torch.Tensor | None = None
    censored: np.ndarray | None = None

    @classmethod
    def from_arrays(cls, split, device="cpu", items: int | None = None) -> "DeviceSplit":
        """From a data split with numpy arrays; moved to ``device`` once. ``items`` keeps the first n."""
        n = len(split.sequences) if items is None else min(items, len(split.sequences))
        exact = None if split.exact_marginals is None else np.asarray(split.exact_marginals[:n])
        observed = split.observed
        return cls(
            images=torch.as_tensor(np.asarray(split.images[:n])).to(device),
            sequences=torch.as_tensor(np.asarray(split.sequences[:n]), dtype=torch.long).to(device),
            time_to_event=torch.as_tensor(np.asarray(split.time_to_event[:n]), dtype=torch.long),
            exact_marginals=exact,
            observed=None if observed is None else torch.as_tensor(observed[:n]).to(device),
            censored=None if observed is None else np.asarray(split.censored[:n]),
        )

    def __len__(self) -> int:
        return len(self.sequences)

    @property
    def observed_numpy(self) -> np.ndarray | None:
        """``observed`` as a numpy bool [N, L] on the CPU (what the metrics take), or None."""
        return None if self.observed is None else self.observed.cpu().numpy()


def stacked_observed(splits) -> torch.Tensor | None:
    """The observed masks of several splits of one size as one bool [K, N, L] (a split without
    one observes every entry), or None when no split has one: a pack's training and validation."""
    if all(s.observed is None for s in splits):
        return None
    return torch.stack([torch.ones_like(s.sequences, dtype=torch.bool) if s.observed is None else s.observed
                        for s in splits])
