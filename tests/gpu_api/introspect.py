"""The API surface of the real GPU libraries, as data: run *inside* the conformance
environment (``make gpu-api``), over stand-in driver libraries, never in vidpipe's own.

For each library, every top-level name and every member of every class: its kind (class,
enum, function, method, property, value), its parameter names (``inspect.signature``, else
the pybind11 docstring's signature lines, every overload's), whether it takes ``*args`` or
``**kwargs``, and its return type (a class of the same library, by name). CV-CUDA's
extension cannot initialise without a driver (its own CUDA runtime segfaults over a
stand-in): it is read from the type stubs NVIDIA ships in the same wheel (``__init__.pyi``).

    python introspect.py OUT.json tensorrt PyNvVideoCodec pynvml cvcuda
"""

from __future__ import annotations

import ast
import enum
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any

SIGNATURE = re.compile(r"^\s*(?:\d+\.\s*)?(\w+)\((.*)\)\s*(?:->\s*(.+?))?\s*$")


def _params(text: str) -> tuple[list[str], bool]:
    """Parameter names of a docstring signature's argument list (self dropped)."""
    names, varargs, depth, current = [], False, 0, ""
    for char in text + ",":
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            part = current.strip()
            current = ""
            if not part or part == "/" or part == "*":
                continue
            if part.startswith("*"):
                varargs = True
                continue
            names.append(part.split(":")[0].split("=")[0].strip())
        else:
            current += char
    return [n for n in names if n != "self"], varargs


def _from_doc(obj: Any, name: str) -> dict[str, Any] | None:
    doc = getattr(obj, "__doc__", None) or ""
    params: list[str] = []
    varargs, returns, found = False, None, False
    for line in doc.splitlines():
        match = SIGNATURE.match(line)
        if match and match.group(1) == name:
            names, more = _params(match.group(2))
            params += [n for n in names if n not in params]
            varargs = varargs or more
            returns = returns or match.group(3)
            found = True
    if not found:
        return None
    return {"params": params, "varargs": varargs, "returns": returns}


def _callable(obj: Any, name: str) -> dict[str, Any]:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        found = _from_doc(obj, name)
        return found or {"params": None, "varargs": True, "returns": None}
    params = [p.name for p in signature.parameters.values()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "self"]
    varargs = any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                  for p in signature.parameters.values())
    doc = _from_doc(obj, name)
    if varargs and doc is not None:  # pybind11's (*args, **kwargs): the docstring knows
        return doc
    ret = signature.return_annotation
    returns = None if ret is inspect.Signature.empty else getattr(ret, "__name__", str(ret))
    return {"params": params, "varargs": varargs, "returns": returns}


def _is_enum(cls: type) -> bool:
    return hasattr(cls, "__members__") or (isinstance(cls, type) and issubclass(cls, enum.Enum))


def _member(owner: Any, name: str, value: Any) -> dict[str, Any]:
    if isinstance(value, property) or type(value).__name__ in ("property", "getset_descriptor",
                                                                "member_descriptor"):
        return {"kind": "property"}
    if isinstance(owner, type) and _is_enum(owner) and isinstance(value, owner):
        return {"kind": "enum value"}
    if inspect.isclass(value):
        return {"kind": "class"}
    if callable(value):
        return {"kind": "method"} | _callable(value, name)
    return {"kind": "value"}


def _class(cls: type, name: str) -> dict[str, Any]:
    members = {}
    for attr in dir(cls):
        if attr.startswith("__") and attr not in ("__init__", "__enter__", "__exit__",
                                                  "__call__", "__getitem__", "__len__"):
            continue
        try:
            members[attr] = _member(cls, attr, getattr(cls, attr))
        except Exception as e:  # a descriptor that needs an instance
            members[attr] = {"kind": "value", "error": type(e).__name__}
    init = members.pop("__init__", None)
    entry: dict[str, Any] = {"kind": "enum" if _is_enum(cls) else "class", "members": members}
    if init is not None:
        entry |= {"params": init.get("params"), "varargs": init.get("varargs", True)}
    return entry


def from_module(module: Any) -> dict[str, Any]:
    names: dict[str, Any] = {}
    if hasattr(module, "__version__"):
        names["__version__"] = {"kind": "value"}
    for name in dir(module):
        if name.startswith("_"):
            continue
        value = getattr(module, name)
        if inspect.isclass(value):
            names[name] = _class(value, name)
        elif inspect.ismodule(value):
            names[name] = {"kind": "module"}
        elif callable(value):
            names[name] = {"kind": "function"} | _callable(value, name)
        else:
            names[name] = {"kind": "value"}
    return names


def _stub_args(args: ast.arguments) -> tuple[list[str], bool]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    return ([a.arg for a in every if a.arg != "self"],
            args.vararg is not None or args.kwarg is not None)


def _stub_function(node: ast.FunctionDef, into: dict[str, Any], kind: str) -> None:
    params, varargs = _stub_args(node.args)
    returns = ast.unparse(node.returns) if node.returns is not None else None
    is_property = any((isinstance(d, ast.Name) and d.id == "property")
                      or (isinstance(d, ast.Attribute) and d.attr in ("setter", "getter"))
                      for d in node.decorator_list)
    if is_property or into.get(node.name, {}).get("kind") == "property":
        into[node.name] = {"kind": "property"}
        return
    entry = into.setdefault(node.name, {"kind": kind, "params": [], "varargs": False,
                                        "returns": returns})
    entry["params"] += [p for p in params if p not in entry["params"]]  # overloads: union
    entry["varargs"] = entry["varargs"] or varargs


def from_stubs(path: Path) -> dict[str, Any]:
    """A module's surface from its ``.pyi``: functions, classes (enums are classes whose
    body assigns names), their methods, properties and values."""
    names: dict[str, Any] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef):
            _stub_function(node, names, "function")
        elif isinstance(node, ast.ClassDef):
            members: dict[str, Any] = {}
            values = 0
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    _stub_function(item, members, "method")
                elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    for target in targets:
                        if isinstance(target, ast.Name):
                            members[target.id] = {"kind": "enum value"}
                            values += 1
            init = members.pop("__init__", None)
            bases = [ast.unparse(b) for b in node.bases]
            is_enum = values and not any(m["kind"] == "method" for m in members.values()
                                         if m["kind"] != "enum value") or "Enum" in str(bases)
            entry = {"kind": "enum" if is_enum else "class", "members": members}
            if init is not None:
                entry |= {"params": init["params"], "varargs": init["varargs"]}
            names[node.name] = entry
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and not target.id.startswith("_"):
                    names[target.id] = {"kind": "value"}
    return names


DISTRIBUTIONS = {"tensorrt": "tensorrt_cu12_bindings", "PyNvVideoCodec": "pynvvideocodec",
                 "pynvml": "nvidia-ml-py", "cvcuda": "cvcuda-cu12"}


def surface(name: str) -> dict[str, Any]:
    version = importlib.metadata.version(DISTRIBUTIONS[name])
    if name == "cvcuda":
        spec = importlib.util.find_spec("cvcuda")
        assert spec is not None and spec.origin is not None
        stubs = Path(spec.origin).with_name("__init__.pyi")
        return {"version": version, "read_from": "the wheel's __init__.pyi",
                "names": from_stubs(stubs)}
    module = importlib.import_module(name)
    return {"version": version, "read_from": "the imported module", "names": from_module(module)}


if __name__ == "__main__":
    out, *libraries = sys.argv[1:]
    Path(out).write_text(json.dumps({n: surface(n) for n in libraries}, indent=1,
                                    sort_keys=True) + "\n")
