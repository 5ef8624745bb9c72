#!/usr/bin/env python3
"""The Rust core's module graph: which source file of rust/src uses which, and its circles.

Usage: python tools/rust_modules.py            # print each file's uses, then the circles
       python tools/rust_modules.py --check    # exit 1 if two files use each other, directly or not

A file uses another when its code names a path into it: `crate::a::b::item` or `super::b::item`
(in `use` lines or inline), resolved to the longest prefix that is a file (`src/a/b.rs` or
`src/a/b/mod.rs`). Comments are left out, and so are a file's unit tests (its trailing
`#[cfg(test)] mod tests`), which may reach anywhere; `mod x;` declarations are structure, not
uses. tests/core/test_core_layout.py runs the check.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "rust" / "src"

PATH = re.compile(r"\b(crate|super)((?:::[a-z_][a-z0-9_]*)+)")
GROUP = re.compile(r"\b(crate|super)((?:::[a-z_][a-z0-9_]*)*)::\{([^{}]*)\}")


def module_of(file: Path) -> list[str]:
    """The module path of a source file: src/proto/amqp091/decoder.rs is proto::amqp091::decoder."""
    parts = list(file.relative_to(SRC).with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return parts


def file_of(module: list[str]) -> Path | None:
    if not module:
        return SRC / "lib.rs"
    for candidate in (SRC.joinpath(*module).with_suffix(".rs"), SRC.joinpath(*module, "mod.rs")):
        if candidate.exists():
            return candidate
    return None


def code(text: str) -> str:
    """The file's code without comments and without its trailing unit-test module."""
    text = re.sub(r"#\[cfg\([^\]]*\btest\b[^\]]*\)\]\s*mod tests\s*\{.*", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def resolve(file: Path, root: str, rest: list[str]) -> Path | None:
    """The file a path names: the longest prefix of it that is a file."""
    base = [] if root == "crate" else module_of(file)[:-1]
    for n in range(len(rest), 0, -1):
        found = file_of(base + rest[:n])
        if found is not None:
            return found
    return None


def uses(file: Path) -> set[Path]:
    text = code(file.read_text())
    paths: list[tuple[str, list[str]]] = []
    for root, prefix, group in GROUP.findall(text):
        for item in group.split(","):
            item = item.strip().split(" as ")[0]
            names = [p for p in item.split("::") if p and p != "self" and p[0].islower()]
            paths.append((root, [p for p in prefix.split("::") if p] + names))
    for root, rest in PATH.findall(text):
        paths.append((root, [p for p in rest.split("::") if p]))
    found = {resolve(file, root, rest) for root, rest in paths}
    return {f for f in found if f is not None and f != file and f.name != "lib.rs"}


def graph() -> dict[Path, set[Path]]:
    return {f: uses(f) for f in sorted(SRC.rglob("*.rs"))}


def circles(g: dict[Path, set[Path]]) -> list[list[Path]]:
    """The strongly connected groups of more than one file (Tarjan)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    on: set[Path] = set()
    out: list[list[Path]] = []

    def visit(v: Path) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in g:
        if v not in index:
            visit(v)
    return out


def name(f: Path) -> str:
    return str(f.relative_to(SRC))


def main(argv: list[str]) -> int:
    g = graph()
    found = circles(g)
    if "--check" not in argv:
        for f, used in g.items():
            print(f"{name(f)}: {', '.join(name(u) for u in sorted(used)) or '-'}")
        print()
    for group in found:
        print("circle: " + " <-> ".join(name(f) for f in group))
    if not found:
        print(f"no circle between the {len(g)} files of rust/src")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
