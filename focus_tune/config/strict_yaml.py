"""Strict YAML for search-space files and ``--set`` values: YAML 1.2's core schema (``off``,
``yes`` and ``no`` are strings, only true/false are booleans, ``1e-5`` is a number), numbers
only in plain decimal (``0x10``, ``0o17``, ``1_0`` refused, not read as 16, 15 and 10), no
duplicate keys, and limits on size, nesting and alias expansion, so a hostile or broken file is a one-line
:class:`~focus_tune.errors.ConfigError` (with file, line and column), never a traceback,
a RecursionError or gigabytes of memory.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError
from ..quote import short

MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 32  # a search space nests 4 levels (profiles.quick.grid.lambdas)
MAX_NODES = 100_000  # nodes composed, aliases counted each time they are used


def read_yaml(path: Path, file: str) -> Any:
    """The parsed content of the YAML file at ``path``; errors name it as ``file``."""
    try:
        if path.is_file() and path.stat().st_size > MAX_FILE_BYTES:
            raise ConfigError(f"{file}: {path.stat().st_size} bytes; a search space is at most "
                              f"{MAX_FILE_BYTES} bytes")
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{file}: cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError:
        raise ConfigError(f"{file}: not a UTF-8 text file; expected a search-space YAML") from None
    return parse_yaml(text, file)


def parse_yaml(text: str, file: str, marks: bool = True) -> Any:
    """YAML text parsed by the strict loader; errors name ``file`` and, where known (and
    ``marks``), line:column."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except NotDecimal as e:
        mark = e.problem_mark
        raise ConfigError(f"{file}:{mark.line + 1}:{mark.column + 1}: {e.problem}" if marks and mark
                          else f"{file}: {e.problem}") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else file
        raise ConfigError(f"{where}: malformed YAML: {short(e.problem or e.context, 200)[1:-1]}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{file}: malformed YAML: {short(str(e), 200)[1:-1]}") from e
    except RecursionError:
        raise ConfigError(f"{file}: malformed YAML: nested too deeply") from None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2's core schema instead of PyYAML's YAML 1.1 one, rejecting
    duplicate keys and the numbers that YAML 1.1 and 1.2 read differently.

    PyYAML follows YAML 1.1, where ``off``/``on``/``yes``/``no`` are booleans, ``1e-5`` (no
    dot) a string, ``010`` octal 8, ``1_0`` ten and ``2024-01-01`` a date; YAML 1.2 and
    every other tool read ``off`` as a string and ``1e-5`` as a number, and so do we. A
    hexadecimal, octal, binary or underscored number is refused (:class:`NotDecimal`):
    one tool would read it as a number, another as a string.
    """

    yaml_implicit_resolvers: dict = {}  # filled below with the core schema's only


class NotDecimal(yaml.constructor.ConstructorError):
    """A plain scalar that is a number in some YAML and a string in another (``0x10``)."""


def _compose_node(self, parent, index):
    """SafeLoader.compose_node with a nesting limit and a budget of nodes that counts every
    use of an alias: a 20 000-deep nesting or an alias bomb is a clear error, not a
    RecursionError or gigabytes of memory."""
    self._depth = getattr(self, "_depth", 0) + 1
    try:
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
        node = yaml.composer.Composer.compose_node(self, parent, index)
        self._nodes = getattr(self, "_nodes", 0) + _weight(node)
        if self._nodes > MAX_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"expands to more than {MAX_NODES} values (YAML aliases?)", node.start_mark)
        return node
    finally:
        self._depth -= 1


def _weight(node: yaml.Node) -> int:
    """How many values a node stands for once its aliases are expanded (memoised on the node)."""
    cached = getattr(node, "_weight", None)
    if cached is None:
        if isinstance(node, yaml.SequenceNode):
            cached = 1 + sum(_weight(n) for n in node.value)
        elif isinstance(node, yaml.MappingNode):
            cached = 1 + sum(_weight(k) + _weight(v) for k, v in node.value)
        else:
            cached = 1
        node._weight = cached
    return cached


_StrictLoader.compose_node = _compose_node


# YAML 1.2.2, 10.3.2 (the core schema), integers in decimal only.
_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT = re.compile(r"^[-+]?[0-9]+$")
_FLOAT = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
# Numbers in another notation: YAML 1.2 (0x, 0o) or 1.1 (0b, underscores, 1:30) reads them as numbers.
_NOT_DECIMAL = re.compile(r"^[-+]?(?:0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+"
                          r"|[0-9][0-9_]*_[0-9_]*(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?"
                          r"|[0-9_]*\.[0-9_]*_[0-9_]*(?:[eE][-+]?[0-9]+)?"
                          r"|[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?)$")
_NOT_DECIMAL_TAG = "tag:focus-tune,2025:not-decimal"

_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:null", _NULL, ["~", "n", "N", ""])
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL, list("tTfF"))
_StrictLoader.add_implicit_resolver(_NOT_DECIMAL_TAG, _NOT_DECIMAL, list("-+0123456789"))
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def _construct_int(loader: _StrictLoader, node: yaml.ScalarNode) -> int:
    return int(loader.construct_scalar(node))  # decimal: 010 is ten, as in YAML 1.2


def _construct_float(loader: _StrictLoader, node: yaml.ScalarNode) -> float:
    text = loader.construct_scalar(node).lower()
    if text.endswith(("inf", "nan")):
        return float(text.replace(".", ""))
    return float(text)


def _refuse_not_decimal(loader: _StrictLoader, node: yaml.ScalarNode):
    text = node.value
    raise NotDecimal(None, None, f"{text[:40]!r}: a number in another notation; write numbers in plain decimal "
                                 "(such as 10, 0.5 or 1e-5), or quote a string", node.start_mark)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)
_StrictLoader.add_constructor(_NOT_DECIMAL_TAG, _refuse_not_decimal)


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False):
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r} (first at line {seen[key].start_mark.line + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
