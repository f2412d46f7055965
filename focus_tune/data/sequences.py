"""The rules of a sequence, for the stored data and for Monte Carlo draws alike: the time to
the event T (counted from 1), the observed entries of a right-censored item, which items are
censored, and why the event is the one absorbing class. Plain numpy; the storage (``store``),
the importers (``own``) and the math (``scoring.montecarlo``) import them from here."""
from __future__ import annotations

import numpy as np

# Why the event is the only absorbing class a dataset may declare (docs/DATA.md, "Sequences").
ONLY_EVENT_ABSORBING = ("the metrics, the sampler's forced mode and the exact row "
                        "take the event as the one class after which nothing changes, so an item absorbed in another "
                        "class would be scored as if its time to event were known to exceed L")
CENSOR_INSTEAD = ("record an item that enters another final class as censored there instead (end its sequence at "
                  "that entry, without declaring the class absorbing: observed_length)")
CONDITION_NOT_EVENT = ("the conditional metrics condition on a first entry that is not yet absorbed "
                       "(give another condition class)")
UNOBSERVED = -1  # an entry not observed, in the sequences one's own data gives (a right-censored suffix)


def time_to_event(sequences: np.ndarray, event: int, observed_length: np.ndarray | None = None) -> np.ndarray:
    """T = min{i : Y_i = event}, counted from 1; L when the event never occurs.

    The one rule of the time to event, for the stored sequences and for Monte Carlo samples
    alike (``focus_tune.scoring.montecarlo`` applies it to draws [N, M, L]). sequences: int [..., L]
    -> int64 [...]. With ``observed_length`` [...] (right-censored data: entries 1..n
    observed) only observed entries count, and an item whose event is not among them gets its
    last observed entry n (T > n is all that is known: :func:`censored_items` tells which).
    """
    hit = np.asarray(sequences) == event
    if observed_length is not None:
        hit &= observed_mask(observed_length, hit.shape[-1])
        last = np.asarray(observed_length, dtype=np.int64)
    else:
        last = hit.shape[-1]
    return np.where(hit.any(axis=-1), hit.argmax(axis=-1) + 1, last).astype(np.int64)

def observed_mask(observed_length: np.ndarray, length: int) -> np.ndarray:
    """bool [..., L]: entry i (1-based) of item n is observed iff i <= observed_length[n]."""
    return np.arange(1, length + 1) <= np.asarray(observed_length)[..., None]

def censored_items(sequences: np.ndarray, event_class: int, observed_length: np.ndarray | None) -> np.ndarray:
    """bool [N]: items whose time to event is not known, only that it exceeds their
    ``time_to_event`` (their last observed entry): cut short before L, event not seen."""
    n = len(sequences)
    if observed_length is None:
        return np.zeros(n, bool)
    L = np.asarray(sequences).shape[1]
    seen = ((np.asarray(sequences) == event_class) & observed_mask(observed_length, L)).any(axis=1)
    return (np.asarray(observed_length) < L) & ~seen

def observed_prefix(sequences: np.ndarray) -> np.ndarray:
    """int [N]: how many entries of each sequence (-1 for an unobserved one) are observed."""
    return (np.asarray(sequences) != UNOBSERVED).sum(axis=1)
