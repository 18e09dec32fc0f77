"""A command group whose commands are imported only when one of them is asked for (run, or
its help shown), so that a group of heavy commands costs nothing to ``vidpipe --help``."""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

import typer
from typer.core import TyperGroup


class LazyGroup(TyperGroup):
    """Subclasses name their commands in ``lazy``: command name -> ``"module:function"``, a
    typer command function. Listing the group's commands imports them all."""

    lazy: ClassVar[dict[str, str]] = {}

    def list_commands(self, ctx: Any) -> list[str]:
        return [*self.lazy, *(n for n in super().list_commands(ctx) if n not in self.lazy)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        target = self.lazy.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module, _, function = target.partition(":")
        single = typer.Typer(add_completion=False, rich_markup_mode=None)
        single.command(cmd_name)(getattr(importlib.import_module(module), function))
        return typer.main.get_command(single)
