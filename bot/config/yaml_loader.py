"""Reading config.yaml's YAML, refusing documents that only an attack would write.

PyYAML's safe loader still accepts three things a config file never needs:
- aliases that multiply ("billion laughs": nine anchors of ten aliases each are a billion
  values once expanded, which interpolation and validation would walk for ever);
- nesting thousands deep (the composer recurses per level: a RecursionError traceback);
- a key given twice in one mapping (the later silently wins: a typo'd override hides).

Each is refused with a `ConfigYamlRefused` naming the line. Anchors and aliases within
the limits, and `<<` merge keys overriding what they merge, keep working.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, SequenceNode

MAX_DEPTH = 32  # config.yaml nests 4 deep; aliases count at the depth they expand to
MAX_VALUES = 100_000  # every value once aliases are expanded (allowed_ids may be long)
_MERGE = "tag:yaml.org,2002:merge"


class ConfigYamlRefused(yaml.YAMLError):
    """A YAML document refused for its shape; the message names what and where."""


def _line(node: Node) -> int:
    return node.start_mark.line + 1


class _ConfigLoader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._open = 0  # nodes being composed (the composer's recursion depth)
        # id(node) -> (values, depth) once expanded. Every node is measured as it is
        # composed, so an anchor without one is still open: an alias to it is recursive.
        self._sizes: dict[int, tuple[int, int]] = {}

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        if self._open >= MAX_DEPTH:
            line = self.peek_event().start_mark.line + 1
            raise ConfigYamlRefused(f"nested deeper than {MAX_DEPTH} levels (at line {line})")
        if self.check_event(AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None and id(target) not in self._sizes:
                raise ConfigYamlRefused(
                    f"an alias refers to its own anchor (line {event.start_mark.line + 1})"
                )
        self._open += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._open -= 1
        if id(node) not in self._sizes:
            self._sizes[id(node)] = self._measure(node)
        return node

    def _measure(self, node: Node) -> tuple[int, int]:
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            return 1, 1
        values, depth = 1, 1
        for child in children:
            size = self._sizes[id(child)]
            values += size[0]
            depth = max(depth, size[1] + 1)
        if values > MAX_VALUES:
            raise ConfigYamlRefused(
                f"aliases expand to more than {MAX_VALUES} values (line {_line(node)})"
            )
        if depth > MAX_DEPTH:
            raise ConfigYamlRefused(
                f"aliases nest deeper than {MAX_DEPTH} levels (line {_line(node)})"
            )
        return values, depth

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        # Checked before merge keys are flattened: what `<<` merges may be overridden.
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                seen = first.get(key)
            except TypeError:
                continue  # unhashable: the constructor says so itself
            if seen is not None:
                shown = repr(key) if len(repr(key)) <= 40 else repr(key)[:37] + "..."
                raise ConfigYamlRefused(
                    f"duplicate key {shown} at line {_line(key_node)} (first given at line "
                    f"{seen}); give each key once"
                )
            first[key] = _line(key_node)
        return super().construct_mapping(node, deep=deep)


def parse_config_yaml(text: str) -> Any:
    """The document's value. Raises ConfigYamlRefused or another yaml.YAMLError."""
    loader = _ConfigLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
