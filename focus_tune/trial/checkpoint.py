"""A training's checkpoint: the one schema, written atomically, read on the CPU without pickle.

A training yields its checkpoint as a plain dict (:func:`checkpoint_state`: model, optimizer,
epoch, RNG, metrics); whoever keeps it writes it into a folder with :func:`write_checkpoint`
(the Ray adapter: a temporary folder it hands to ``tune.Checkpoint``) and reads it back with
:func:`read_checkpoint` (``weights_only``: no pickle; ``map_location="cpu"``).
"""

from __future__ import annotations

import copy
import json
import os

import torch

from ..procedure.job import PER_ENTRY_FILE

CHECKPOINT_FILE = "checkpoint.pt"


def checkpoint_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | dict, epoch: int,
                     generator: torch.Generator, metrics: dict, with_optimizer: bool = True) -> dict:
    """The one checkpoint schema: model, optimizer (omitted when training is over), epoch, RNG, metrics.

    ``optimizer``: the optimizer, or its ``state_dict`` already taken (a pack member's part of
    the pack's Adam, ``packed.member_optimizer_state``). A copy (on the model's device): the
    training goes on after it yields the state, and whoever holds it keeps this epoch's."""
    opt_state = optimizer if isinstance(optimizer, dict) else optimizer.state_dict()
    return copy.deepcopy({
        "model": model.state_dict(),
        "optimizer": opt_state if with_optimizer else None,
        "epoch": epoch,
        "generator": generator.get_state(),
        "metrics": metrics,
    })


def write_checkpoint(folder: str, state: dict | None, per_entry: dict | None = None) -> None:
    """``state`` (:func:`checkpoint_state`) as ``folder/checkpoint.pt``, replaced atomically, and a
    final's per-entry test arrays (JSON) as ``folder/test_per_entry.json``; either may be None."""
    if state is not None:
        tmp = os.path.join(folder, CHECKPOINT_FILE + ".tmp")
        torch.save(state, tmp)
        os.replace(tmp, os.path.join(folder, CHECKPOINT_FILE))  # atomic
    if per_entry is not None:
        with open(os.path.join(folder, PER_ENTRY_FILE), "w") as handle:
            json.dump(per_entry, handle)


def read_checkpoint(folder: str | os.PathLike) -> dict:
    """The checkpoint state that :func:`write_checkpoint` wrote into ``folder``, on the CPU."""
    return torch.load(os.path.join(folder, CHECKPOINT_FILE), map_location="cpu", weights_only=True)
