"""What every checked configuration shares: the strict pydantic base (an unknown key is an
error, a checked value cannot change after), JSON numbers that are numbers (``Number``,
``Count``: never a bool or a numeric string, as their schema says), and one line for what was
wrong (``describe_error``). The model cards, the pipeline's settings and analytics, the events
and the service's config all build on it."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError


def _json_number(value: Any) -> Any:
    """What JSON Schema calls a number (``integer``: one without a fraction, 2.0 among them):
    never a bool or a string, which pydantic would otherwise convert."""
    if isinstance(value, bool | str | bytes):
        raise ValueError(f"Input should be a number, got {type(value).__name__}")
    return value


# The check itself, for a field with limits of its own: put it after them, as in
# ``Annotated[int, Field(ge=1), JSON_NUMBER]`` (before them, the schema loses its minimum).
JSON_NUMBER = BeforeValidator(_json_number)
Number = Annotated[float, JSON_NUMBER]  # 1, 1.5; not true or "1.5"
Count = Annotated[int, JSON_NUMBER]  # 2, 2.0; not true, "2" or 2.5


class Checked(BaseModel):
    """A checked configuration: unknown keys refused, values fixed once checked."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class CheckedBody(BaseModel):
    """A checked request or config body whose fields the service may copy and change."""

    model_config = ConfigDict(extra="forbid")


def describe_error(error: ValidationError, source: str = "", *, words: bool = False) -> str:
    """The first problem, as one line naming the key (after ``source``, where the keys came
    from, if given; with ``words``, as words: "batch size") and what it allows."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    if words:
        where = where.replace("_", " ")
    allowed = first.get("ctx", {}).get("expected")
    extra = f" (allowed: {allowed})" if allowed and str(allowed) not in first["msg"] else ""
    return f"{source + ': ' if source else ''}{where}: {first['msg']}{extra}"
