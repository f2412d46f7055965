"""The commands the docs show are commands that work, so a renamed or removed flag fails here
and not for a reader.

Every ``python -m focus_tune...`` command in a code block of README.md and docs/*.md (``\\``
continuations joined; also inside ``ray job submit -- ...`` and after a ``$`` prompt) is
checked twice:

1. its flags parse with the real parser of its command (the search's with its cross-flag
   checks), the docs' placeholders (``IMAGE...``, ``DIR``, ``<id>``, ``{root}``) standing for
   real temporary files;
2. the cheap ones run, in page order in a fresh folder (so ``--print-config > my.yaml`` then
   ``--space my.yaml`` works as it does for a reader): every search as a dry run (shown with
   ``--dry-run``: as shown, and what the page shows it printing must be what it prints; else on
   the smoke profile with ``--dry-run``), ``focus_tune.data`` imports and ``info`` on a tiny
   table and arrays file written here, ``focus_tune.predict`` on the session's smoke search,
   ``focus_tune.replicate --aggregate-only`` over it.

Every other line of a shell block is a program listed in :data:`NOT_RUN` with why it cannot run
here, and the cluster examples of README, CLUSTER and GUIDE are one command at the recommended
``--gpus-per-trial``.

Commands written inline in prose (a code span in a paragraph, list item, table cell or heading,
across line breaks too) are checked as in 1.: a span that starts with ``python -m focus_tune``
(or ``python3 -m``, or ``use it: `` as a search prints it) is a command, its flags parse with its
CLI's parser by their full names; a flag alone (``--profile quick``) is not a command. What a
sentence leaves out follows a rule of :data:`INLINE_RULES` (the module alone names the CLI: its
``--help`` works; ``...`` stands for the least the command needs; ``[options]`` and the prose's
one-word placeholders ``GAME``, ``G``, ``r``, ``FOLDER...``), and a span that does not fit them is
listed in :data:`INLINE_NOT_RUN` with why. Inline ``python benchmarks/...`` and ``python
scripts/...`` mentions name a file that exists, and their flags are spelled in it.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = ("bash", "sh", "shell", "console")
FOCUS = re.compile(r"\bpython3? -m (focus_tune(?:\.[a-z_]+)*)\b")
# Scripts whose shown commands run too, in page order: they make what the next commands read.
SCRIPTS = re.compile(r"^python (scripts/digits_dataset\.py)\b")

# Lines of shell blocks that are not focus_tune commands, by the program they start with: why
# they do not run here, and what covers them instead.
NOT_RUN = {
    "ray": "Ray's launcher and CLI (up, dashboard, attach, job submit/logs, rsync-down, exec, down, get-auth-token) "
           "need the AWS cluster of cluster.yaml, and ray start/stop would start or stop a Ray on this machine that "
           "other tests share; tests/test_cluster.py validates cluster.yaml, tests/test_multinode.py runs the search "
           "on a `ray start` cluster (scripts/local_cluster.py); the search command inside a job runs here",
    "mlflow": "servers that run until stopped (mlflow ui, mlflow models serve); tests/test_mlflow_ui.py reads the "
              "smoke search's store, tests/test_pyfunc.py serves a logged model and posts to /invocations",
    "curl": "asks a model that mlflow models serve serves (tests/test_pyfunc.py posts the same request)",
    "kubectl": "a Kubernetes cluster (KubeRay)",
    "git worktree": "a second checkout of the repository (the fault soak's code under test)",
    "aws": "AWS credentials",
    "pip": "installs packages (tests/test_cluster.py checks requirements-cluster.txt against pyproject.toml)",
    "export": "sets a shell variable",
    "python3 -m venv": "a new environment and pip install (tests/test_wheel.py installs the package into a fresh "
                       "one); the search command after it runs here",
    "python -c": "regenerates requirements-cluster.txt from pip's report (tests/test_cluster.py checks the file)",
    "python scripts/local_cluster.py": "a two-node Ray cluster for minutes: tests/test_multinode.py runs it; the "
                                       "search command it runs is checked here",
    "python benchmarks/gpu_check.py": "needs a GPU: tests/test_gpu_check.py runs it with --dry and writes "
                                      "--rates-out from the saved H200 run",
    "python benchmarks/": "the measurements behind a page's numbers, minutes to hours each; "
                          "tests/test_bench_*.py run the ones a test can afford",
}
# focus_tune commands that parse here but do not run, by (module, subcommand or None): why.
PARSE_ONLY = {
    ("focus_tune.data", "import-utkface"): "needs the UTKFace images (tests/test_data_facemed.py imports a small "
                                           "folder in their format)",
    ("focus_tune.data", "import-atari-head"): "needs the Atari-HEAD files (tests/test_data_atari_head.py imports a "
                                              "small fixture in their format)",
}
DATA_BUILD_PROFILES = ("smoke", "quick")  # a paper-profile build takes minutes and gigabytes: parsed only

# What an inline command may leave out, by rule (see inline_argv): the rule's name and what it means.
INLINE_RULES = {
    "the CLI's name": "`python -m MODULE` alone (or with a focus_tune.data subcommand) names the command in a "
                      "sentence: its --help must work",
    "...": "stands for the flags the sentence leaves out: replaced by the least the command needs (ELIDED), the "
           "rest must parse",
    "[options]": "a synopsis' further flags: dropped",
    "placeholders": "the prose's one-word placeholders, whole words only (INLINE_PLACEHOLDERS)",
}
ELIDED = {"focus_tune.search": ["--game", "hero"], "focus_tune.replicate": ["--game", "hero"]}
INLINE_PLACEHOLDERS = {"GAME": "hero", "G": "hero", "r": "0", "FOLDER...": "{root}"}
# Code spans that hold a focus_tune command but are not checked as one, by (page, the span's text): why.
# An entry whose span is gone from its page fails the test (remove it).
INLINE_NOT_RUN = {
    ("docs/CONTRIBUTING.md", "python -m focus_tune..."): "the pattern of the commands this file checks, not a command",
    ("docs/CLUSTER.md", 'ray exec cluster.yaml --tmux "python -m focus_tune.search ..."'):
        "a ray command (NOT_RUN: needs the AWS cluster) around the search of the block above it, whose flags the "
        "sentence leaves out; that block's command is checked",
}


# -- what the pages show ----------------------------------------------------------------------

@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str  # README.md, docs/CLUSTER.md
    lang: str
    section: str  # the heading above it
    lines: tuple[tuple[int, str], ...]  # (line number, logical line: `\\` continuations joined)


@dataclass
class Command:
    """One focus_tune command (or one of :data:`SCRIPTS`) as a page shows it."""

    where: str  # page:line
    section: str
    module: str  # focus_tune.search, focus_tune.data, ...
    argv: list[str]
    stdout_to: str | None = None  # `> FILE`
    shown_output: list[str] = field(default_factory=list)  # what the page shows it printing

    @property
    def sub(self) -> str | None:
        return self.argv[0] if self.module == "focus_tune.data" and self.argv else None

    @property
    def script(self) -> bool:
        return self.module.startswith("scripts/")

    def __str__(self) -> str:
        run = f"python {self.module}" if self.script else f"python -m {self.module}"
        return f"{self.where}: {run} {shlex.join(self.argv)}"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a page (indented ones too), their lines joined at ``\\``."""
    out, section, fence, raw = [], "", None, []
    for n, line in enumerate(page.read_text().splitlines(), start=1):
        if fence is None:
            if m := re.match(r"^(\s*)```(\S*)\s*$", line):
                fence, raw = (len(m.group(1)), m.group(2), section), []
            elif line.startswith("#"):
                section = line.lstrip("#").strip()
            continue
        if re.match(r"^\s*```\s*$", line):
            indent, lang, sec = fence
            logical, start, text = [], None, ""
            for k, body in raw:
                body = body[indent:] if body[:indent].strip() == "" else body
                start = k if start is None else start
                if body.rstrip().endswith("\\"):
                    text += body.rstrip()[:-1].strip() + " "
                    continue
                logical.append((start, (text + body.strip()).strip()))
                start, text = None, ""
            out.append(Block(str(page.relative_to(ROOT)), lang, sec, tuple(logical)))
            fence = None
            continue
        raw.append((n, line))
    return out


def commands_of(block: Block) -> list[Command]:
    """The focus_tune commands of a block; after a ``$`` prompt, with the lines it shows printed."""
    if block.lang == "python":
        return []
    out: list[Command] = []
    prompted = None  # the last `$ ` command of an output block, while its printed lines follow
    for n, line in block.lines:
        if script := SCRIPTS.match(line):
            out.append(Command(f"{block.page}:{n}", block.section, script.group(1),
                               shlex.split(line[script.end():], comments=True)))
            continue
        m = FOCUS.search(line)
        if m is None:
            if prompted is not None and not line.startswith("$ "):
                prompted.shown_output.append(line)
            else:
                prompted = None
            continue
        module, tokens, stdout_to = split_command(line, m)
        out.append(Command(f"{block.page}:{n}", block.section, module, [t for t in tokens if t != "..."], stdout_to))
        prompted = out[-1] if line.startswith("$ ") and block.lang not in SHELL else None
    return out


def split_command(line: str, m: re.Match) -> tuple[str, list[str], str | None]:
    """(module, words, ``> FILE``) of the focus_tune command ``m`` found in ``line``; its words
    stop at ``&&``, ``||``, ``|``, ``;`` and a redirection."""
    if line.startswith("use it: "):  # a search's last line: the command, then why in parentheses
        line = re.sub(r"\s{2}\(.*\)$", "", line)
    tokens = shlex.split(line[m.end():], comments=True)
    stdout_to = None
    for i, tok in enumerate(tokens):
        if tok in ("&&", "||", "|", ";"):
            tokens = tokens[:i]
            break
        if tok in (">", ">>"):
            stdout_to, tokens = tokens[i + 1], tokens[:i]
            break
    return ("focus_tune.search" if m.group(1) == "focus_tune" else m.group(1)), tokens, stdout_to


def page_commands(page: Path, scripts: bool = False) -> list[Command]:
    """The focus_tune commands of a page in order (with ``scripts``: and the :data:`SCRIPTS`)."""
    return [c for b in blocks(page) for c in commands_of(b) if scripts or not c.script]


@dataclass(frozen=True)
class Span:
    """One inline code span of a page's prose."""

    page: str
    line: int  # where it opens
    section: str
    text: str  # line breaks as spaces; in a table row, `\|` as `|`

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def spans(page: Path) -> list[Span]:
    """The code spans of a page outside its fenced blocks, as CommonMark finds them: a run of N
    backticks up to the next run of exactly N, within a paragraph or list item (so across its
    line breaks), a table row or a heading; a run without its match is literal text."""
    rel, out, section, chunk, fenced = str(page.relative_to(ROOT)), [], "", [], False

    def close_chunk():
        if not chunk:
            return
        text, table = "\n".join(line for _, line in chunk), chunk[0][1].lstrip().startswith("|")
        at = 0
        while opening := re.compile(r"`+").search(text, at):
            closing = re.compile(rf"(?<!`)`{{{len(opening.group())}}}(?!`)").search(text, opening.end())
            if closing is None:
                at = opening.end()
                continue
            body = " ".join(text[opening.end():closing.start()].split())
            out.append(Span(rel, chunk[0][0] + text.count("\n", 0, opening.start()), section,
                            body.replace("\\|", "|") if table else body))
            at = closing.end()
        chunk.clear()

    for n, line in enumerate(page.read_text().splitlines(), start=1):
        if fenced:
            fenced = not re.match(r"^\s*```\s*$", line)  # as blocks() reads a fence
            continue
        if re.match(r"^(\s*)```(\S*)\s*$", line):
            close_chunk()
            fenced = True
        elif not line.strip() or line.startswith("#") or line.lstrip().startswith("|"):
            close_chunk()  # a blank line ends a paragraph; a heading and a table row are one line each
            if line.startswith("#"):
                section = line.lstrip("#").strip()
            if line.strip():
                chunk.append((n, line))
                close_chunk()
        else:
            chunk.append((n, line))
    close_chunk()
    return out


INLINE = re.compile(r"^(?:use it: )?python3? -m (focus_tune(?:\.[a-z_]+)*)\b")
INLINE_SCRIPT = re.compile(r"\bpython3? ((?:benchmarks|scripts)/[\w./-]+\.py)\b")


def inline_commands(page: Path) -> list[tuple[Span, Command]]:
    """The spans of a page that are focus_tune commands, each with its command as written
    (``...`` kept for :func:`inline_argv`; a ``<placeholder>`` may hold spaces)."""
    out = []
    for span in spans(page):
        if (m := INLINE.match(span.text)) and (span.page, span.text) not in INLINE_NOT_RUN:
            text = span.text[:m.end()] + re.sub(r"<[^<>]*>", "x", span.text[m.end():])
            module, tokens, stdout_to = split_command(text, m)
            out.append((span, Command(span.where, span.section, module, tokens, stdout_to)))
    return out


def inline_argv(c: Command) -> list[str] | None:
    """The argv of an inline command by :data:`INLINE_RULES`, or None where it names the CLI."""
    if not c.argv or (c.module == "focus_tune.data" and len(c.argv) == 1):
        return None
    argv = []
    for tok in c.argv:
        if tok == "...":
            if c.module not in ELIDED:
                raise ValueError(f"`...` in a {c.module} command: no rule for what it leaves out (ELIDED)")
            argv += ELIDED[c.module]
        elif tok != "[options]":
            argv.append(INLINE_PLACEHOLDERS.get(tok, tok))
    return argv


# -- a folder a reader works in ---------------------------------------------------------------

CLASSES_SEEN = ("ok", "warn", "fail", "END")  # README's example's event is fail, DATA's END


def write_inputs(folder: Path) -> None:
    """What the pages' commands read: ``items.csv`` (images, sequences, a ``site`` column),
    ``items.npz``, ``photos/`` (an imagefolder tree: train/, validation/, test/), and
    ``a10g_rates.json`` (as ``gpu_check.py --rates-out`` writes on an A10G, which the shown
    command before it cannot run here)."""
    rng = np.random.default_rng(0)
    (folder / "images").mkdir(parents=True)
    sequences = ["ok ok warn fail", "ok END", "ok warn", "warn warn fail", "ok ok ok END", "ok"]
    rows = []
    for i in range(30):
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(folder / "images" / f"{i}.png")
        rows.append({"image": f"images/{i}.png", "sequence": sequences[i % len(sequences)], "site": f"s{i % 10}"})
    with open(folder / "items.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["image", "sequence", "site"])
        writer.writeheader()
        writer.writerows(rows)
    for split, count, fmt in (("train", 10, "csv"), ("validation", 4, "jsonl"), ("test", 4, "csv")):
        # photos/: an imagefolder tree (DATA.md, "An imagefolder"), a metadata file per split folder
        (folder / "photos" / split).mkdir(parents=True)
        items = [(f"{i}.png", sequences[i % len(sequences)]) for i in range(count)]
        for file_name, _ in items:
            pixels = np.random.default_rng(len(file_name)).integers(0, 256, (8, 8, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / "photos" / split / file_name)
        lines = ([json.dumps({"file_name": f, "sequence": s.split()}) for f, s in items] if fmt == "jsonl"
                 else ["file_name,sequence", *(f"{f},{s}" for f, s in items)])
        (folder / "photos" / split / f"metadata.{fmt}").write_text("\n".join(lines) + "\n")
    ids = {name: k for k, name in enumerate(CLASSES_SEEN)}
    seqs = np.full((30, 5), -1, dtype=np.int64)
    for i in range(30):
        names = sequences[i % len(sequences)].split()
        seqs[i, :len(names)] = [ids[name] for name in names]
    np.savez(folder / "items.npz", images=rng.integers(0, 256, (30, 8, 8, 3), dtype=np.uint8), sequences=seqs,
             classes=np.array(CLASSES_SEEN))
    (folder / "a10g_rates.json").write_text(json.dumps({
        "device": "NVIDIA A10G", "measured": "2027-01-02", "command": "python benchmarks/gpu_check.py",
        "precision": "bf16", "batch_size": 256, "num_samples": 100, "train_samples_per_s_alone": {"3x84x84 L=300": 4e3},
        "sharing_slowdown": {"1": 1.0, "0.5": 1.2}, "val_s_per_item_entry": 2e-5}))


@pytest.fixture(scope="module")
def some_dataset(tmp_path_factory) -> Path:
    """A tiny dataset of one's own, for a ``--data`` that names a folder a reader has."""
    folder = tmp_path_factory.mktemp("own")
    write_inputs(folder)
    code, _, err = invoke("focus_tune.data", ["import-table", str(folder / "items.csv"), "--out",
                                              str(folder / "mine"), "--event", "END"])
    assert code == 0, err
    return folder / "mine"


def localized(argv: list[str], folder: Path, dataset: Path, image: Path | None = None) -> list[str]:
    """The docs' placeholders as real paths (``IMAGE...``: ``image``, else one of ``folder``'s),
    and every absolute or home path moved under ``folder``, so that a command reads and writes
    only there."""
    image = image or folder / "images" / "0.png"
    names = {"{root}": str(folder), "{address}": "127.0.0.1:6379", "IMAGE...": str(image),
             "IMAGE_OR_FOLDER...": str(image), "DIR": str(dataset), "PATH": str(folder / "path"),
             "TABLE": str(folder / "items.csv"), "FILE.npz": str(folder / "items.npz")}
    out = []
    for tok in argv:
        if tok.startswith(("/", "~/")):
            tok = str(folder / "abs" / tok.lstrip("~/"))
        for name, value in names.items():
            tok = tok.replace(name, value)
        out.append(re.sub(r"<[^<>]*>", "x", tok))  # runs:/<run id>/model -> runs:/x/model
    return out


def with_data(argv: list[str], dataset: Path) -> list[str]:
    """``--data X`` where X is not a dataset here: a dataset this test made (the flags are what
    is checked, not the reader's files)."""
    out = list(argv)
    for i, tok in enumerate(out[:-1]):
        if tok == "--data" and not (Path(out[i + 1]) / "manifest.json").is_file():
            out[i + 1] = str(dataset)
    return out


# -- running a command in this process -------------------------------------------------------

def invoke(module: str, argv: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``python -m module argv``, run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main_of(module)(argv)
        except SystemExit as stop:  # argparse, --version
            code = stop.code if isinstance(stop.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def main_of(module: str):
    if module == "focus_tune.search":
        from focus_tune.search import main
    elif module == "focus_tune.data":
        from focus_tune.data.__main__ import main
    elif module == "focus_tune.predict":
        from focus_tune.predict import main
    elif module == "focus_tune.replicate":
        from focus_tune.replicate.cli import main
    elif module == "focus_tune.recipe":
        from focus_tune.recipe.tuning import main
    elif module == "focus_tune.replicate.regime":
        from focus_tune.replicate.regime import main
    elif module == "focus_tune.replicate.verdict":
        from focus_tune.replicate.verdict import main
    else:
        raise AssertionError(f"python -m {module}: no parser known to this test; add it to main_of and parse_error")
    return main


def parse_error(c: Command, argv: list[str]) -> str | None:
    """Why ``argv`` does not parse with the real parser of the command, or None."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            if c.module == "focus_tune.search":
                from focus_tune.search.cli import parse_options

                parse_options(argv)  # build_parser, the --set overrides, check_flags
            elif c.module == "focus_tune.data":
                from focus_tune.data.__main__ import get_parser

                get_parser().parse_args(argv)
            elif c.module == "focus_tune.predict":
                from focus_tune.predict.cli import build_parser

                build_parser().parse_args(argv)
            elif c.module == "focus_tune.replicate":
                from focus_tune.replicate.cli import parse

                parse(argv)
            elif c.module == "focus_tune.recipe":
                from focus_tune.recipe.tuning import build_parser as recipe_parser

                recipe_parser().parse_args(argv)
            elif c.module in PARSED_IN_MAIN:
                parsed_by_main(c.module, argv)
            else:
                return f"no parser known to this test for {c.module}"
    except SystemExit as stop:
        return err.getvalue().strip() or f"exit {stop.code}"
    except Exception as e:  # noqa: BLE001 - the search's checks (SearchError, ConfigError, DataError)
        return f"{type(e).__name__}: {e}"
    return None


# CLIs whose parser is built inside their main (which then writes or reads files): parsed by parsed_by_main.
PARSED_IN_MAIN = ("focus_tune.replicate.regime", "focus_tune.replicate.verdict")


class _Parsed(Exception):
    """What :func:`parsed_by_main` stops a main with once its flags have parsed."""


def parsed_by_main(module: str, argv: list[str]) -> None:
    """Parse ``argv`` with the parser ``module``'s main builds, and stop the main there, before it
    does anything (argparse's own errors exit as they do for a reader)."""
    parse_args = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, *args, **kwargs):
        parse_args(self, *args, **kwargs)
        raise _Parsed

    with mock.patch.object(argparse.ArgumentParser, "parse_args", parse_then_stop):
        try:
            main_of(module)(argv)
        except _Parsed:
            return
    raise AssertionError(f"python -m {module}: its main returned without parsing its flags")


def help_of(c: Command) -> str:
    """What ``--help`` prints for the command (its subcommand's, for focus_tune.data)."""
    code, out, _ = invoke(c.module, [c.sub, "--help"] if c.sub else ["--help"])
    assert code == 0, f"{c.module} --help: exit {code}"
    return out


def abbreviated(c: Command, argv: list[str], helps: dict) -> list[str]:
    """The flags of ``argv`` that are not spelled as the CLI names them: argparse takes a prefix
    of a flag for the flag, so a doc would keep working with a flag that was renamed to a longer
    name, until the prefix is no longer unique."""
    key = (c.module, c.sub)
    if key not in helps:
        helps[key] = help_of(c)
    flags = []
    for tok in argv[:argv.index("--")] if "--" in argv else argv:
        name = tok.split("=", 1)[0]
        if name.startswith("--") and not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", helps[key]):
            flags.append(name)
    return flags


def shown_lines_missing(shown: list[str], printed: str) -> list[str]:
    """The lines a page shows a command printing that it does not print (``...`` is elided
    text; spacing aside)."""
    have = {" ".join(line.split()) for line in printed.splitlines()}
    missing = []
    for line in shown:
        line = " ".join(line.split())
        if not line or line == "...":
            continue
        pattern = re.escape(line).replace(r"\.\.\.", ".*")
        if not any(re.fullmatch(pattern, h) for h in have):
            missing.append(line)
    return missing


# -- the tests --------------------------------------------------------------------------------

def _pages_with(*modules: str) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in PAGES if any(c.module in modules for c in page_commands(p))]


def test_the_pages_show_commands_of_every_cli():
    """What this file checks is there to check: commands of every CLI, and dry runs shown with
    what they print."""
    shown = [c for p in PAGES for c in page_commands(p)]
    assert {c.module for c in shown} == {"focus_tune.search", "focus_tune.data", "focus_tune.predict",
                                         "focus_tune.replicate"}
    assert len(shown) >= 30
    printed = {c.where.split(":")[0] for c in shown if "--dry-run" in c.argv and c.shown_output}
    assert printed >= {"docs/CLUSTER.md", "docs/GUIDE.md"}, printed


@pytest.mark.parametrize("page", [str(p.relative_to(ROOT)) for p in PAGES if page_commands(p)])
def test_every_command_parses_with_its_cli(page, tmp_path, some_dataset):
    write_inputs(tmp_path)
    problems, helps = [], {}
    for c in page_commands(ROOT / page):
        argv = with_data(localized(c.argv, tmp_path, some_dataset), some_dataset)
        if (why := parse_error(c, argv)) is not None:
            problems.append(f"{c}\n    {why}")
        elif short := abbreviated(c, argv, helps):
            problems.append(f"{c}\n    not a flag by its full name (argparse took a prefix): {', '.join(short)}")
    assert not problems, "commands the docs show that their CLI refuses:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", _pages_with("focus_tune.search", "focus_tune.data"))
def test_the_searches_dry_run_and_the_data_commands_run(page, tmp_path, some_dataset, monkeypatch):
    """In page order, in a fresh folder: a search as a dry run (what the page shows a dry run
    print is what it prints), the data imports and info for real."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FOCUS_TUNE_GPU_RATES", raising=False)
    write_inputs(tmp_path)
    problems = []
    for c in page_commands(ROOT / page, scripts=True):
        argv = localized(c.argv, tmp_path, some_dataset)
        if c.script:
            done = subprocess.run([sys.executable, str(ROOT / c.module), *argv], capture_output=True, text=True)
            if done.returncode != 0:
                problems.append(f"{c}\n    exit {done.returncode}: {done.stderr.strip()[-600:]}")
            continue
        if c.module not in ("focus_tune.search", "focus_tune.data") or (c.module, c.sub) in PARSE_ONLY:
            continue
        if c.module == "focus_tune.data" and c.sub == "build":
            profile = argv[argv.index("--profile") + 1] if "--profile" in argv else "quick"
            if profile not in DATA_BUILD_PROFILES:
                continue
        if c.module == "focus_tune.search" and not {"--dry-run", "--print-config"} & set(argv):
            # a search space of one's own (--space) defines its own profiles: its dry run is of the one it names
            argv += ["--dry-run"] if "--space" in argv else ["--profile", "smoke", "--dry-run"]
        code, out, err = invoke(c.module, argv)
        if code != 0:
            problems.append(f"{c}\n    exit {code}: {err.strip()[-600:]}")
            continue
        if c.stdout_to:
            Path(c.stdout_to).write_text(out)
        if c.module == "focus_tune.search" and "--dry-run" in argv and c.shown_output:
            if missing := shown_lines_missing(c.shown_output, out):
                problems.append(f"{c}\n    the page shows lines it does not print: {missing}")
    assert not problems, "commands the docs show that fail:\n" + "\n".join(problems)


@pytest.fixture(scope="module")
def smoke_model(smoke_search, tmp_path_factory) -> dict:
    """The session's smoke search as a page's predict and replicate commands need it: its model
    URI (the one its output prints after "use it:"), store, dataset and a test image."""
    from focus_tune.data import load_dataset
    from smoke_search import GAME, state_of

    uri = re.search(r"use it: python -m focus_tune.predict --model (runs:/\S+)", smoke_search.out).group(1)
    data = Path(state_of(smoke_search.work)["fingerprint"]["data"])
    ds = load_dataset(data)
    image = tmp_path_factory.mktemp("smoke_image") / "test0.png"
    Image.fromarray(np.ascontiguousarray(ds.test.images[0].transpose(1, 2, 0))).save(image)
    m = ds.manifest
    return {"uri": uri, "store": f"sqlite:///{smoke_search.work / 'mlflow.db'}", "data": data, "image": image,
            "condition": m.class_names[m.condition_class], "runs": smoke_search.work / "runs", "game": GAME}


def for_the_smoke_model(argv: list[str], smoke: dict) -> list[str]:
    """A page's predict command pointed at the smoke search: its model, its dataset where the
    page names a built-in dataset folder, a class of its own for ``--prefix`` (the pages'
    examples are of H.E.R.O. quick; the session's search is FaceMed smoke)."""
    out = []
    for i, tok in enumerate(argv):
        before = argv[i - 1] if i else ""
        if before == "--model":
            tok = smoke["uri"]
        elif before == "--prefix":
            tok = smoke["condition"]
        elif re.search(r"(^|/)[a-z]+-(smoke|quick|paper)-seed\d+$", tok):
            tok = str(smoke["data"])
        out.append(tok)
    return out if "--tracking-uri" in out else [*out, "--tracking-uri", smoke["store"]]


@pytest.mark.slow
@pytest.mark.parametrize("page", _pages_with("focus_tune.predict", "focus_tune.replicate"))
def test_predict_and_replicate_commands_run_on_the_smoke_search(page, tmp_path, some_dataset, smoke_model,
                                                                monkeypatch):
    """predict on the session's smoke search's model; replicate with --aggregate-only over its
    run folder (read only), writing its report and MLflow run here."""
    monkeypatch.chdir(tmp_path)
    write_inputs(tmp_path)
    problems = []
    for c in page_commands(ROOT / page):
        argv = with_data(localized(c.argv, tmp_path, some_dataset, smoke_model["image"]), some_dataset)
        if c.module == "focus_tune.predict":
            code, out, err = invoke(c.module, for_the_smoke_model(argv, smoke_model))
            figures = [Path(line.split(": ", 1)[1]) for line in out.splitlines()
                       if line.strip().startswith("figure: ")]
            if code != 0:
                problems.append(f"{c}\n    exit {code}: {err.strip()[-600:]}")
            elif f"model: {smoke_model['uri']} ({smoke_model['uri'].rsplit('/model-', 1)[1]}" not in out:
                problems.append(f"{c}\n    no summary of the model: {out[:400]}")
            elif "--figures" in argv and not (figures and all(f.is_file() for f in figures)):
                problems.append(f"{c}\n    --figures: no figure written ({figures})")
        elif c.module == "focus_tune.replicate":
            from focus_tune.replicate.cli import parse

            game = parse(argv).scenario
            code, out, err = invoke(c.module, [*argv, "--aggregate-only", "--profile", "smoke", "--storage",
                                               str(smoke_model["runs"]), "--out", str(tmp_path / "replication"),
                                               "--tracking-uri", f"sqlite:///{tmp_path / 'replication.db'}"])
            if game == smoke_model["game"]:  # seed 0 is the smoke search; other seeds of --runs are missing
                if code not in (0, 3) or "replication of 1 searches" not in out:
                    problems.append(f"{c}\n    exit {code}: {(out + err).strip()[-600:]}")
            elif code != 3 or f"no finished search of {game} (smoke)" not in err:
                problems.append(f"{c}\n    exit {code}: {(out + err).strip()[-600:]}")
    assert not problems, "commands the docs show that fail:\n" + "\n".join(problems)


def test_the_pages_show_inline_commands_of_every_cli():
    """The inline commands this file checks are there to check, of the CLIs the code blocks show."""
    found = [c for p in PAGES for _, c in inline_commands(p)]
    assert {c.module for c in found} >= {"focus_tune.search", "focus_tune.data", "focus_tune.predict",
                                         "focus_tune.replicate", "focus_tune.recipe"}
    assert len(found) >= 35, len(found)
    assert sum(inline_argv(c) is not None for c in found) >= 25  # commands with flags, not only CLI names


def test_every_inline_command_parses_with_its_cli(tmp_path, some_dataset):
    """A focus_tune command written inline in prose parses as a code block's does (step 1), by
    :data:`INLINE_RULES`; a span that holds one and does not fit them says why in
    :data:`INLINE_NOT_RUN`. Every failure of every page in one message, by page and line."""
    write_inputs(tmp_path)
    problems, helps = [], {}
    found = [span for page in PAGES for span in spans(page)]
    for span in found:
        if FOCUS.search(span.text) and not INLINE.match(span.text) and (span.page, span.text) not in INLINE_NOT_RUN:
            problems.append(f"{span.where}: `{span.text}`\n    holds a focus_tune command but does not start "
                            "with it: write it as the command, or list it in INLINE_NOT_RUN with why")
    shown = {(span.page, span.text) for span in found}
    problems += [f"{page}: `{text}`\n    listed in INLINE_NOT_RUN but no longer on its page: remove the entry"
                 for page, text in INLINE_NOT_RUN if (page, text) not in shown]
    for page in PAGES:
        for _, c in inline_commands(page):
            try:
                argv = inline_argv(c)
            except ValueError as e:
                problems.append(f"{c}\n    {e}")
                continue
            if argv is None:  # the CLI's name: its --help works
                try:
                    code, _, err = invoke(c.module, [*c.argv, "--help"])
                except AssertionError as e:  # a module main_of does not know
                    code, err = None, str(e)
                if code != 0:
                    problems.append(f"{c}\n    names a command whose --help fails ({code}): {err.strip()[-400:]}")
                continue
            argv = with_data(localized(argv, tmp_path, some_dataset), some_dataset)
            if (why := parse_error(c, argv)) is not None:
                problems.append(f"{c}\n    {why}")
            elif short := abbreviated(c, argv, helps):
                problems.append(f"{c}\n    not a flag by its full name (argparse took a prefix): {', '.join(short)}")
    assert not problems, "inline commands of the docs that their CLI refuses:\n" + "\n".join(problems)


def test_every_inline_script_exists_with_its_flags():
    """An inline ``python benchmarks/X.py`` or ``python scripts/X.py`` names a file of the
    repository, and each ``--flag`` written after it is spelled, quoted, in that file."""
    problems = []
    for page in PAGES:
        for span in spans(page):
            mentions = list(INLINE_SCRIPT.finditer(span.text))
            for m, after in zip(mentions, [*mentions[1:], None]):
                path = ROOT / m.group(1)
                if not path.is_file():
                    problems.append(f"{span.where}: `{span.text}`\n    no file {m.group(1)}")
                    continue
                words = span.text[m.end():after.start() if after else None]
                source = path.read_text()
                missing = [flag for flag in dict.fromkeys(re.findall(r"(?<![\w=-])--[a-z][\w-]*", words))
                           if not re.search(rf"['\"]{re.escape(flag)}['\"]", source)]
                if missing:
                    problems.append(f"{span.where}: `{span.text}`\n    not a flag of {m.group(1)}: "
                                    + ", ".join(missing))
    assert not problems, "inline script commands of the docs that do not work as written:\n" + "\n".join(problems)


def test_every_shell_line_runs_here_or_says_why_not():
    """A line of a shell block is a focus_tune command (checked above) or starts with a program
    of :data:`NOT_RUN`, whose reason says what covers it."""
    unknown = []
    for page in PAGES:
        for block in blocks(page):
            if block.lang not in SHELL:
                continue
            for n, line in block.lines:
                try:
                    words = shlex.split(line, comments=True)
                except ValueError:  # an unbalanced quote: the words as they are
                    words = line.split()
                while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
                    words = words[1:]  # VAR=value before the program
                if not words or FOCUS.match(" ".join(words)):
                    continue
                head = " ".join(words[:3])
                if SCRIPTS.match(head):
                    continue  # runs above
                if not any(head == key or head.startswith(key if key.endswith("/") else key + " ") for key in NOT_RUN):
                    unknown.append(f"{block.page}:{n}: {line}")
    assert not unknown, "shell lines neither run here nor listed in NOT_RUN with a reason:\n" + "\n".join(unknown)


def _section_commands(page: str, section: str) -> list[list[str]]:
    """The lines of the shell blocks under a heading that hold a focus_tune command, as words
    (variables set before the program left out)."""
    out = []
    for block in blocks(ROOT / page):
        if block.section == section and block.lang in SHELL:
            for _, line in block.lines:
                if FOCUS.search(line):
                    words = shlex.split(line, comments=True)
                    while re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
                        words = words[1:]
                    out.append(words)
    return out


def test_the_cluster_examples_are_one_command_at_the_recommended_fraction():
    cluster = (ROOT / "docs" / "CLUSTER.md").read_text()
    recommended = re.search(r"\*\*`--gpus-per-trial ([\d.]+)`\*\* is the choice", cluster).group(1)
    assert recommended == "0.5"  # docs/BENCHMARKS.md: 24.8 billed GPU-hours against 37.8 at 0.25
    readme = _section_commands("README.md", "A cluster")
    run = _section_commands("docs/CLUSTER.md", "Run")
    guide = _section_commands("docs/GUIDE.md", "Cluster")
    assert len(readme) == len(run) == len(guide) == 1, (readme, run, guide)
    assert readme == run == guide
    job = readme[0]
    assert job[:3] == ["ray", "job", "submit"] and "--data-root" in job and "--storage" in job
    # Every --gpus-per-trial of an example: the cluster sections, CLUSTER.md's blocks, cluster.yaml's comments.
    examples = [" ".join(words) for words in readme + guide]
    examples += [line for b in blocks(ROOT / "docs" / "CLUSTER.md") for _, line in b.lines]
    examples += [line for line in (ROOT / "cluster.yaml").read_text().splitlines() if line.strip().startswith("#")]
    fractions = {m for text in examples for m in re.findall(r"--gpus-per-trial[ =]([\d.]+)", text)}
    assert fractions == {recommended}, fractions
