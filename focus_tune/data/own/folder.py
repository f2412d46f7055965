"""An image folder of one's own into the store format: ``python -m focus_tune.data import-folder``.

The imagefolder layout (Hugging Face datasets): ``metadata.csv`` or ``metadata.jsonl`` beside
the images, at the top or in each split's folder, its ``file_name`` column naming the images;
its rows are imported as a table's (``table.import_rows``).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ...errors import DataError
from ...quote import short
from .table import (
    Rows,
    check_table_flags,
    check_tokens,
    image_paths,
    import_rows,
    read_table,
    sequence_tokens,
    sorted_names,
)
from .write import check_out, default_name, file_info

METADATA_FILES = ("metadata.csv", "metadata.jsonl")

IMAGE_COLUMN = "file_name"  # the imagefolder layout's (Hugging Face datasets)

# The split folders of the layout, by the store's split: the names it takes.
SPLIT_FOLDERS = {"train": ("train",), "val": ("validation", "val"), "test": ("test",)}

def _metadata_file(folder: Path) -> Path | None:
    found = [folder / f for f in METADATA_FILES if (folder / f).is_file()]
    if len(found) > 1:
        raise DataError(f"{folder}: both metadata.csv and metadata.jsonl; keep one")
    return found[0] if found else None

def find_metadata(root: Path) -> list[tuple[str | None, Path]]:
    """The metadata files of an imagefolder tree: [(split, file)] of its split folders (train/,
    validation/ or val/, test/, each with its own metadata.csv or metadata.jsonl), or
    [(None, file)] of one at the top. DataError naming the folder when there is none, when
    both are there, or when a split folder is missing or lacks its file."""
    if not root.is_dir():
        raise DataError(f"{root}: no such folder (the imagefolder layout: a folder of images with a "
                        "metadata.csv or metadata.jsonl)")
    top = _metadata_file(root)
    folders: dict[str, Path] = {}
    for split, names in SPLIT_FOLDERS.items():
        present = [root / d for d in names if (root / d).is_dir()]
        if len(present) > 1:
            raise DataError(f"{root}: both {present[0].name}/ and {present[1].name}/; keep one validation folder")
        if present:
            folders[split] = present[0]
    with_files = {split: _metadata_file(d) for split, d in folders.items()}
    with_files = {split: f for split, f in with_files.items() if f is not None}
    if top is not None:
        if with_files:
            inner = ", ".join(str(f.relative_to(root)) for f in with_files.values())
            raise DataError(f"{root}: a {top.name} at the top and in split folders ({inner}); keep one: the top "
                            "one for a 70/20/10 split (or its own split column), or one per split folder")
        return [(None, top)]
    if not with_files:
        where = f" or in {', '.join(d.name + '/' for d in folders.values())}" if folders else ""
        raise DataError(f"{root}: no metadata.csv or metadata.jsonl at the top{where}; the imagefolder layout "
                        f"lists each image ({IMAGE_COLUMN} column) and its sequence in one (docs/DATA.md)")
    for split, d in folders.items():
        if split not in with_files:
            raise DataError(f"{d}: no metadata.csv or metadata.jsonl (each split folder holds its own, "
                            f"{IMAGE_COLUMN} relative to it)")
    missing = [" or ".join(f"{n}/" for n in SPLIT_FOLDERS[s]) for s in SPLIT_FOLDERS if s not in with_files]
    if missing:
        have = ", ".join(f"{d.name}/" for d in folders.values())
        raise DataError(f"{root}: split folders {have} but no {', '.join(missing)}: every split needs items; give "
                        "the three, or one metadata file at the top for a seeded 70/20/10 split")
    return [(split, with_files[split]) for split in SPLIT_FOLDERS]

def import_folder(
    folder: str | os.PathLike,
    out: str | os.PathLike,
    *,
    event: str,
    absorbing: Sequence[str] | None = None,
    length: int | None = None,
    name: str | None = None,
    classes: Sequence[str] | None = None,
    condition: str | None = None,
    image_size: tuple[int, int] | None = None,
    channels: int | None = None,
    sequence_column: str = "sequence",
    split_column: str | None = None,
    group_column: str | None = None,
    seed: int = 0,
    truncate: bool = False,
    command: str | None = None,
) -> Path:
    """Import a folder in Hugging Face datasets' imagefolder layout (the `import-folder`
    command; docs/DATA.md): images with a metadata.csv or metadata.jsonl whose ``file_name``
    column holds each image's path relative to the metadata file's folder, and the sequence
    column as in a table (``import_table``, whose checks and messages it shares). The splits
    are the split folders' (train/, validation/ or val/, test/, each with its own metadata
    file) when there are any, else the table importer's (seeded 70/20/10, or ``split_column``
    / ``group_column``). Without ``classes`` the split folders must hold the same classes.
    """
    import pyarrow as pa

    root = Path(folder)
    out = check_out(out)
    name = default_name(out, name, "--name")
    if split_column and group_column:
        raise DataError("give --split-column or --group-column, not both")
    check_table_flags(channels, truncate, length)
    found = find_metadata(root)
    by_folders = found[0][0] is not None
    if by_folders and (split_column or group_column):
        raise DataError(f"--{'split' if split_column else 'group'}-column: {root}'s split folders give the splits")
    rows = Rows(root if by_folders else found[0][1])
    tables, paths, splits, seen, files = [], [], [], [], []
    for split, meta in found:
        data, kind, lines = read_table(meta, (IMAGE_COLUMN, sequence_column, split_column, group_column))
        if data.num_rows == 0:
            raise DataError(f"{meta}: no rows")
        own = Rows(meta)
        own.add(meta, data.num_rows, lines)
        paths += image_paths(data, own, IMAGE_COLUMN, meta.parent)
        tokens = sequence_tokens(data, own, sequence_column)
        check_tokens(tokens, own, sequence_column)
        if by_folders:  # one sequence type whatever each file's format: a list of class names
            data = data.drop_columns([IMAGE_COLUMN])
            data = data.set_column(data.column_names.index(sequence_column), sequence_column,
                                   pa.array(tokens, pa.list_(pa.string())))
        tables.append(data)
        rows.add(meta, data.num_rows, lines)
        splits += [split] * data.num_rows
        seen.append({t for row in tokens for t in row})
        files.append({**file_info(meta, kind), "rows": data.num_rows, **({"split": split} if split else {})})
    if by_folders and classes is None:
        every = set().union(*seen)
        for (_, meta), mine in zip(found, seen):
            if mine != every:
                lacking = ", ".join(sorted_names(every - mine)[:10])
                raise DataError(f"{meta}: no sequence holds {lacking}, which the other split folders' do: the split "
                                "folders' class sets differ (a typo?); name every class with --classes to allow it")
    if by_folders:
        try:
            data = pa.concat_tables(tables, promote_options="permissive")
        except (pa.ArrowException, ValueError, TypeError) as err:
            raise DataError(f"{root}: the split folders' metadata files do not agree on their columns' types "
                            f"({short(' '.join(str(err).split()), 120)})") from None
        used = {s: "/".join(f"{n}/" for n in SPLIT_FOLDERS[s] if (root / n).is_dir()) for s in SPLIT_FOLDERS}
        rule = f"given (split folders {', '.join(used.values())})"
    else:
        data, rule = tables[0], None
    details = {"command": command, "folder": {"path": str(root.resolve()), "metadata": files}}
    return import_rows(data, rows, paths, out, event=event, absorbing=absorbing, length=length, name=name,
                        classes=classes, condition=condition, image_size=image_size, channels=channels,
                        image_column=IMAGE_COLUMN, sequence_column=sequence_column, split_column=split_column,
                        group_column=group_column, seed=seed, truncate=truncate, details=details,
                        source=f"imagefolder {root.resolve()}", generator="import-folder",
                        splits=np.array(splits) if by_folders else None, split_rule=rule)
