"""Dataset sizes per (scenario, profile) of the built-in scenarios: the one table to edit.

`smoke` is for tests (seconds), `quick` for a 2-core laptop search (minutes),
`overconfident` for the paper's regime on a laptop (few training items, trained long; the
scenarios that reach it), `paper` for the paper's split sizes (GPUs). Every builder reads its
sizes, image resolution, padded length L and sampling frequency from `SPECS`, and
`ensure_dataset` rebuilds a cached dataset whose manifest no longer matches its row here.

Games keep the paper's time window (L * freq frames: 600 for all but Road Runner, 1200)
and the paper's mean length in seconds; `quick` and `smoke` sample actions less often
(larger freq), so they have fewer entries per sequence.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...names import PROFILES

FACEMED = "facemed"
ATARI_GAMES = ("hero", "seaquest", "riverraid", "bankheist", "roadrunner")
BUILTIN_SCENARIOS = (FACEMED,) + ATARI_GAMES

# Paper, App. B: mean time to the next scoring event in seconds (60 Hz frames).
PAPER_MEAN_LENGTH_S = {
    "seaquest": 1.0071,
    "riverraid": 1.4082,
    "bankheist": 1.7645,
    "hero": 1.4586,
    "roadrunner": 2.5796,
}

# Emulator frames between two kept Atari frames: larger strides give less correlated
# frames at the price of more emulation (ALE runs ~6k frames/s here).
FRAME_STRIDE = {"smoke": 16, "quick": 16, "overconfident": 16, "paper": 4}


@dataclass(frozen=True)
class DatasetSpec:
    """Sizes of one default dataset.

    image_shape is (C, H, W); length is the padded length L; sampling_freq is frames per
    entry for games (entry i is at t = freq / 60 * i seconds) and 1 (year) for FaceMed.
    """

    scenario: str
    profile: str
    train: int
    val: int
    test: int
    image_shape: tuple[int, int, int]
    length: int
    sampling_freq: int

    @property
    def split_sizes(self) -> dict[str, int]:
        return {"train": self.train, "val": self.val, "test": self.test}

    @property
    def mean_length_target(self) -> float | None:
        """Target mean number of entries before END (games only): paper seconds * 60 / freq."""
        if self.scenario == FACEMED:
            return None
        return PAPER_MEAN_LENGTH_S[self.scenario] * 60.0 / self.sampling_freq


_SMOKE = (48, 24, 24)
_QUICK = (1000, 250, 1000)
_RGB32 = (3, 32, 32)

# (scenario, profile): (train, val, test, (C, H, W), L, sampling freq)
_TABLE = {
    ("facemed", "smoke"): (*_SMOKE, _RGB32, 20, 1),
    ("facemed", "quick"): (*_QUICK, _RGB32, 100, 1),
    ("facemed", "overconfident"): (500, 250, 1000, _RGB32, 100, 1),
    ("facemed", "paper"): (16641, 4738, 2329, (3, 64, 64), 100, 1),
    ("seaquest", "smoke"): (*_SMOKE, _RGB32, 30, 20),
    ("seaquest", "quick"): (*_QUICK, _RGB32, 100, 6),
    ("seaquest", "paper"): (104806, 17556, 17650, (3, 84, 84), 200, 3),
    ("riverraid", "smoke"): (*_SMOKE, _RGB32, 30, 20),
    ("riverraid", "quick"): (*_QUICK, _RGB32, 100, 6),
    ("riverraid", "overconfident"): (250, 250, 1000, _RGB32, 100, 6),
    ("riverraid", "paper"): (104252, 17584, 17592, (3, 84, 84), 300, 2),
    ("bankheist", "smoke"): (*_SMOKE, _RGB32, 30, 20),
    ("bankheist", "quick"): (*_QUICK, _RGB32, 100, 6),
    ("bankheist", "paper"): (105765, 17553, 17548, (3, 84, 84), 300, 2),
    ("hero", "smoke"): (*_SMOKE, _RGB32, 30, 20),
    ("hero", "quick"): (*_QUICK, _RGB32, 100, 6),
    ("hero", "overconfident"): (250, 250, 1000, _RGB32, 100, 6),
    ("hero", "paper"): (98553, 16769, 16885, (3, 84, 84), 300, 2),
    ("roadrunner", "smoke"): (*_SMOKE, _RGB32, 30, 40),
    ("roadrunner", "quick"): (*_QUICK, _RGB32, 100, 12),
    ("roadrunner", "paper"): (239428, 68332, 34177, (3, 84, 84), 300, 4),
}

SPECS: dict[tuple[str, str], DatasetSpec] = {
    (scenario, profile): DatasetSpec(scenario, profile, tr, va, te, shape, length, freq)
    for (scenario, profile), (tr, va, te, shape, length, freq) in _TABLE.items()
}


def get_spec(scenario: str, profile: str) -> DatasetSpec:
    """The spec of (scenario, profile); an unknown name fails listing the valid ones."""
    if scenario not in BUILTIN_SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; choose one of {', '.join(BUILTIN_SCENARIOS)}")
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    if (scenario, profile) not in SPECS:
        have = ", ".join(p for (s, p) in SPECS if s == scenario)
        raise ValueError(f"{scenario} has no {profile!r} data (it has: {have}); the overconfident profile exists "
                         "only for the scenarios that reach the paper's regime (docs/RESULTS.md)")
    return SPECS[(scenario, profile)]
