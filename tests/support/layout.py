"""The code's shape, measured from its source: who imports whom (top-level, in functions and
under ``TYPE_CHECKING`` alike), module sizes, and function sizes. ``tests/test_layout.py``
holds the rules; ``python -m tests.support.layout`` prints the figures.

A function's size is its body's: from its first statement after the docstring to its last
line, so a typer command's parameter list (its options) does not count; ``main`` lists the
functions that this exempts. Import counts are statements (one per module and line).
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "pipelines", "models")
# app's parts, top layer first: a part may import the parts below it, never one above
# (``run`` and ``service`` are peers, and import neither each other nor anything above them)
APP_LAYERS: tuple[tuple[str, ...], ...] = (
    ("cli",), ("bench",), ("recipes",), ("run", "service"), ("outputs",),
    ("hosts", "errors", "malloc", "__init__"),
)


@dataclass(frozen=True, slots=True)
class Import:
    importer: str  # dotted module that imports
    imported: str  # dotted module (or package) imported
    kind: str  # "top", "function" or "type-checking"
    line: int


def modules(package: str = "") -> Iterator[tuple[str, Path]]:
    """(dotted name, path) of every module of the three packages (or of ``package``)."""
    for top in PACKAGES:
        for path in sorted((REPO / top).rglob("*.py")):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            name = name.removesuffix(".__init__")
            if name == package or name.startswith(package):
                yield name, path


def imports(name: str, path: Path) -> list[Import]:
    """Every import of vidpipe's own modules in ``path``, with where it is made."""
    tree = ast.parse(path.read_text())
    found: list[Import] = []

    def visit(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            here = kind
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                here = "type-checking"
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                here = "function" if kind == "top" else kind
            if isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                targets = [child.module] + [f"{child.module}.{a.name}" for a in child.names]
                for target in targets:
                    if target.split(".")[0] in PACKAGES:
                        found.append(Import(name, target, here, child.lineno))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] in PACKAGES:
                        found.append(Import(name, alias.name, here, child.lineno))
            visit(child, here)

    visit(tree, "top")
    return found


def app_part(module: str) -> str | None:
    """The part of ``app`` a module belongs to (``cli``, ``service``, ``hosts`` ...)."""
    parts = module.split(".")
    if parts[0] != "app":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def app_graph() -> dict[tuple[str, str], list[Import]]:
    """Imports between different parts of ``app``: (importer's part, imported's part) ->
    the imports."""
    known = {name for name, _ in modules("app")}
    edges: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for name, path in modules("app"):
        for found in imports(name, path):
            target = found.imported
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]  # ``from app.x import name``: the module
            a, b = app_part(name), app_part(target)
            if b is not None and a != b:
                edges[(a or "", b)].append(found)
    return edges


def layer_of(part: str) -> int:
    return next(i for i, layer in enumerate(APP_LAYERS) if part in layer)


def cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """Every elementary cycle's nodes, found by a depth-first walk from each node."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    found: list[list[str]] = []

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt == start:
                found.append(path[:])
            elif nxt not in path and nxt > start:
                walk(start, nxt, [*path, nxt])

    for node in sorted(graph):
        walk(node, node, [node])
    return found


def package_imports() -> dict[tuple[str, str], int]:
    """Import statements between the three packages: (importer's, imported's) -> count."""
    counts: dict[tuple[str, str], set[tuple[str, int]]] = defaultdict(set)
    for name, path in modules():
        for found in imports(name, path):
            a, b = name.split(".")[0], found.imported.split(".")[0]
            if a != b:
                counts[(a, b)].add((name, found.line))
    return {edge: len(lines) for edge, lines in counts.items()}


def statements(found: list[Import]) -> int:
    """How many import statements ``found`` comes from (one per module and line)."""
    return len({(f.importer, f.line) for f in found})


@dataclass(frozen=True, slots=True)
class FunctionSize:
    where: str  # path:line name
    body: int  # lines from the first statement after the docstring to the end
    whole: int  # lines from ``def`` to the end: signature and docstring included


def function_sizes() -> list[FunctionSize]:
    sizes = []
    for _, path in modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                if body and isinstance(body[0], ast.Expr) and \
                        isinstance(getattr(body[0], "value", None), ast.Constant) and \
                        isinstance(body[0].value.value, str) and len(body) > 1:
                    body = body[1:]
                first = body[0].lineno
                assert node.end_lineno is not None
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                sizes.append(FunctionSize(f"{path.relative_to(REPO)}:{node.lineno} {node.name}",
                                          node.end_lineno - first + 1,
                                          node.end_lineno - start + 1))
    return sizes


def module_sizes() -> dict[str, int]:
    return {str(path.relative_to(REPO)): path.read_text().count("\n")
            for _, path in modules()}


def main() -> None:
    edges = app_graph()
    print("app's parts and their imports (top-level / in functions / type-checking):")
    for (a, b), found in sorted(edges.items()):
        kinds = [statements([f for f in found if f.kind == k])
                 for k in ("top", "function", "type-checking")]
        up = " UP" if layer_of(b) < layer_of(a) else ""
        print(f"  {a:>8} -> {b:<8} {kinds[0]:3d} {kinds[1]:3d} {kinds[2]:3d}{up}")
    print("cycles:", cycles(set(edges)) or "none")
    print("import statements between packages:", dict(sorted(package_imports().items())))
    sizes = module_sizes()
    print("modules:", len(sizes), "over 300 lines:",
          sorted((n, p) for p, n in sizes.items() if n > 300) or "none")
    bodies = function_sizes()
    print("functions:", len(bodies), "bodies over 40 lines:",
          sorted(((f.body, f.where) for f in bodies if f.body > 40), reverse=True) or "none")
    print("over 40 lines only with their signature and docstring (exempt):")
    for f in sorted(bodies, key=lambda f: f.where):
        if f.whole > 40 >= f.body:
            print(f"  {f.where}: {f.whole} lines, body {f.body}")


if __name__ == "__main__":
    sys.exit(main())
