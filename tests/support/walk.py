"""The ``--model`` walk: which of vidpipe's files a model handed to ``vidpipe run`` passes
through before the first frame, measured by running it.

``python -m tests.support.walk [--against REV]`` runs ``vidpipe run CLIP --model shapes-yolo``
(a fresh plan cache, so planning is measured too) in a child process under ``sys.setprofile``
and records each call of a function of ``app``, ``pipelines`` or ``models`` that is handed the
model: the name given, or anything a call handed it returned (the path, the card, a session),
as an argument or one attribute deep in one (``self`` excepted). It stops where the pipeline
starts running (``Pipeline.run``). Consecutive calls in one file are one *stay*; a *return* is
a stay in a file the walk had already left. ``--against REV`` walks a ``git worktree`` of
another commit the same way. This file runs on its own in that tree (it imports nothing of
vidpipe's), so it can walk code older than itself.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
PACKAGES = ("app", "pipelines", "models")
PRIMITIVES = (bool, int, float, type(None))


class Walk:
    """The calls that are handed the model, in the order they are made."""

    def __init__(self, tree: Path, model: str) -> None:
        self.roots = tuple(str(tree / p) + os.sep for p in PACKAGES)
        self.tree = tree
        self.kept: list[Any] = []  # tainted objects, kept alive so that their ids stay theirs
        self.ids: set[int] = set()
        self.texts: set[str] = {model}
        self.open: set[int] = set()  # frames of recorded calls, to taint what they return
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.done = False

    def taint(self, value: Any) -> None:
        if isinstance(value, PRIMITIVES) or id(value) in self.ids:
            return
        self.kept.append(value)
        self.ids.add(id(value))
        if isinstance(value, (str, os.PathLike)):
            self.texts.add(os.fspath(value) if not isinstance(value, str) else value)
        if isinstance(value, (tuple, list)):
            for item in value:
                self.taint(item)

    def holds(self, value: Any, depth: int = 1) -> bool:
        if isinstance(value, PRIMITIVES):
            return False
        if id(value) in self.ids:
            return True
        if isinstance(value, (str, os.PathLike)):
            try:
                return os.fspath(value) in self.texts
            except TypeError:
                return False
        if depth == 0:
            return False
        if isinstance(value, (tuple, list)):
            return any(self.holds(v, depth - 1) for v in value[:16])
        try:
            fields = vars(value)
        except TypeError:
            slots = getattr(type(value), "__slots__", ())
            fields = {s: getattr(value, s, None) for s in slots if isinstance(s, str)}
        return any(self.holds(v, depth - 1) for v in list(fields.values())[:64])

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if self.done or event not in ("call", "return"):
            return
        code = frame.f_code
        if not code.co_filename.startswith(self.roots):
            return
        with self.lock:
            if event == "return":
                if id(frame) in self.open:
                    self.open.discard(id(frame))
                    self.taint(arg)
                return
            where = str(Path(code.co_filename).relative_to(self.tree))
            if where == "pipelines/pipeline.py" and code.co_name == "run":
                self.done = True
                return
            count = code.co_argcount + code.co_kwonlyargcount
            names = code.co_varnames[:count]
            handed = [frame.f_locals.get(n) for n in names if n not in ("self", "cls")]
            if any(self.holds(v) for v in handed):
                self.calls.append((where, code.co_qualname))
                self.open.add(id(frame))


def stays(calls: list[tuple[str, str]]) -> list[str]:
    """The files the walk stays in, one entry per stay."""
    out: list[str] = []
    for where, _ in calls:
        if not out or out[-1] != where:
            out.append(where)
    return out


def figures(calls: list[tuple[str, str]]) -> dict[str, Any]:
    visited = stays(calls)
    returns = sum(1 for i, f in enumerate(visited) if f in visited[:i])
    return {"calls": len(calls), "stays": len(visited), "files": len(set(visited)),
            "returns": returns, "path": visited,
            "called": [f"{w}:{q}" for w, q in calls]}


def inner(tree: Path, clip: Path, model: str, out: Path) -> None:
    """In the child process: run the CLI of ``tree`` under the profiler."""
    sys.path[:] = [str(tree)] + [p for p in sys.path if Path(p or ".").resolve() != HERE.parent]
    from app.cli import main  # the tree's own CLI

    walk = Walk(tree, model)
    sys.argv = ["vidpipe", "run", str(clip), "--model", model, "--out", str(out / "run")]
    threading.setprofile(walk.profile)
    sys.setprofile(walk.profile)
    try:
        main()
    except SystemExit:
        pass
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    (out / "walk.json").write_text(json.dumps({"calls": walk.calls}))


def walk_tree(tree: Path, clip: Path, model: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="vidpipe-walk-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(tree), "VIDPIPE_CACHE_DIR": str(Path(tmp) / "c")}
        subprocess.run([sys.executable, str(HERE), "--inner", str(tree), str(clip), model, tmp],
                       cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
        calls = [tuple(c) for c in json.loads((Path(tmp) / "walk.json").read_text())["calls"]]
    return figures(calls)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", help="also walk this commit (a git worktree of it)")
    parser.add_argument("--model", default="shapes-yolo")
    parser.add_argument("--inner", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    if args.inner:
        tree, clip, model, out = args.inner
        inner(Path(tree), Path(clip), model, Path(out))
        return
    sys.path.insert(0, str(REPO))
    from pipelines.synthetic.rectangles import make_test_clip

    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="vidpipe-walk-clip-") as tmp:
        clip = make_test_clip(Path(tmp) / "clip.mp4", frames=30)
        report["HEAD"] = walk_tree(REPO, clip, args.model)
        if args.against:
            tree = Path(tmp) / "against"
            subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), args.against],
                           cwd=REPO, check=True)
            try:
                report[args.against] = walk_tree(tree, clip, args.model)
            finally:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO,
                               check=True)
    for label, row in report.items():
        print(f"{label}: {row['calls']} calls, {row['stays']} stays in {row['files']} files, "
              f"{row['returns']} returns")
        print("   " + " -> ".join(row["path"]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
