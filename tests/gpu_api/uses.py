"""Every use of a GPU library's API in vidpipe's code, collected from the code itself.

A module of vidpipe uses a library through a name bound to it: ``trt = import_tensorrt()``,
``nvc = import_gpu_library("PyNvVideoCodec", ...)``, ``self._cv = import_gpu_library(
"cvcuda", ...)``, ``import tensorrt as trt``. From there each expression is followed: an
attribute of the library (``trt.BuilderFlag.FP16``), a call with its keywords and number of
positional arguments (``nvc.CreateDecoder(**options)`` with the dict's literal keys), and the
objects calls return, typed by the library's own signatures (``builder =
trt.Builder(logger)``, then ``builder.create_network(...)`` returns an
``INetworkDefinition``). Names are typed in their function first; a name bound there to
what cannot be typed (an object taken out of a container, ``context =
slot.state["context"]``) takes the type the same name has elsewhere in the module, and an
attribute of ``self`` has one type across its class; a function's parameters are never
guessed. What cannot be typed is not a use found: the count of uses says how much is.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# how vidpipe's code obtains each library: a call to one of these, or an import
IMPORTERS = {"import_tensorrt": "tensorrt"}
LIBRARY_CALL = "import_gpu_library"  # import_gpu_library("cvcuda", ...)
LIBRARIES = ("tensorrt", "PyNvVideoCodec", "pynvml", "cvcuda")


@dataclass(frozen=True, slots=True)
class Use:
    """``library``'s ``path`` (dotted from the module: ``Builder.create_network``) at
    ``where``; for a call, its keywords and positional count (None: not a call)."""

    library: str
    path: str
    where: str
    keywords: tuple[str, ...] | None = None
    positional: int | None = None
    star: bool = False  # called with *args: positional count unknown
    optional: bool = False  # getattr(..., default): the code copes with its absence


@dataclass
class Collected:
    uses: list[Use] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


Type = tuple[str, str]  # (library, "" for the module itself, else a top-level class name)


def _library_of(call: ast.Call) -> str | None:
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(
        func, ast.Attribute) else None
    if name in IMPORTERS:
        return IMPORTERS[name]
    if name == LIBRARY_CALL and call.args and isinstance(call.args[0], ast.Constant):
        value = call.args[0].value
        return value if value in LIBRARIES else None
    if name == "import_module" and call.args and isinstance(call.args[0], ast.Constant):
        return call.args[0].value if call.args[0].value in LIBRARIES else None
    return None


def _getattr(call: ast.Call) -> tuple[ast.expr, str] | None:
    """``getattr(x, "name"[, default])``'s object and name."""
    if isinstance(call.func, ast.Name) and call.func.id == "getattr" and len(call.args) >= 2 \
            and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str):
        return call.args[0], call.args[1].value
    return None


def _key(node: ast.expr) -> str | None:
    """``x`` or ``self.x`` as a binding name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
            and node.value.id == "self":
        return f"self.{node.attr}"
    return None


class _Module:
    def __init__(self, path: Path, relative: str, surface: Mapping[str, Any]) -> None:
        self.tree = ast.parse(path.read_text())
        self.relative = relative
        self.surface = surface
        self.types: dict[str, Type] = {}  # module-wide (and self.x across the class)
        self.local: dict[tuple[ast.AST, str], Type] = {}  # (function, name) -> type
        self.function: dict[ast.AST, ast.AST | None] = {}  # node -> its function
        self.params: dict[ast.AST, set[str]] = {}
        self.uses: list[Use] = []
        self.dicts: dict[str, tuple[str, ...]] = {}  # name -> literal keys of a dict

    # -- types ----------------------------------------------------------------------------
    def _scopes(self, node: ast.AST, function: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = function
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inner = child
                every = [*child.args.posonlyargs, *child.args.args, *child.args.kwonlyargs,
                         *([child.args.vararg] if child.args.vararg else []),
                         *([child.args.kwarg] if child.args.kwarg else [])]
                self.params[child] = {a.arg for a in every}
            self.function[child] = inner
            self._scopes(child, inner)

    def bind(self) -> None:
        """Bind names to libraries and library objects until nothing new is learnt."""
        self._scopes(self.tree, None)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in LIBRARIES:
                        self.types[alias.asname or alias.name] = (alias.name, "")
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
                keys = tuple(k.value for k in node.value.keys
                             if isinstance(k, ast.Constant) and isinstance(k.value, str))
                for target in node.targets:
                    if (name := _key(target)) is not None:
                        self.dicts[name] = keys
        changed = True
        while changed:
            changed = False
            for node in ast.walk(self.tree):
                value = getattr(node, "value", None)
                targets = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, ast.AnnAssign) else []
                if value is None or not targets:
                    continue
                function = self.function.get(node)
                pairs = [(t, value) for t in targets]
                if len(targets) == 1 and isinstance(targets[0], ast.Tuple) \
                        and isinstance(value, ast.Tuple) \
                        and len(targets[0].elts) == len(value.elts):
                    pairs = list(zip(targets[0].elts, value.elts, strict=True))
                for target, part in pairs:
                    typed = self.type_of(part, function)
                    name = _key(target)
                    if typed is None or name is None:
                        continue
                    if function is not None and not name.startswith("self.") \
                            and (function, name) not in self.local:
                        self.local[(function, name)] = typed
                        changed = True
                    if name not in self.types:
                        self.types[name] = typed
                        changed = True

    def type_of(self, node: ast.expr, function: ast.AST | None = None) -> Type | None:
        if isinstance(node, ast.BoolOp):  # ``nvml or import_gpu_library(...)``
            return next((t for v in node.values
                         if (t := self.type_of(v, function)) is not None), None)
        if isinstance(node, ast.Call):
            library = _library_of(node)
            if library is not None:
                return (library, "")
            if (named := _getattr(node)) is not None:
                owner = self.type_of(named[0], function)
                entry = None if owner is None else self.entry(owner, named[1])
                if owner is not None and owner[1] == "" and entry is not None \
                        and entry.get("kind") in ("class", "enum"):
                    return (owner[0], named[1])
                return None
            owner = self.type_of(node.func.value, function) \
                if isinstance(node.func, ast.Attribute) else None
            if owner is None:
                return None
            entry = self.entry(owner, node.func.attr)  # type: ignore[union-attr]
            if entry is None:
                return None
            if entry.get("kind") in ("class", "enum"):
                return (owner[0], node.func.attr)  # type: ignore[union-attr]
            return self.returned(owner[0], entry.get("returns"))
        if (name := _key(node)) is not None:
            if name.startswith("self.") or function is None:
                return self.types.get(name)
            if (function, name) in self.local:
                return self.local[(function, name)]
            if name in self.params.get(function, ()):
                return None  # a parameter: whatever the caller passes
            return self.types.get(name)
        if isinstance(node, ast.Attribute):
            owner = self.type_of(node.value, function)
            if owner is not None and owner[1] == "":
                entry = self.entry(owner, node.attr)
                if entry is not None and entry.get("kind") in ("class", "enum"):
                    return (owner[0], node.attr)  # the class itself: its members follow
        return None

    def entry(self, owner: Type, name: str) -> dict[str, Any] | None:
        names = self.surface.get(owner[0], {}).get("names", {})
        if owner[1] == "":
            return names.get(name)
        return names.get(owner[1], {}).get("members", {}).get(name)

    def returned(self, library: str, returns: str | None) -> Type | None:
        if not returns:
            return None
        name = returns.strip().split("|")[0].strip().split(".")[-1].strip("'\" ")
        names = self.surface.get(library, {}).get("names", {})
        return (library, name) if names.get(name, {}).get("kind") in ("class", "enum") \
            else None

    # -- uses -----------------------------------------------------------------------------
    def collect(self) -> None:
        parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                parents[child] = node
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and (named := _getattr(node)) is not None:
                owner = self.type_of(named[0], self.function.get(node))
                if owner is not None:
                    path = named[1] if owner[1] == "" else f"{owner[1]}.{named[1]}"
                    self.uses.append(Use(owner[0], path, f"{self.relative}:{node.lineno}",
                                         optional=len(node.args) > 2))
                continue
            if not isinstance(node, ast.Attribute):
                continue
            owner = self.type_of(node.value, self.function.get(node))
            if owner is None:
                continue
            path = node.attr if owner[1] == "" else f"{owner[1]}.{node.attr}"
            where = f"{self.relative}:{node.lineno}"
            parent = parents.get(node)
            if isinstance(parent, ast.Call) and parent.func is node:
                keywords = [k.arg for k in parent.keywords if k.arg is not None]
                for k in parent.keywords:  # f(**options): the dict's literal keys
                    if k.arg is None and (name := _key(k.value)) in self.dicts:
                        keywords += list(self.dicts[name])
                star = any(isinstance(a, ast.Starred) for a in parent.args)
                self.uses.append(Use(owner[0], path, where, tuple(keywords),
                                     len(parent.args), star))
            else:
                self.uses.append(Use(owner[0], path, where))


def gpu_modules(root: Path) -> Iterator[Path]:
    """Every module of app, pipelines and models that obtains a GPU library."""
    for package in ("app", "pipelines", "models"):
        for path in sorted((root / package).rglob("*.py")):
            text = path.read_text()
            if LIBRARY_CALL + '("' in text or "import_tensorrt()" in text or any(
                    f"import {lib}" in text for lib in LIBRARIES):
                yield path


def collect(root: Path, surface: Mapping[str, Any]) -> Collected:
    found = Collected()
    for path in gpu_modules(root):
        module = _Module(path, str(path.relative_to(root)), surface)
        module.bind()
        module.collect()
        if module.uses:
            found.files.append(module.relative)
        found.uses += module.uses
    return found
