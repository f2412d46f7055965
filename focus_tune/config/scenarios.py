"""Which scenario a command runs: a built-in one (--game), or without it the dataset's (--data):
the one it was made for, or a dataset of one's own named after itself. The flags that say it,
shared by the search, the recipe stage and the replication (:class:`ScenarioFlags`), and the
rule (:func:`scenario_from`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..arguments import flag
from ..data import BUILTIN_SCENARIOS, read_manifest
from ..errors import DataError, SearchError
from ..names import PROFILES


@dataclass(frozen=True)
class ScenarioFlags:
    """What a command runs on, the flags every command takes: the scenario (``--game``; None:
    the dataset's, :func:`scenario_from`), the profile and the dataset folder. The search's
    options extend them (``search.cli.SearchOptions``); the recipe stage and the replication add
    them to their parsers (``arguments.add_flags``)."""

    scenario: str | None = flag("a built-in scenario (search_spaces/<scenario>.yaml); without it, --data names "
                                "the scenario", name="--game", choices=BUILTIN_SCENARIOS)
    profile: str = flag("smoke: seconds (tests); quick: a laptop (default); overconfident: the paper's regime on a "
                        "laptop (unregularized models overconfident; FaceMed, H.E.R.O., River Raid); paper: the "
                        "paper's sizes (GPUs)",
                        default="quick", choices=PROFILES)
    data: Path | None = flag("a dataset folder instead of the built-in data: your own (python -m focus_tune.data "
                             "import-table / import-arrays) or an imported built-in scenario", type=Path)


def scenario_from(game: str | None, data) -> str:
    """The scenario a command runs: ``--game``'s, or without it the dataset's (:func:`scenario_of`
    of ``--data``). A SearchError when neither is given; a DataError names a --data that is not
    a dataset."""
    if game is not None:
        return game
    if data is None:
        raise SearchError("give --game (a built-in scenario) or --data DIR (a dataset folder of your own)")
    return scenario_of(Path(data))


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
