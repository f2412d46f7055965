"""The project's errors live in ``focus_tune/errors.py``: every one derives from
``FocusTuneError`` and keeps its builtin base, no other module defines one, and errors.py
imports nothing of the project (it sits below every package)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from focus_tune import errors

ROOT = Path(__file__).resolve().parents[1] / "focus_tune"

# Each error -> the builtin it was before errors.py existed, which callers may still catch.
BUILTIN_BASE = {
    errors.ConfigError: ValueError, errors.DataError: ValueError, errors.ImageError: ValueError,
    errors.ImageTooLarge: ValueError, errors.RatesError: ValueError,
    errors.SearchError: RuntimeError, errors.DiskFull: RuntimeError, errors.LockBusy: RuntimeError,
    errors.TrackingUnavailable: RuntimeError, errors.StageFailed: RuntimeError, errors.PredictError: RuntimeError,
    errors.NonFiniteLoss: FloatingPointError, errors.ModelNotFound: LookupError,
}
# The exceptions defined outside errors.py, each with why.
ELSEWHERE = {
    "interrupt.py": {"Interrupted": "Ctrl-C, not a failure: except FocusTuneError must not catch it"},
    "config/strict_yaml.py": {"NotDecimal": "a PyYAML ConstructorError (it keeps the YAML position) that never "
                                            "leaves the YAML reader, which raises a ConfigError instead"},
}


def _error_classes() -> list[type]:
    return [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, BaseException)]


def test_every_error_derives_from_the_base_and_keeps_its_builtin():
    assert set(_error_classes()) == {errors.FocusTuneError, *BUILTIN_BASE}
    for cls, builtin in BUILTIN_BASE.items():
        assert issubclass(cls, errors.FocusTuneError) and issubclass(cls, builtin), cls
    assert issubclass(errors.TrackingUnavailable, errors.SearchError)  # the driver ends the search on either
    assert issubclass(errors.ImageTooLarge, errors.ImageError)
    with pytest.raises(ValueError):  # a caller of the builtin still catches it
        raise errors.ConfigError("space.yaml: train.epochs: must be a positive integer")


def _exception_bases(node: ast.ClassDef) -> list[str]:
    names = [ast.unparse(b) for b in node.bases]
    return [n for n in names if n.split(".")[-1].endswith(("Error", "Exception", "Warning")) or n == "BaseException"
            or n.split(".")[-1] in vars(errors)]


def test_no_other_module_defines_an_error():
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and _exception_bases(node):
                found.setdefault(rel, set()).add(node.name)
    assert found.pop("errors.py") == {c.__name__ for c in _error_classes()}
    assert found == {rel: set(names) for rel, names in ELSEWHERE.items()}


def test_errors_imports_nothing_of_the_project():
    tree = ast.parse((ROOT / "errors.py").read_text())
    project = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
               and (n.level or (n.module or "").startswith("focus_tune"))]
    project += [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Import)
                and any(a.name.startswith("focus_tune") for a in n.names)]
    assert project == []
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, focus_tune.errors; "
                               "print(sorted(m for m in sys.modules if m.split('.')[0] == 'focus_tune'))"],
        capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['focus_tune', 'focus_tune.errors']"


def test_the_packages_public_names_are_the_same_classes():
    from focus_tune import config, data, predict, search, tracking

    assert config.ConfigError is errors.ConfigError
    assert data.DataError is errors.DataError
    assert search.SearchError is errors.SearchError
    assert predict.PredictError is errors.PredictError
    assert tracking.ModelNotFound is errors.ModelNotFound and tracking.TrackingUnavailable is errors.TrackingUnavailable


def test_an_error_keeps_what_it_carries():
    failed = errors.StageFailed("stage2", ["s2-a", "s2-b"])
    assert failed.trial_ids == ("s2-a", "s2-b") and "'stage2'" in str(failed) and "resume" in str(failed)
    busy = errors.LockBusy("held", Path("run/search.lock"), None, 3.0)
    assert (str(busy), busy.path, busy.holder, busy.age_s) == ("held", Path("run/search.lock"), None, 3.0)
