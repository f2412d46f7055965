"""Strict YAML for search-space files: no duplicate keys, ``1e-5`` read as a number, and
limits on size, nesting and alias expansion, so a hostile or broken file is a one-line
:class:`~focus_tune.config.ConfigError` (with file, line and column), never a traceback,
a RecursionError or gigabytes of memory.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from .atomic import short
from .config_checks import ConfigError

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


def parse_yaml(text: str, file: str) -> Any:
    """YAML text parsed by the strict loader; errors name ``file`` and, where known, line:column."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else file
        raise ConfigError(f"{where}: malformed YAML: {short(e.problem or e.context, 200)[1:-1]}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{file}: malformed YAML: {short(str(e), 200)[1:-1]}") from e
    except RecursionError:
        raise ConfigError(f"{file}: malformed YAML: nested too deeply") from None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys and reads ``1e-5`` as a float.

    PyYAML follows YAML 1.1, where ``1e-5`` (no dot) is a *string*; YAML 1.2 and every
    other tool read it as a number, and so do we.
    """


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


_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


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
