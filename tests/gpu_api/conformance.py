"""Each use of a GPU library in vidpipe's code against the library's real API surface (the
manifest ``make gpu-api`` writes from the real wheels): the name exists, a call's keywords
are parameters of it, and it takes as many positional arguments as it is given.

    python -m tests.gpu_api.conformance [MANIFEST]     # a table, and exit 1 on a problem
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.gpu_api.uses import Collected, Use, collect

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = Path(__file__).with_name("manifest.json")


def problem(use: Use, surface: Mapping[str, Any]) -> str | None:
    """What is wrong with ``use`` against ``surface`` (None: it conforms)."""
    library = surface.get(use.library)
    if library is None:
        return f"{use.library} is not in the manifest"
    entry: Any = {"kind": "module", "members": library["names"]}
    owner = use.library
    for part in use.path.split("."):
        members = library["names"] if entry["kind"] == "module" else entry.get("members", {})
        if part not in members:
            return f"{owner} has no {part!r} in {use.library} {library['version']}"
        entry, owner = members[part], f"{owner}.{part}"
    if use.keywords is None:
        return None
    params, varargs = entry.get("params"), entry.get("varargs", True)
    if params is None:
        return None  # the library does not say: nothing to check
    unknown = [k for k in use.keywords if k not in params]
    if unknown and not varargs:
        return f"{owner}() takes no keyword {', '.join(unknown)} (its parameters: " \
               f"{', '.join(params) or 'none'})"
    if use.positional is not None and not use.star and not varargs \
            and use.positional > len(params):
        return f"{owner}() takes {len(params)} positional arguments, given {use.positional}"
    return None


def check(collected: Collected, surface: Mapping[str, Any]) -> list[tuple[Use, str]]:
    """The uses that do not conform; one the code looks up with a default (``getattr(x,
    "name", None)``) may be absent."""
    return [(use, why) for use in collected.uses
            if (why := problem(use, surface)) is not None and not use.optional]


def absent_optional(collected: Collected, surface: Mapping[str, Any]) -> list[Use]:
    return [u for u in collected.uses if u.optional and problem(u, surface) is not None]


def load(path: Path = MANIFEST) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads(path.read_text())
    return manifest["libraries"]


def report(manifest: Path = MANIFEST, root: Path = ROOT) -> int:
    surface = load(manifest)
    collected = collect(root, surface)
    problems = check(collected, surface)
    counts = Counter(u.library for u in collected.uses)
    for library, entry in sorted(surface.items()):
        wrong = sum(1 for u, _ in problems if u.library == library)
        print(f"{library:15} {entry['version']:12} {counts[library]:4} uses, {wrong} wrong "
              f"({entry['read_from']})")
    print(f"{len(collected.uses)} uses in {len(collected.files)} modules: "
          f"{', '.join(collected.files)}")
    for use, why in problems:
        print(f"  {use.where}: {use.library}.{use.path}: {why}")
    for use in absent_optional(collected, surface):
        print(f"  {use.where}: {use.library}.{use.path}: absent, and the code copes "
              "(looked up with a default)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(report(Path(sys.argv[1]) if len(sys.argv) > 1 else MANIFEST))
