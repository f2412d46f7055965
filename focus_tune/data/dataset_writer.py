"""Write a dataset folder: ``DatasetWriter`` streams chunks of the three splits into Parquet,
counts each split's statistics as it goes (class counts, first entries, mean T, censoring),
and commits the folder with its manifest.

The chunks go into a hidden temporary folder next to the destination, which is renamed into
place only once everything, manifest last, is written and synced: a crash mid-write leaves
at most a `.NAME.tmp-*` folder, never one that looks complete. A folder that is there already
is replaced only when it is a dataset of ours (``folder_guard``).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..durable import fsync_path, write_atomic
from ..errors import DataError
from .dataset_format import IMAGE_SHAPE_KEY, MANIFEST, SPLIT_FILES, SPLITS, sha256_file
from .folder_guard import check_replaceable, remove_abandoned, temporary_folder
from .manifest import Manifest
from .sequences import (
    CENSOR_INSTEAD,
    CONDITION_NOT_EVENT,
    ONLY_EVENT_ABSORBING,
    censored_items,
    observed_mask,
    time_to_event,
)


class DatasetWriter:
    """Stream chunks of the three splits into a new dataset folder, atomically.

    Use as a context manager; call `add` for each chunk and `commit` once at the end. If the
    block raises, the temporary folder is removed and nothing appears at `out_dir`.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        *,
        class_names: list[str],
        length: int,
        image_shape: tuple[int, int, int],
        event_class: int,
        has_exact_marginals: bool,
        censored: bool = False,
    ):
        self.out_dir = Path(out_dir)
        if not 1 <= len(class_names) <= 127:
            raise ValueError(f"{len(class_names)} classes: the int8 sequence column holds 1 to 127")
        check_replaceable(self.out_dir)
        self.class_names = list(class_names)
        self.length = length
        self.image_shape = tuple(image_shape)
        self.event_class = event_class
        self.has_exact_marginals = has_exact_marginals
        self.censored = censored  # the splits carry observed_length (right-censored items)
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        remove_abandoned(self.out_dir)  # a write of the same folder killed before: its partial files
        self.tmp_dir = temporary_folder(self.out_dir)
        self.tmp_dir.mkdir()
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._counts = {s: 0 for s in SPLITS}
        self._class_counts = {s: np.zeros(len(class_names), np.int64) for s in SPLITS}
        self._first_counts = {s: np.zeros(len(class_names), np.int64) for s in SPLITS}
        self._tte_sums = {s: 0 for s in SPLITS}
        self._censored_items = {s: 0 for s in SPLITS}
        self._unobserved_entries = {s: 0 for s in SPLITS}

    def __enter__(self) -> "DatasetWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()

    def add(
        self,
        split: str,
        images: np.ndarray,
        sequences: np.ndarray,
        exact_marginals: np.ndarray | None = None,
        extras: dict[str, np.ndarray] | None = None,
        observed_length: np.ndarray | None = None,
    ) -> None:
        """Append one chunk to `split`.

        images uint8 [n, C, H, W]; sequences int [n, L]; exact_marginals [n, L, c] (required
        exactly when the dataset has them); extras: 1-D numeric arrays [n], the same names
        in every chunk; observed_length int [n] in 1..L (required exactly when the dataset
        is ``censored``). time_to_event is derived from the sequences (and observed lengths)
        here, so it is always consistent with them.
        """
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
        n, k = len(sequences), len(self.class_names)
        images = np.ascontiguousarray(images, dtype=np.uint8)
        sequences = np.asarray(sequences)
        if images.shape != (n, *self.image_shape):
            raise ValueError(f"images have shape {images.shape}, expected {(n, *self.image_shape)}")
        if sequences.shape != (n, self.length) or (n and (sequences.min() < 0 or sequences.max() >= k)):
            raise ValueError(f"sequences must be [{n}, {self.length}] class ids in [0, {k})")
        if (exact_marginals is not None) != self.has_exact_marginals:
            raise ValueError("exact_marginals must be given exactly when the dataset has them")
        if (observed_length is not None) != self.censored:
            raise ValueError("observed_length must be given exactly when the dataset is censored")
        if observed_length is not None:
            observed_length = np.asarray(observed_length, dtype=np.int64)
            if observed_length.shape != (n,) or (n and (observed_length.min() < 1
                                                        or observed_length.max() > self.length)):
                raise ValueError(f"observed_length must be [{n}] integers in [1, {self.length}]")
        if n == 0:
            return
        tte = time_to_event(sequences, self.event_class, observed_length)
        width = int(np.prod(self.image_shape))
        columns = {
            "image": pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(width), n, [None, pa.py_buffer(images.tobytes())]
            ),
            "sequence": pa.FixedSizeListArray.from_arrays(
                pa.array(sequences.astype(np.int8).ravel()), self.length
            ),
            "time_to_event": pa.array(tte.astype(np.int32)),
        }
        if exact_marginals is not None:
            marginals = np.asarray(exact_marginals, dtype=np.float32)
            if marginals.shape != (n, self.length, k):
                raise ValueError(f"exact_marginals have shape {marginals.shape}, expected {(n, self.length, k)}")
            columns["exact_marginals"] = pa.FixedSizeListArray.from_arrays(
                pa.array(marginals.ravel()), self.length * k
            )
        if observed_length is not None:
            columns["observed_length"] = pa.array(observed_length.astype(np.int32))
        for name, values in (extras or {}).items():
            values = np.asarray(values)
            if values.shape != (n,):
                raise ValueError(f"extra column {name!r} has shape {values.shape}, expected ({n},)")
            columns[name] = pa.array(values)
        # The pixel count alone cannot tell [3, 4, 5] from [3, 5, 4]: record the shape too.
        table = pa.table(columns).replace_schema_metadata({IMAGE_SHAPE_KEY: json.dumps(list(self.image_shape))})
        if split not in self._writers:
            self._writers[split] = pq.ParquetWriter(
                self.tmp_dir / f"{split}.parquet", table.schema, compression="zstd"
            )
        elif table.schema != self._writers[split].schema:
            raise ValueError(f"chunk columns {table.schema.names} differ from the first chunk of {split!r}")
        self._writers[split].write_table(table)
        self._counts[split] += n
        seen = sequences if observed_length is None else sequences[observed_mask(observed_length, self.length)]
        self._class_counts[split] += np.bincount(seen.ravel(), minlength=k)
        self._first_counts[split] += np.bincount(sequences[:, 0], minlength=k)
        self._tte_sums[split] += int(tte.sum())
        if observed_length is not None:
            self._censored_items[split] += int(censored_items(sequences, self.event_class, observed_length).sum())
            self._unobserved_entries[split] += int((self.length - observed_length).sum())

    def commit(
        self,
        *,
        name: str,
        source: str,
        generator: str,
        game: str | None = None,
        profile: str | None = None,
        sampling_freq: int = 1,
        generator_version: str = "",
        seed: int = 0,
        details: dict[str, Any] | None = None,
        condition_class: int | None = None,
        absorbing: list[int] | None = None,
    ) -> Path:
        """Close the files, write the manifest and move the folder to `out_dir`.

        ``condition_class``: the conditional metrics' first-entry class (default: the most
        frequent first entry of train other than the event); ``absorbing``: the classes
        after which nothing changes (default: the event class alone)."""
        empty = [s for s in SPLITS if self._counts[s] == 0]
        if empty:
            raise DataError(f"{self.out_dir}: split(s) {', '.join(empty)} received no rows")
        condition = self._condition_class() if condition_class is None else int(condition_class)
        if condition == self.event_class:
            what = "the condition class" if condition_class is not None else \
                "every item starts with the event, so the condition class (the most frequent first entry)"
            raise DataError(f"{self.out_dir}: {what} is the event {self.class_names[condition]}; {CONDITION_NOT_EVENT}")
        if absorbing is not None and set(absorbing) != {self.event_class}:
            others = [self.class_names[a] for a in sorted(set(absorbing)) if a != self.event_class]
            raise DataError(f"{self.out_dir}: absorbing {', '.join(others)}: only the event "
                            f"({self.class_names[self.event_class]}) may be absorbing, because {ONLY_EVENT_ABSORBING}; "
                            f"{CENSOR_INSTEAD}")
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        files = {}
        for split in SPLITS:
            file = self.tmp_dir / f"{split}.parquet"
            fsync_path(file)
            files[file.name] = sha256_file(file)
        stats = {
            split: {
                "mean_time_to_event": self._tte_sums[split] / self._counts[split],
                "class_counts": self._class_counts[split].tolist(),
                "first_entry_counts": self._first_counts[split].tolist(),
                **({"censored_items": self._censored_items[split],
                    "unobserved_entries": self._unobserved_entries[split]} if self.censored else {}),
            }
            for split in SPLITS
        }
        manifest = Manifest(
            name=name,
            source=source,
            game=game,
            profile=profile,
            class_names=self.class_names,
            length=self.length,
            sampling_freq=sampling_freq,
            image_shape=self.image_shape,
            splits=dict(self._counts),
            generator=generator,
            generator_version=generator_version,
            seed=seed,
            event_class=self.event_class,
            condition_class=condition,
            has_exact_marginals=self.has_exact_marginals,
            files=files,
            stats=stats,
            absorbing=None if absorbing is None else [int(a) for a in absorbing],
            censored=self.censored,
            details=details or {},
        )
        write_atomic(self.tmp_dir / MANIFEST, json.dumps(manifest.to_dict(), indent=2) + "\n")
        self._move_into_place()
        return self.out_dir

    def _condition_class(self) -> int:
        """Most frequent first entry in train (in every split, when each of train's starts with
        the event), the event class excluded: conditioning on an already absorbed first entry
        would make every later entry certain."""
        for counts in (self._first_counts["train"], sum(self._first_counts.values())):
            if counts.sum() > counts[self.event_class]:
                counts = counts.copy()
                counts[self.event_class] = -1
                return int(np.argmax(counts))
        return self.event_class  # every item starts with the event: refused by commit

    def abort(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        shutil.rmtree(self.tmp_dir, ignore_errors=True)

    def _move_into_place(self) -> None:
        old = None
        if os.path.lexists(self.out_dir):
            try:
                check_replaceable(self.out_dir)
            except DataError:
                self.abort()
                raise
            # Moved aside, not deleted, until the new folder is in place; then only the files
            # of our own format are removed (the check above found no other), so a file that
            # appears in it meanwhile survives in the .old- folder.
            old = self.out_dir.parent / f".{self.out_dir.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(self.out_dir, old)
        os.replace(self.tmp_dir, self.out_dir)
        fsync_path(self.out_dir.parent)
        if old is not None:
            for name in (*SPLIT_FILES, MANIFEST):
                (old / name).unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # something was added meanwhile: leave it, it is not ours
                old.rmdir()
