"""A trial's splits on its device, each moved there once (``TrialSplits``)."""

from __future__ import annotations

from functools import cached_property

import numpy as np
import torch

from ..config.space import TrainConfig
from ..data import evaluation_groups
from ..procedure.job import Splits
from ..sim.device_split import DeviceSplit
from ..sim.model_io import DataInfo


class TrialSplits:
    """A trial's splits on its device (:class:`~focus_tune.sim.device_split.DeviceSplit`), each moved
    there once, when first needed: the training split, the validation's first ``val_items``,
    the test's first ``test_items`` (finals only). A pack's members share one; so do a final's
    test evaluation, its conformal calibration and its temperature's validation grid."""

    def __init__(self, data: Splits, train: TrainConfig, info: DataInfo, device: torch.device):
        self._data, self._train, self._info, self._device = data, train, info, device

    @cached_property
    def train(self) -> DeviceSplit:
        return DeviceSplit.from_arrays(self._data.train, self._device)

    @cached_property
    def val(self) -> DeviceSplit:
        return DeviceSplit.from_arrays(self._data.val, self._device, items=self._train.val_items)

    @cached_property
    def test(self) -> DeviceSplit:
        return DeviceSplit.from_arrays(self._data.test, self._device, items=self._train.test_items)

    @cached_property
    def test_groups(self) -> dict[str, np.ndarray]:
        """The test items' groups (FaceMed's age bands: ``interval/coverage_<group>``)."""
        return evaluation_groups({k: v[:len(self.test)] for k, v in self._data.test.extras.items()},
                                 self._info.scenario)
