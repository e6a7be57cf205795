"""strom.config is the bottom layer: it imports only the standard library and itself.

Anything may read a configuration (the broker, the CLI, tools, Spark workers) without pulling in
the broker, the cluster, the coordinator or storage, and no import cycle can form through config.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import strom.config

PACKAGE = "strom.config"


def imported_modules(source: str, module: str, is_package: bool) -> set[str]:
    """Absolute names of every module a source file imports (relative imports resolved against ``module``),
    including imports under ``if TYPE_CHECKING:`` and inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                base = parts if is_package else parts[:-1]
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.add(name)
            # `from strom import broker` imports a module named like the alias
            found.update(f"{name}.{alias.name}" for alias in node.names if name == "strom")
    return found


def forbidden(names: set[str]) -> set[str]:
    """Imports outside the standard library and strom.config itself."""
    out = set()
    for name in names:
        top = name.split(".")[0]
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            continue
        if top == "strom" and name == "strom":
            continue  # `from strom import config` is checked through its alias above
        if top in sys.stdlib_module_names:
            continue
        out.add(name)
    return out


def package_modules() -> list[tuple[str, Path]]:
    root = Path(strom.config.__file__)
    if root.name != "__init__.py":  # a single module
        return [(PACKAGE, root)]
    out = []
    for path in sorted(root.parent.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        out.append((".".join([PACKAGE, *parts]), path))
    return out


def test_config_package_imports_only_the_standard_library_and_itself() -> None:
    modules = package_modules()
    assert len(modules) > 1, "strom.config is a package of one module per concept"
    bad = {}
    for module, path in modules:
        names = imported_modules(path.read_text(encoding="utf-8"), module, path.name == "__init__.py")
        if forbidden(names):
            bad[str(path.name)] = sorted(forbidden(names))
    assert bad == {}, f"strom.config must not import upward: {bad}"


@pytest.mark.parametrize("source", [
    "from strom.broker.server import KafkaServer",
    "import strom.storage.log",
    "from strom import coordinator",
    "from ..broker import listeners",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from strom.controller.controller import KafkaController",
    "def f():\n    import kazoo.client",
])
def test_the_check_catches_an_upward_import(source: str) -> None:
    assert forbidden(imported_modules(source, "strom.config.values", False))


@pytest.mark.parametrize("source", [
    "import re",
    "from collections.abc import Mapping",
    "from strom.config.values import ConfigError",
    "from .values import ConfigError",
    "from . import values",
])
def test_the_check_allows_the_standard_library_and_the_package(source: str) -> None:
    assert not forbidden(imported_modules(source, "strom.config.values", False))
