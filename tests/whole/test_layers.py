"""The house rules, read from the code's imports (issue 49): each layer is a folder of `amqpcap/`,
and a module imports only from its own layer or the ones below it.

    model < io < analysis < derive < analyzers < engine < summary < report < cli

- the report is handed results and a prepared summary: it imports neither `derive` nor
  `analyzers`;
- an analyzer never imports another analyzer;
- no import circle between files.

Every import counts, also one inside a function (a deferred import is still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import rust_modules  # (tools/, on the path: tests/conftest.py)

PACKAGE = Path(__file__).resolve().parents[2] / "amqpcap"
LAYERS = ("model", "io", "analysis", "derive", "analyzers", "engine", "summary", "report", "cli")
#: modules at the package's top: the compiled core sits with the I/O that calls it; the package's
#: own `__init__` (the public names, imported lazily) and `__main__` stand above every layer
TOP_LEVEL = {"_core": "io", "__init__": "cli", "__main__": "cli"}
#: what the report must not import, beyond the rule of layers: it is handed results
NOT_FOR_THE_REPORT = ("derive", "analyzers")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """The amqpcap modules `path` imports (absolute names; `from . import x` gives `pkg.x` when x is
    a module, else `pkg`)."""
    tree = ast.parse(path.read_text())
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(base + (node.module.split(".") if node.module else []))
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                found.add(candidate if is_module(candidate) else target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m == "amqpcap" or m.startswith("amqpcap.")}


def is_module(dotted: str) -> bool:
    p = PACKAGE.parent.joinpath(*dotted.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file() or dotted == "amqpcap._core"


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) == 1:
        return None  # the package itself (amqpcap/__init__.py)
    if parts[1] in LAYERS:
        return parts[1]
    return TOP_LEVEL.get(parts[1])


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def broken_rules(g: dict[str, set[str]]) -> list[str]:
    broken = []
    for module, imported in g.items():
        mine = layer_of(module)
        if mine is None and module != "amqpcap":
            broken.append(f"{module} is in no layer: move it into one of {', '.join(LAYERS)}")
            continue
        for other in sorted(imported):
            theirs = layer_of(other)
            if mine is None or theirs is None:
                continue
            if LAYERS.index(theirs) > LAYERS.index(mine):
                broken.append(f"{module} ({mine}) imports {other} ({theirs}), a layer above it")
            if mine == "report" and theirs in NOT_FOR_THE_REPORT:
                broken.append(f"{module} imports {other}: the report is handed results, it does not derive")
            if mine == theirs == "analyzers" and analyzer_of(module) != analyzer_of(other) \
                    and analyzer_of(other) is not None:
                broken.append(f"{module} imports {other}: an analyzer never imports another")
    return broken


def analyzer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "analyzers" else None


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """Groups of more than one file importing each other, each sorted, in the order of their first
    file: the circle finder `tools/rust_modules.py` uses for the core's files."""
    return sorted(rust_modules.circles({v: {w for w in ws if w in g} for v, ws in g.items()}))


def test_no_layer_imports_one_above_it():
    """20 imports back up on 9e6bc68 (issue 49), none now."""
    assert broken_rules(graph()) == []


def test_no_import_circle_between_files():
    """7 circles on 9e6bc68 (issue 49), none now."""
    assert circles(graph()) == []


@pytest.mark.parametrize("module, imports, rule", [
    ("amqpcap.model.wording", "amqpcap.io.load", "a layer above it"),
    ("amqpcap.report.html", "amqpcap.derive.names", "the report is handed results"),
    ("amqpcap.analyzers.sizes.step", "amqpcap.analyzers.latency.numbers", "an analyzer never imports another"),
])
def test_the_rules_catch_a_broken_import(module, imports, rule):
    """Each rule fails when it is broken: an import added to today's graph is reported."""
    g = graph()
    g[module] = g[module] | {imports}
    assert any(rule in line for line in broken_rules(g))


def test_a_circle_is_caught():
    g = graph()
    g["amqpcap.model.errors"] = g["amqpcap.model.errors"] | {"amqpcap.model.wording"}
    g["amqpcap.model.wording"] = g["amqpcap.model.wording"] | {"amqpcap.model.errors"}
    assert ["amqpcap.model.errors", "amqpcap.model.wording"] in circles(g)
