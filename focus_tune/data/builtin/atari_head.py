"""Import Atari-HEAD (Zhang et al. 2020) as distributed into the dataset store.

Input: a game folder with, per trial, `<trial>.txt` labels and `<trial>.tar.bz2` frames
(`<frame_id>.png`, 210x160 RGB, in any folder of the archive), plus `meta_data.csv` in
the folder or its parent. A label file starts with the header

    frame_id,episode_id,score,duration(ms),unclipped_reward,action,gaze_positions

then one row per frame (60 Hz); gaze_positions is a variable number of trailing values and
`null` marks a missing value. Actions are ALE ids 0-17.

Output, for each input frame j (every `stride`-th row): the actions at rows j, j + freq,
j + 2 freq, ... up to and including the first row k >= j of the same episode with
unclipped_reward > 0 (the scoring event: its reward follows that row's action), then END
up to L. A sequence that reaches L entries first is cut at L (time-to-event L). Dropped
and counted in the manifest: frames whose episode ends before scoring and before L entries
(the event is never observed), frames whose sampled rows hold a `null` action, frames
missing from the archive or unreadable. `null` rewards count as 0 and `null` episode ids
continue the previous row's episode (both counted). Trials whose labels give no complete
sequence at all are skipped as short trials. Trials are split 70/20/10 by trial (a seeded
shuffle of the trial ids; a trial never spans two splits).
"""
from __future__ import annotations

import csv
import os
import re
import tarfile
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ...errors import DataError
from ..dataset_writer import DatasetWriter
from ..images import load_rgb_resized
from ..splits import split_counts
from .ale import CLASS_NAMES, END
from .profiles import ATARI_GAMES, get_spec

HEADER = "frame_id,episode_id,score,duration(ms),unclipped_reward,action,gaze_positions"
GENERATOR_VERSION = "1"
_NULL = "null"


@dataclass
class TrialLabels:
    """One trial's label rows. episode int64 [n] (-1 before any id), reward float64 [n]
    (null -> 0), action int64 [n] (null -> -1)."""

    name: str
    frame_ids: list[str]
    episode: np.ndarray
    reward: np.ndarray
    action: np.ndarray
    nulls: Counter = field(default_factory=Counter)


def _number(text: str, path: Path, line: int, column: str, integer: bool) -> float | None:
    if text == _NULL:
        return None
    try:
        value = float(text)
    except ValueError:
        raise DataError(f"{path}:{line}: {column} {text!r} is neither a number nor null") from None
    if integer and value != int(value):
        raise DataError(f"{path}:{line}: {column} {text!r} is not a whole number")
    return value


def read_labels(path: str | os.PathLike) -> TrialLabels:
    """Parse one trial's label file; a malformed row raises DataError naming file and line."""
    path = Path(path)
    with open(path, newline="") as handle:
        lines = handle.read().splitlines()
    if not lines or lines[0].strip() != HEADER:
        found = lines[0].strip() if lines else "an empty file"
        raise DataError(f"{path}:1: expected the header {HEADER!r}, found {found!r}")
    frame_ids, episodes, rewards, actions = [], [], [], []
    nulls: Counter = Counter()
    episode = -1
    for line, text in enumerate(lines[1:], start=2):
        if not text.strip():
            continue
        fields = text.strip().split(",")
        if len(fields) < 7:
            raise DataError(f"{path}:{line}: expected at least 7 comma-separated fields, found {len(fields)}")
        frame_id, episode_text, score, duration, reward_text, action_text = fields[:6]
        if not frame_id or frame_id == _NULL:
            raise DataError(f"{path}:{line}: empty frame_id")
        _number(score, path, line, "score", integer=False)
        _number(duration, path, line, "duration(ms)", integer=False)
        value = _number(episode_text, path, line, "episode_id", integer=True)
        if value is None:
            nulls["episode_id"] += 1
        else:
            episode = int(value)
        reward = _number(reward_text, path, line, "unclipped_reward", integer=False)
        if reward is None:
            nulls["unclipped_reward"] += 1
        action = _number(action_text, path, line, "action", integer=True)
        if action is None:
            nulls["action"] += 1
        elif not 0 <= action < END:
            raise DataError(f"{path}:{line}: action {action_text} is not an ALE action id 0-17")
        frame_ids.append(frame_id)
        episodes.append(episode)
        rewards.append(0.0 if reward is None else reward)
        actions.append(-1 if action is None else int(action))
    return TrialLabels(path.stem, frame_ids, np.array(episodes, np.int64), np.array(rewards),
                       np.array(actions, np.int64), nulls)


def segment(labels: TrialLabels, length: int, freq: int, stride: int = 1) -> tuple[np.ndarray, np.ndarray, Counter]:
    """Sequences of one trial before frames are looked up.

    Returns the start rows [n], the END-padded sequences int64 [n, length] and the counts
    of dropped frames (`no_scoring_event`, `null_action`).
    """
    rows = len(labels.action)
    starts = np.arange(0, rows, stride)
    index = np.arange(rows)
    # Rows of one episode are contiguous; `stop` is one past each row's episode end.
    boundary = np.flatnonzero(np.diff(labels.episode)) + 1
    ends = np.append(boundary, rows)
    stop = ends[np.searchsorted(ends, index, side="right")]
    # Next scoring row at or after each row, within the episode (rows if none).
    scoring = np.where(labels.reward > 0, index, rows)
    next_score = np.empty(rows, np.int64)
    for lo, hi in zip(np.append(0, boundary), ends):
        next_score[lo:hi] = np.minimum.accumulate(scoring[lo:hi][::-1])[::-1]
    k = next_score[starts]
    scored = k < rows
    count = np.where(scored, (k - starts) // freq + 1, (stop[starts] - 1 - starts) // freq + 1)
    complete = scored | (count >= length)
    count = np.minimum(count, length)
    offsets = np.arange(length)
    row_index = np.minimum(starts[:, None] + freq * offsets[None, :], rows - 1)
    inside = offsets[None, :] < count[:, None]
    actions = labels.action[row_index]
    has_null = ((actions < 0) & inside).any(axis=1)
    keep = complete & ~has_null
    dropped = Counter({"no_scoring_event": int((~complete).sum()), "null_action": int((complete & has_null).sum())})
    sequences = np.where(inside, actions, END)[keep]
    return starts[keep], sequences, dropped


MAX_MEMBER_BYTES = 16 << 20  # an Atari-HEAD frame is a ~20 KB PNG
MAX_ARCHIVE_RATIO = 64  # decompressed bytes read per compressed byte (PNG frames barely compress)
MAX_ARCHIVE_SLACK = 256 << 20


def read_frames(archive: Path, wanted: set[str], height: int, width: int,
                skipped: Counter | None = None) -> tuple[dict[str, np.ndarray], int]:
    """Decode the wanted `<frame_id>.png` members of a trial archive, resized to [3, height, width].

    Returns {frame_id: image} and the number of wanted members that could not be decoded.
    The archive is streamed, never extracted. Bombs are skipped and counted in ``skipped``:
    a member over MAX_MEMBER_BYTES, or more decompressed data than MAX_ARCHIVE_RATIO times
    the archive's size (plus MAX_ARCHIVE_SLACK), ends the reading of that archive (a stream
    cannot skip a member without decompressing it: ``archives_cut_oversized``); an image
    whose header claims more than ``images.MAX_PIXELS`` pixels is not decoded
    (``frames_too_large``).
    """
    skipped = Counter() if skipped is None else skipped
    frames, unreadable, images = {}, 0, Counter()
    budget = archive.stat().st_size * MAX_ARCHIVE_RATIO + MAX_ARCHIVE_SLACK
    try:
        with tarfile.open(archive, "r|bz2") as tar:
            for member in tar:
                budget -= member.size
                if member.size > MAX_MEMBER_BYTES or budget < 0:
                    skipped["archives_cut_oversized"] += 1
                    break
                name = os.path.basename(member.name)
                if not member.isfile() or not name.endswith(".png") or name[:-4] not in wanted:
                    continue
                image = load_rgb_resized(tar.extractfile(member).read(), height, width, skipped=images)
                if image is None:
                    unreadable += 1
                else:
                    frames[name[:-4]] = image
    except (tarfile.TarError, EOFError, OSError) as err:
        raise DataError(f"{archive}: unreadable tar.bz2 archive ({err})") from err
    if images["too_large"]:
        skipped["frames_too_large"] += images["too_large"]
    return frames, unreadable


def _normalise(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _trial_key(name: str) -> str:
    """The trial id in a file name: its leading number (`100_RZ_3592991_...` -> `100`)."""
    match = re.match(r"^(\d+)_", name)
    return match.group(1) if match else name


def read_meta(folder: Path, game: str) -> tuple[Path | None, set[str] | None]:
    """Trial ids that meta_data.csv lists for `game` (None when there is no meta_data.csv)."""
    for candidate in (folder / "meta_data.csv", folder.parent / "meta_data.csv"):
        if candidate.is_file():
            break
    else:
        return None, None
    with open(candidate, newline="") as handle:
        rows = list(csv.reader(handle))
    if not rows:
        raise DataError(f"{candidate}:1: empty file, expected a header row")
    header = [_normalise(h) for h in rows[0]]
    trial_col = next((header.index(c) for c in ("trialid", "trialnumber", "trial") if c in header), None)
    game_col = next((header.index(c) for c in ("gamename", "game") if c in header), None)
    if trial_col is None:
        raise DataError(f"{candidate}:1: no trial id column (trial_id or TrialNumber) in {rows[0]}")
    trials = set()
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) <= max(trial_col, game_col or 0):
            raise DataError(f"{candidate}:{line}: expected {len(rows[0])} fields, found {len(row)}")
        if game_col is None or _normalise(row[game_col]) == _normalise(game):
            trials.add(row[trial_col].strip())
    if not trials:
        raise DataError(f"{candidate}: lists no trial of game {game!r}")
    return candidate, trials


def import_atari_head(folder: str | os.PathLike, game: str, out_dir: str | os.PathLike, *,
                      profile: str = "paper", length: int | None = None, sampling_freq: int | None = None,
                      image_size: tuple[int, int] | None = None, stride: int = 1, seed: int = 0) -> Path:
    """Convert one game of Atari-HEAD; returns out_dir.

    The image shape, padded length L and sampling freq come from `profile`'s row of the
    profile table unless given (image_size is (H, W)). Counts of everything skipped are in
    the manifest's `details`.
    """
    if game not in ATARI_GAMES:
        raise ValueError(f"unknown Atari game {game!r}; choose one of {', '.join(ATARI_GAMES)}")
    base = get_spec(game, profile)
    spec = replace(base, length=base.length if length is None else length,
                   sampling_freq=base.sampling_freq if sampling_freq is None else sampling_freq,
                   image_shape=(3, *image_size) if image_size is not None else base.image_shape)
    if min(spec.length, spec.sampling_freq, stride, *spec.image_shape) < 1:
        raise ValueError(f"length, sampling freq, stride and image size must be positive, got length {spec.length}, "
                         f"freq {spec.sampling_freq}, stride {stride}, image {list(spec.image_shape[1:])}")
    if max(spec.image_shape[1:]) > 4096 or spec.length > 100_000:
        raise ValueError(f"image size {list(spec.image_shape[1:])} or length {spec.length} is too large "
                         "(at most 4096 pixels a side and 100000 entries)")
    folder = Path(folder)
    label_files = sorted(folder.glob("*.txt"))
    if not label_files:
        raise DataError(f"{folder}: no trial label files (*.txt)")
    meta_file, listed = read_meta(folder, game)
    counts: Counter = Counter()
    trials = []
    for path in label_files:
        if listed is not None and _trial_key(path.stem) not in listed:
            counts["trials_not_in_meta_data"] += 1
            continue
        labels = read_labels(path)
        starts, sequences, dropped = segment(labels, spec.length, spec.sampling_freq, stride)
        counts.update({f"rows_null_{k}": v for k, v in labels.nulls.items()})
        counts["rows"] += len(labels.action)
        counts.update({f"frames_dropped_{k}": v for k, v in dropped.items()})
        if len(starts) == 0:
            counts["trials_short"] += 1
            continue
        trials.append((labels, starts, sequences))
    if listed is not None:
        found = {_trial_key(p.stem) for p in label_files}
        counts["trials_in_meta_data_without_files"] = len(listed - found)
    if len(trials) < 3:
        raise DataError(f"{folder}: {len(trials)} usable trial(s); a 70/20/10 split by trial needs at least 3")

    rng = np.random.default_rng([seed, 0x4EAD])
    order = sorted(trials, key=lambda t: (len(_trial_key(t[0].name)), _trial_key(t[0].name), t[0].name))
    order = [order[i] for i in rng.permutation(len(order))]
    n_train, n_val = split_counts(len(order))  # 70/20/10 of the trials, one each for val and test at least
    assignment = {"train": order[:n_train], "val": order[n_train:n_train + n_val], "test": order[n_train + n_val:]}

    _, height, width = spec.image_shape
    writer = DatasetWriter(out_dir, class_names=CLASS_NAMES, length=spec.length, image_shape=spec.image_shape,
                           event_class=END, has_exact_marginals=False)
    trial_names = [t[0].name for t in order]
    with writer:
        for split, split_trials in assignment.items():
            for labels, starts, sequences in split_trials:
                archive = folder / f"{labels.name}.tar.bz2"
                if not archive.is_file():
                    counts["trials_without_archive"] += 1
                    counts["frames_missing_from_archive"] += len(starts)
                    continue
                wanted = {labels.frame_ids[j] for j in starts}
                frames, unreadable = read_frames(archive, wanted, height, width, skipped=counts)
                counts["frames_unreadable"] += unreadable
                found = np.array([labels.frame_ids[j] in frames for j in starts], dtype=bool)
                counts["frames_missing_from_archive"] += int((~found).sum()) - unreadable
                if not found.any():
                    continue
                images = np.stack([frames[labels.frame_ids[j]] for j in starts[found]])
                trial_index = np.full(int(found.sum()), trial_names.index(labels.name), np.int32)
                writer.add(split, images, sequences[found],
                           extras={"trial": trial_index, "row": starts[found].astype(np.int32)})
                counts["frames_imported"] += int(found.sum())
        return writer.commit(
            name=f"{game}-atari-head-{profile}", source=f"Atari-HEAD import from {folder.resolve()}",
            game=game, profile=profile, sampling_freq=spec.sampling_freq, generator="atari-head-import",
            generator_version=GENERATOR_VERSION, seed=seed,
            details={
                "meta_data": str(meta_file) if meta_file else None,
                "trials": trial_names,
                "trials_per_split": {s: [t[0].name for t in ts] for s, ts in assignment.items()},
                "frame_stride": stride,
                "counts": dict(sorted(counts.items())),
            },
        )
