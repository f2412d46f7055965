"""Atari datasets built offline: real emulator frames, a known stochastic player.

Frames. `FrameCollector` runs the game's ROM in ale-py (the ROMs ship inside ale-py) under
a behaviour policy: every episode starts with 0-30 NOOP frames, then presses a uniformly
random action from the game's minimal action set and holds it, changing it with
probability 1/8 per frame (a key held ~8 frames, 0.13 s). After 60 start-up frames it keeps
every `stride`-th frame (profiles.FRAME_STRIDE), ending an episode at game over or after
3000 frames (50 s) so that the frames come from many episodes. Train, val and test frames
come from disjoint episodes. Frames are resized to the profile's (C, H, W).

Player. After each frame x a simulated player produces one entry every `freq` frames
(t_i = i * freq / 60 s): an ALE action (0-17) or END (18, the next scoring event, which
is absorbing and pads the sequence). Its behaviour depends on four features of the stored
frame (`frame_features`): where the salient pixels are (cx, cy), how much is on screen
(clutter) and how bright it is, standardised on the first training frames. Given x:

    hazard   P(END at entry i | no END before) from a Weibull time to score in seconds,
             S(t) = exp(-(t / scale(x))^k), log scale(x) = offset + effects . z(x)
    entry 1  an action from first(x) = softmax(logits(x) + bonus on the game's usual
             first action: NOOP, or RIGHT in Bank Heist, LEFT in Road Runner)
    entry i  the previous action with probability stick(x) = exp(-freq / 60 / hold(x)),
             otherwise a fresh draw from switch(x) = softmax(logits(x)); sticky like a
             held key, continuous in time so that every profile describes the same player
    logits   the game's preferences + steer * horizontal(a) * cx + climb * vertical(a) * cy
             + fire * fire(a) * clutter

`offset` is set per dataset so that the mean over training frames of E[min(T, L)] equals
the paper's mean length (`DatasetSpec.mean_length_target`). The chain is Markov in the
previous action given x, so `exact_marginals` computes P(Y_i = a | x) by forward
recursion; P(T < i | x) is the END column, the exact time-to-event distribution.
`PlayerProcess` is the chain as the report's reference rows use it (`process.ScenarioProcess`),
registered for every game.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ..dataset_writer import DatasetWriter
from ..images import resize_rgb
from ..manifest import Manifest
from .process import ScenarioProcess, register
from .profiles import ATARI_GAMES, FRAME_STRIDE, DatasetSpec

ALE_ACTIONS = [
    "NOOP", "FIRE", "UP", "RIGHT", "LEFT", "DOWN", "UPRIGHT", "UPLEFT", "DOWNRIGHT",
    "DOWNLEFT", "UPFIRE", "RIGHTFIRE", "LEFTFIRE", "DOWNFIRE", "UPRIGHTFIRE",
    "UPLEFTFIRE", "DOWNRIGHTFIRE", "DOWNLEFTFIRE",
]
END = len(ALE_ACTIONS)  # 18
CLASS_NAMES = ALE_ACTIONS + ["END"]
ROM_IDS = {"hero": "hero", "seaquest": "seaquest", "riverraid": "riverraid",
           "bankheist": "bank_heist", "roadrunner": "road_runner"}
GENERATOR_VERSION = "2"

# Direction of each action: +1 right / up / fire, -1 left / down, 0 otherwise.
_HORIZONTAL = np.array([("RIGHT" in a) - ("LEFT" in a) for a in ALE_ACTIONS], np.float64)
_VERTICAL = np.array([("UP" in a) - ("DOWN" in a) for a in ALE_ACTIONS], np.float64)
_FIRE = np.array(["FIRE" in a for a in ALE_ACTIONS], np.float64)

FEATURES = ("cx", "cy", "clutter", "brightness")

# Behaviour policy of the frame collector.
_NOOP_START = 30
_BURN_IN = 60
_CHANGE_PROB = 1 / 8
_MAX_EPISODE_FRAMES = 3000


@dataclass(frozen=True)
class PlayerModel:
    """A game's simulated player in continuous time (see the module docstring)."""

    preferences: dict[str, float]  # logits of the favoured actions; the others get `other`
    first_action: str
    first_bonus: float = 2.0
    other: float = -1.5
    hold_s: float = 0.4  # mean key-hold time at z = 0
    weibull_shape: float = 1.4
    steer: float = 2.0
    climb: float = 1.2
    fire: float = 1.6
    hold_effect: float = 0.5  # log hold time per unit of standardised brightness
    hazard_effects: tuple[float, float, float, float] = (0.3, -0.2, -0.5, 0.4)  # per FEATURES

    def logits(self) -> np.ndarray:
        """Base action logits: float64 [18]."""
        return np.array([self.preferences.get(a, self.other) for a in ALE_ACTIONS], np.float64)


PLAYER_MODELS = {
    "hero": PlayerModel(
        {"NOOP": 1.5, "RIGHT": 1.2, "LEFT": 1.2, "DOWN": 0.6, "UP": 0.5, "FIRE": 0.3,
         "RIGHTFIRE": 0.3, "LEFTFIRE": 0.3, "UPRIGHT": 0.2, "UPLEFT": 0.2},
        first_action="NOOP", weibull_shape=1.4),
    "seaquest": PlayerModel(
        {"NOOP": 1.0, "UPFIRE": 0.9, "FIRE": 0.8, "LEFTFIRE": 0.7, "RIGHTFIRE": 0.7,
         "UPLEFTFIRE": 0.5, "UPRIGHTFIRE": 0.5, "DOWNFIRE": 0.4, "DOWNLEFTFIRE": 0.3,
         "DOWNRIGHTFIRE": 0.3, "LEFT": 0.3, "RIGHT": 0.3, "UP": 0.2, "DOWN": 0.2},
        first_action="NOOP", weibull_shape=1.3),
    "riverraid": PlayerModel(
        {"NOOP": 1.3, "FIRE": 1.0, "LEFT": 0.8, "RIGHT": 0.8, "LEFTFIRE": 0.6,
         "RIGHTFIRE": 0.6, "UP": 0.4, "UPFIRE": 0.4, "DOWN": 0.2},
        first_action="NOOP", weibull_shape=1.5),
    "bankheist": PlayerModel(
        {"RIGHT": 1.4, "LEFT": 1.1, "UP": 1.0, "DOWN": 1.0, "NOOP": 0.5, "FIRE": 0.2},
        first_action="RIGHT", weibull_shape=1.6),
    "roadrunner": PlayerModel(
        {"LEFT": 1.6, "UPLEFT": 1.0, "DOWNLEFT": 1.0, "UP": 0.5, "DOWN": 0.5, "NOOP": 0.4,
         "RIGHT": 0.3},
        first_action="LEFT", weibull_shape=1.2),
}


def frame_features(images: np.ndarray) -> np.ndarray:
    """Raw features (cx, cy, clutter, brightness) of frames: uint8 [N, C, H, W] -> float64 [N, 4].

    Salience is each pixel's colour distance to the median colour of its row (the row's
    background); cx, cy in [-1, 1] are the salience-weighted centre, clutter is
    log(1 + mean salience), brightness is the mean pixel value in [0, 1].
    """
    x = images.astype(np.float32)
    salience = np.abs(x - np.median(x, axis=3, keepdims=True)).sum(axis=1)  # [N, H, W]
    n, height, width = salience.shape
    total = salience.sum(axis=(1, 2)) + 1e-6
    cols = np.linspace(-1, 1, width, dtype=np.float32)
    rows = np.linspace(1, -1, height, dtype=np.float32)  # up is positive
    cx = (salience.sum(axis=1) * cols).sum(axis=1) / total
    cy = (salience.sum(axis=2) * rows).sum(axis=1) / total
    clutter = np.log1p(salience.mean(axis=(1, 2)))
    brightness = x.mean(axis=(1, 2, 3)) / 255
    return np.stack([cx, cy, clutter, brightness], axis=1).astype(np.float64)


@dataclass
class PlayerParams:
    """The player's chain for N frames at one sampling freq and padded length L.

    first [N, 18]: P(Y_1 = a | no END); switch [N, 18]: a fresh action's distribution;
    stick [N]: P(repeat the previous action | no END); hazard [N, L]: P(END at entry i |
    no END before).
    """

    first: np.ndarray
    switch: np.ndarray
    stick: np.ndarray
    hazard: np.ndarray

    def take(self, index: np.ndarray) -> "PlayerParams":
        return PlayerParams(self.first[index], self.switch[index], self.stick[index], self.hazard[index])


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _survival(log_scale: np.ndarray, shape: float, freq: int, length: int) -> np.ndarray:
    """S(t_i) = P(T >= i) for i = 0..L: log_scale [N] -> [N, L + 1]."""
    t = np.arange(length + 1) * freq / 60.0
    return np.exp(-(t[None, :] / np.exp(log_scale)[:, None]) ** shape)


def player_params(z: np.ndarray, model: PlayerModel, freq: int, length: int, offset: float) -> PlayerParams:
    """The chain of each frame from its standardised features z [N, 4]."""
    cx, cy, clutter, brightness = z.T
    logits = (model.logits()[None, :] + model.steer * cx[:, None] * _HORIZONTAL
              + model.climb * cy[:, None] * _VERTICAL + model.fire * clutter[:, None] * _FIRE)
    first_logits = logits.copy()
    first_logits[:, ALE_ACTIONS.index(model.first_action)] += model.first_bonus
    hold = model.hold_s * np.exp(model.hold_effect * brightness)
    survival = _survival(offset + z @ np.array(model.hazard_effects), model.weibull_shape, freq, length)
    hazard = 1.0 - survival[:, 1:] / np.maximum(survival[:, :-1], 1e-300)
    return PlayerParams(_softmax(first_logits), _softmax(logits), np.exp(-freq / 60.0 / hold), hazard)


def params_from_manifest(images: np.ndarray, manifest) -> PlayerParams:
    """The chain a built dataset used for these frames (uint8 [N, C, H, W]), from its manifest."""
    player = manifest.details["player_model"]
    z = (frame_features(images) - np.array(player["feature_mean"])) / np.array(player["feature_std"])
    return player_params(z, PLAYER_MODELS[manifest.game], manifest.sampling_freq, manifest.length, player["offset"])


def calibrate_offset(z: np.ndarray, model: PlayerModel, freq: int, length: int, target: float) -> float:
    """The log-scale offset for which mean_n E[min(T, L) | x_n] = target entries (bisection)."""
    effects = z @ np.array(model.hazard_effects)
    low, high = np.log(1e-3), np.log(1e4)
    for _ in range(80):
        mid = 0.5 * (low + high)
        mean = _survival(mid + effects, model.weibull_shape, freq, length)[:, 1:].sum(axis=1).mean()
        low, high = (mid, high) if mean < target else (low, mid)
    return 0.5 * (low + high)


def exact_marginals(params: PlayerParams) -> np.ndarray:
    """P(Y_i = a | x) by forward recursion of the chain: float64 [N, L, 19].

    Column END is P(T < i), so 1 - marginals[:, :, END] summed over i is E[min(T, L)].
    """
    hazard = params.hazard
    n, length = hazard.shape
    out = np.empty((n, length, END + 1))
    out[:, 0, :END] = (1 - hazard[:, :1]) * params.first
    out[:, 0, END] = hazard[:, 0]
    stick = params.stick[:, None]
    for i in range(1, length):
        alive = 1.0 - out[:, i - 1, END]
        keep = stick * out[:, i - 1, :END] + (1 - stick) * params.switch * alive[:, None]
        out[:, i, :END] = (1 - hazard[:, i:i + 1]) * keep
        out[:, i, END] = out[:, i - 1, END] + hazard[:, i] * alive
    return out


def conditionals(params: PlayerParams, sequences: np.ndarray) -> np.ndarray:
    """p(Y_i = a | Y_{i-1}, x) along given sequences: params of n frames, sequences [n, M, L] -> [n, M, L, 19].

    Entry 1: END with the hazard, else an action from `first`; later entries: END stays
    END; otherwise END with the hazard, else the previous action with probability `stick`
    or a fresh draw from `switch` (the chain `sample_sequences` draws from).
    """
    seqs = np.asarray(sequences)
    n, M, L = seqs.shape
    h = params.hazard[:, None, :, None]  # (n, 1, L, 1)
    out = np.zeros((n, M, L, END + 1))
    out[:, :, 0, :END] = (1 - h[:, :, 0]) * params.first[:, None, :]
    out[:, :, :, END] = params.hazard[:, None, :]
    prev = seqs[..., :-1]  # (n, M, L-1)
    stick = params.stick[:, None, None, None]
    fresh = (1 - stick) * params.switch[:, None, None, :]  # (n, 1, 1, 18)
    kept = stick * (prev[..., None] == np.arange(END))  # (n, M, L-1, 18): the previous action, held
    out[:, :, 1:, :END] = (1 - h[:, :, 1:]) * (fresh + kept)
    out[:, :, 1:][prev == END] = np.eye(END + 1)[END]  # END is absorbing
    return out


def _draw(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draw per row: cdf [N, K], u [N] -> int [N]."""
    return np.minimum((u[:, None] >= cdf).sum(axis=1), cdf.shape[1] - 1)


def sample_sequences(params: PlayerParams, rng: np.random.Generator) -> np.ndarray:
    """One END-padded action sequence per frame from the player's chain: int64 [N, L]."""
    n, length = params.hazard.shape
    first_cdf, switch_cdf = np.cumsum(params.first, axis=1), np.cumsum(params.switch, axis=1)
    out = np.full((n, length), END, dtype=np.int64)
    alive = np.ones(n, dtype=bool)
    action = np.zeros(n, dtype=np.int64)
    for i in range(length):
        u = rng.random((3, n))
        alive &= u[0] >= params.hazard[:, i]
        if i == 0:
            action = _draw(first_cdf, u[2])
        else:
            action = np.where(u[1] < params.stick, action, _draw(switch_cdf, u[2]))
        out[alive, i] = action[alive]
    return out


class PlayerProcess(ScenarioProcess):
    """The Atari games' true process (``process.ScenarioProcess``): the player's chain of each
    frame, from a built dataset's manifest (``params_from_manifest``); an imported one
    (Atari-HEAD, human play) has none. The frame fixes the chain, so the oracle is also the
    best image-only predictor: there is no image posterior."""

    def known(self, manifest: Manifest, extras: dict[str, np.ndarray]) -> bool:
        return "player_model" in manifest.details

    def chains(self, manifest: Manifest, images: np.ndarray, extras: dict[str, np.ndarray],
               first: int | None = None) -> PlayerParams:
        """The player's chain of each frame, with Y_1 = first forced (a sure first action, no END at entry 1)."""
        params = params_from_manifest(np.asarray(images), manifest)
        if first is None:
            return params
        if not 0 <= first < END:
            raise ValueError(f"the player oracle conditions on an action in [0, {END}), not class {first}")
        hazard = params.hazard.copy()
        hazard[:, 0] = 0.0  # Y_1 is the action, not END
        return replace(params, first=np.eye(END)[np.full(len(hazard), first)], hazard=hazard)

    def sample_sequences(self, chains: PlayerParams, rng: np.random.Generator) -> np.ndarray:
        return sample_sequences(chains, rng)

    def conditionals(self, chains: PlayerParams, sequences: np.ndarray) -> np.ndarray:
        return conditionals(chains, sequences)

    def exact_marginals(self, chains: PlayerParams) -> np.ndarray:
        return exact_marginals(chains)

    def image_posterior_known(self, manifest: Manifest, extras: dict[str, np.ndarray]) -> bool:
        return False

    def image_posterior_chains(self, manifest: Manifest, extras: dict[str, np.ndarray], num_samples: int,
                               rng: np.random.Generator, first: int | None = None) -> PlayerParams:
        raise ValueError("the frame fixes the player's chain: there is no image posterior (the oracle is "
                         "the best image-only predictor)")


register(PlayerProcess(), *ATARI_GAMES)  # one process: each game's player is in its dataset's manifest


class FrameCollector:
    """Frames of one game visited by the behaviour policy (module docstring), resized."""

    def __init__(self, game: str, image_shape: tuple[int, int, int], stride: int, seed: int):
        import ale_py  # the emulator is only needed to build Atari datasets
        from ale_py import roms

        if game not in ROM_IDS:
            raise ValueError(f"unknown Atari game {game!r}; choose one of {', '.join(ROM_IDS)}")
        self.ale = ale_py.ALEInterface()
        self.ale.setLoggerMode(ale_py.LoggerMode.Error)
        self.ale.setInt("random_seed", seed % (2**31 - 1))
        self.ale.setFloat("repeat_action_probability", 0.0)  # the policy below is sticky itself
        self.ale.loadROM(roms.get_rom_path(ROM_IDS[game]))
        self.actions = list(self.ale.getMinimalActionSet())
        self.rng = np.random.default_rng([seed, 0xA7A1])
        self.image_shape = image_shape
        self.stride = stride
        self.episode = -1
        self._in_episode = False

    def new_episode(self) -> None:
        """Start a fresh episode (called between splits so that none spans two)."""
        self.ale.reset_game()
        self.episode += 1
        self.frame = 0
        self.action = self.actions[0]
        for _ in range(int(self.rng.integers(0, _NOOP_START + 1))):
            self.ale.act(self.actions[0])
            self.frame += 1
        self._in_episode = True

    def take(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Next n kept frames: uint8 [n, C, H, W], episode ids [n], frame numbers [n]."""
        _, height, width = self.image_shape
        frames = np.empty((n, *self.image_shape), np.uint8)
        episodes = np.empty(n, np.int32)
        numbers = np.empty(n, np.int32)
        kept = 0
        while kept < n:
            if not self._in_episode:
                self.new_episode()
            if self.rng.random() < _CHANGE_PROB:
                self.action = self.actions[int(self.rng.integers(len(self.actions)))]
            self.ale.act(self.action)
            self.frame += 1
            if self.ale.game_over() or self.frame >= _MAX_EPISODE_FRAMES:
                self._in_episode = False
                continue
            if self.frame >= _BURN_IN and (self.frame - _BURN_IN) % self.stride == 0:
                frames[kept] = resize_rgb(self.ale.getScreenRGB(), height, width)
                episodes[kept], numbers[kept] = self.episode, self.frame
                kept += 1
        return frames, episodes, numbers


def build_atari(spec: DatasetSpec, out_dir: str | os.PathLike, seed: int = 0, chunk: int = 2048,
                stride: int | None = None) -> Path:
    """Build an Atari dataset with the sizes of `spec`; returns out_dir."""
    if spec.scenario not in ATARI_GAMES:
        raise ValueError(f"unknown Atari game {spec.scenario!r}; choose one of {', '.join(ATARI_GAMES)}")
    model = PLAYER_MODELS[spec.scenario]
    stride = stride or FRAME_STRIDE.get(spec.profile, 16)
    target = spec.mean_length_target
    collector = FrameCollector(spec.scenario, spec.image_shape, stride, seed)
    rng = np.random.default_rng([seed, ATARI_GAMES.index(spec.scenario)])
    calibration: dict[str, list[float] | float] = {}
    expected_sum = {split: 0.0 for split in spec.split_sizes}
    writer = DatasetWriter(out_dir, class_names=CLASS_NAMES, length=spec.length, image_shape=spec.image_shape,
                           event_class=END, has_exact_marginals=True)
    with writer:
        for split, n in spec.split_sizes.items():
            collector.new_episode()
            for start in range(0, n, chunk):
                frames, episodes, numbers = collector.take(min(chunk, n - start))
                raw = frame_features(frames)
                if not calibration:  # the first training frames fix the standardisation and the offset
                    mean, std = raw.mean(axis=0), raw.std(axis=0) + 1e-6
                    z = (raw - mean) / std
                    calibration = {"feature_mean": mean.tolist(), "feature_std": std.tolist(),
                                   "offset": calibrate_offset(z, model, spec.sampling_freq, spec.length, target)}
                z = (raw - np.array(calibration["feature_mean"])) / np.array(calibration["feature_std"])
                params = player_params(z, model, spec.sampling_freq, spec.length, calibration["offset"])
                marginals = exact_marginals(params)
                expected_sum[split] += float((1 - marginals[:, :, END]).sum())
                writer.add(split, frames, sample_sequences(params, rng), exact_marginals=marginals,
                           extras={"episode": episodes, "frame": numbers})
        details = {
            "rom": ROM_IDS[spec.scenario],
            "behaviour_policy": {"noop_start_max": _NOOP_START, "burn_in_frames": _BURN_IN,
                                 "action_change_prob": _CHANGE_PROB, "max_episode_frames": _MAX_EPISODE_FRAMES,
                                 "frame_stride": stride, "episodes": collector.episode + 1},
            "player_model": {**asdict(model), "features": list(FEATURES), **calibration},
            "mean_length_target": target,
            "exact_mean_length": {s: expected_sum[s] / spec.split_sizes[s] for s in spec.split_sizes},
        }
        return writer.commit(
            name=f"{spec.scenario}-{spec.profile}-seed{seed}",
            source=f"ale-py emulator ({ROM_IDS[spec.scenario]} ROM) + player model",
            game=spec.scenario, profile=spec.profile, sampling_freq=spec.sampling_freq, generator="ale-player",
            generator_version=GENERATOR_VERSION, seed=seed, details=details,
        )
