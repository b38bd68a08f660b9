"""The settings reference, generated from ``rag.settings.Settings`` so that it cannot drift.

An MkDocs hook (``hooks:`` in mkdocs.yml): at build time it adds the page ``settings.md``,
which no one writes by hand. Run as a script, it prints the same Markdown.

One section per group of settings (``settings.engine``, ``settings.retrieval``, ...) and one row
per setting: the variable that sets it (``rag.settings.sources.env_names``: the documented name,
then any older name still read), its type, its default and its ``description``.
"""

from __future__ import annotations

import enum
import sys
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

PAGE = "settings.md"
"""Where the generated page sits among the documentation's files."""


@dataclass
class Row:
    """One setting: the variable that sets it and what the model says about it."""

    path: str  # dotted field path: "engine.model", or "model" for a top-level field
    env: str  # the variable's name; a JSON key of it when the group has no delimiter
    other_env: list[str]  # further names read for the same setting (old names kept)
    type: str
    default: str
    description: str


@dataclass
class Group:
    """The rows of one model: the settings class itself, or a nested group of it."""

    path: str  # "" for the top level
    doc: str
    rows: list[Row] = field(default_factory=list)


def _type_name(annotation: Any) -> str:
    """A short, readable name of a field's type."""
    if annotation is None or annotation is type(None):
        return "none"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(f"`{value}`" if isinstance(value, str) else str(value) for value in args)
    if origin in (typing.Union, types.UnionType):
        present = [arg for arg in args if arg is not type(None)]
        name = " | ".join(_type_name(arg) for arg in present)
        return f"{name} (optional)" if len(present) < len(args) else name
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is not None:
        inner = ", ".join(_type_name(arg) for arg in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    if isinstance(annotation, type):
        if issubclass(annotation, SecretStr):
            return "secret"
        if issubclass(annotation, Path):
            return "path"
        if issubclass(annotation, enum.Enum):
            return " | ".join(f"`{member.value}`" for member in annotation)
        return annotation.__name__
    return str(annotation)


def _bounds(info: FieldInfo) -> str:
    """The field's numeric and length constraints, e.g. ``1 ≤ x ≤ 1024``."""
    low = high = ""
    parts: list[str] = []
    for item in info.metadata:
        if isinstance(item, annotated_types.Ge):
            low = f"{item.ge} ≤ "
        elif isinstance(item, annotated_types.Gt):
            low = f"{item.gt} < "
        elif isinstance(item, annotated_types.Le):
            high = f" ≤ {item.le}"
        elif isinstance(item, annotated_types.Lt):
            high = f" < {item.lt}"
        elif isinstance(item, annotated_types.MaxLen):
            parts.append(f"at most {item.max_length} characters")
    if low or high:
        parts.insert(0, f"{low}x{high}")
    return ", ".join(parts)


def _default(info: FieldInfo) -> str:
    """The default as one writes it in the variable (empty when there is none)."""
    if info.default_factory is not None:
        value: Any = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    if value is None:
        return "empty"
    if isinstance(value, BaseModel):
        return "see below"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, enum.Enum):
        text = str(value.value)
    elif isinstance(value, dict | list):
        import json

        text = json.dumps(value)
    else:
        text = str(value)
    return f"`{text}`" if text else "empty"


def _doc(model: type[BaseModel]) -> str:
    """The first paragraph of a model's docstring, on one line."""
    doc = (model.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(doc.replace("``", "`").split())


def collect() -> list[Group]:
    """Every setting of ``rag.settings.Settings``, group by group."""
    from rag.settings.sources import GROUPS, env_names

    groups: list[Group] = []
    for name, model in GROUPS.items():
        group = Group(path=name, doc=_doc(model))
        for field_name, info in model.model_fields.items():
            env, *others = env_names(name, field_name)
            bounds = _bounds(info)
            type_name = _type_name(info.annotation) + (f", {bounds}" if bounds else "")
            group.rows.append(
                Row(
                    f"{name}.{field_name}",
                    env,
                    others,
                    type_name,
                    _default(info),
                    info.description or "",
                )
            )
        groups.append(group)
    return groups


def rows() -> Iterator[Row]:
    """Every row of every group."""
    for group in collect():
        yield from group.rows


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").replace("<", "&lt;").split())


def render() -> str:
    """The settings reference as a Markdown page."""
    lines = [
        "# Settings reference",
        "",
        "Generated from `rag.settings.Settings` when the documentation is built: every setting,",
        "the environment variable that sets it (or a line of `.env`), its type, its default and",
        "its description. In Python, a group is an attribute (`settings.retrieval.top_k`) and a",
        "setting's keyword is its variable's name in lower case without the prefix",
        "(`Settings(top_k=3)`). `ragguard config` prints every value in effect and where it came",
        "from. [Configuration](configuration.md) explains the settings by topic.",
        "",
    ]
    for group in collect():
        if group.path:
            lines += [f"## `{group.path}`", ""]
        if group.doc:
            lines += [group.doc, ""]
        lines += [
            "| Variable | Type | Default | Description |",
            "| --- | --- | --- | --- |",
        ]
        for row in group.rows:
            env = row.env if row.env.startswith("`") else f"`{row.env}`"
            if row.other_env:
                env += " (also " + ", ".join(f"`{n}`" for n in row.other_env) + ")"
            lines.append(
                f"| {env} | {_cell(row.type)} | {_cell(row.default)} | {_cell(row.description)} |"
            )
        lines.append("")
    return "\n".join(lines)


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: add the generated page to the documentation's files."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=render()))
    return files


if __name__ == "__main__":
    sys.stdout.write(render())
