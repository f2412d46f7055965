"""Which scenario a dataset folder is: a built-in one, or a dataset of one's own named after itself."""

from __future__ import annotations

from pathlib import Path

from ..data import BUILTIN_SCENARIOS, read_manifest
from ..errors import DataError


def scenario_of(data: Path) -> str:
    """The scenario of a dataset folder given without --game: the built-in one it was made for
    (the manifest's ``game``), or its name (which then must not be a built-in scenario's: it
    names the run folder and the MLflow
    experiment). Raises DataError naming the folder otherwise."""
    data = check_data_folder(data)
    manifest = read_manifest(data)
    if manifest.game is None and manifest.name in BUILTIN_SCENARIOS:
        raise DataError(f"--data {data}: the dataset is named {manifest.name!r}, a built-in scenario's name; "
                        "re-import it with another --name")
    return manifest.scenario


def check_data_folder(data) -> Path:
    """``--data``'s folder as a Path; DataError naming it when it is not a folder."""
    data = Path(data)
    if not data.is_dir():
        raise DataError(f"--data {data}: not a folder; expected a dataset folder "
                        "(python -m focus_tune.data import-table TABLE --out FOLDER ...)")
    return data
