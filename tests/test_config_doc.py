"""docs/CONFIG.md is what ``python scripts/config_doc.py`` writes from the typed config, and
names every key a search space has."""

import importlib.util
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

from focus_tune.config.space import FIELD_CHECKS, GridConfig, SearchConfig, TrainConfig

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "CONFIG.md"
SCRIPT = REPO / "scripts" / "config_doc.py"
_spec = importlib.util.spec_from_file_location("config_doc", SCRIPT)
config_doc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(config_doc)


def test_the_committed_page_is_what_the_generator_writes():
    assert PAGE.read_text() == config_doc.render(), "docs/CONFIG.md is stale: run python scripts/config_doc.py"


def test_every_field_has_its_text_and_its_row():
    page = PAGE.read_text()
    for section, cls in (("train", TrainConfig), ("grid", GridConfig)):
        for f in fields(cls):
            assert f.metadata["doc"] and f.metadata["paper"], f.name
            assert FIELD_CHECKS[section][f.name].allowed, f.name
            assert f"| `{section}.{f.name}` |" in page, f.name
    for f in fields(SearchConfig):
        assert f.metadata["doc"], f.name
    for key in ("scenario", "final_seeds"):
        assert f"| `{key}` |" in page
    for words in ("--print-config", "--set KEY=VALUE", "generic search space",
                  "| hero | paper | 98553 / 16769 / 16885 |"):
        assert words in page, words


def test_check_mode_tells_a_stale_page(tmp_path):
    stale = tmp_path / "CONFIG.md"
    stale.write_text(config_doc.render().replace("integer >= 1", "integer", 1))
    run = [sys.executable, str(SCRIPT), "--check", "--out"]
    proc = subprocess.run([*run, str(stale)], capture_output=True, text=True)
    assert proc.returncode == 1 and "out of date" in proc.stderr
    assert subprocess.run([*run, str(PAGE)], capture_output=True, text=True).returncode == 0
