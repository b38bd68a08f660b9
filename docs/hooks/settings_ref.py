"""The settings reference, generated from ``rag.settings.Settings`` so that it cannot drift.

An MkDocs hook (``hooks:`` in mkdocs.yml): at build time it adds the page ``settings.md``,
which no one writes by hand. Run as a script, it prints the same Markdown.

The walk is generic: every field of the settings model, and of any pydantic model a field
holds (a nested group of settings), becomes one row with the environment variable that sets
it, its type, its default and its ``description``. The variable's name follows
pydantic-settings' rules: a field's ``validation_alias`` (or ``alias``) names it outright;
otherwise it is the model's ``env_prefix`` plus the field's name, and a nested group's fields
add the group's name and ``env_nested_delimiter`` (without a delimiter, the group is one JSON
variable and its fields are that object's keys).
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
from pydantic import AliasChoices, AliasPath, BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

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


def _alias_names(info: FieldInfo) -> list[str]:
    """The names a ``validation_alias`` or ``alias`` gives the field, in their order."""
    alias = info.validation_alias if info.validation_alias is not None else info.alias
    if alias is None:
        return []
    choices: list[Any] = list(alias.choices) if isinstance(alias, AliasChoices) else [alias]
    names: list[str] = []
    for choice in choices:
        if isinstance(choice, AliasPath):
            choice = choice.path[0]
        if isinstance(choice, str):
            names.append(choice)
    return names


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (``Group``, ``Group | None``), if it holds one."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            model = _model_of(arg)
            if model is not None:
                return model
    return None


def _doc(model: type[BaseModel]) -> str:
    """The first paragraph of a model's docstring, on one line."""
    doc = (model.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(doc.replace("``", "`").split())


def _walk(
    model: type[BaseModel],
    path: str,
    prefix: str,
    level: str,
    delimiter: str | None,
    case_sensitive: bool,
    groups: list[Group],
) -> None:
    """Add ``model``'s group and, after it, those of the models its fields hold.

    ``level`` says how the model's fields are read: ``settings`` (the model reads the
    environment itself: an alias is a whole variable name, else ``prefix`` + the field's name),
    ``nested`` (a group under a delimiter: ``prefix`` is the group's variable and the
    delimiter, and an alias is a key after it) or ``json`` (``prefix`` names the JSON variable
    the group is read from, and an alias or the field's name is a key of that object).
    """
    group = Group(path=path, doc=_doc(model))
    groups.append(group)
    nested: list[tuple[str, type[BaseModel], str, str]] = []
    for name, info in model.model_fields.items():
        dotted = f"{path}.{name}" if path else name
        sub = _model_of(info.annotation)
        aliases = _alias_names(info)
        others: list[str] = []
        if level == "json":
            env = f"{prefix} → `{aliases[0] if aliases else name}`"
        else:
            if level == "settings":
                names = [a for a in aliases if a.lower() != name.lower()] or [prefix + name]
            else:
                names = [prefix + a for a in aliases] or [prefix + name]
            own = prefix + name
            if not case_sensitive:
                names = [n.upper() for n in names]
                own = own.upper()
            env = own if own in names else names[0]
            others = [n for n in names if n != env]
        if sub is not None:
            sub_prefix = sub.model_config.get("env_prefix") if issubclass(sub, BaseSettings) else ""
            if sub_prefix:
                # A group that is settings of its own reads its variables with its own prefix.
                nested.append((dotted, sub, str(sub_prefix), "settings"))
            elif level != "json" and delimiter:
                nested.append((dotted, sub, f"{env}{delimiter}", "nested"))
            else:
                nested.append((dotted, sub, env if level == "json" else f"`{env}`", "json"))
            kind = "JSON object" if nested[-1][3] == "json" else "group"
            description = info.description or _doc(sub)
            group.rows.append(Row(dotted, env, others, kind, "see below", description))
            continue
        bounds = _bounds(info)
        type_name = _type_name(info.annotation) + (f", {bounds}" if bounds else "")
        group.rows.append(
            Row(dotted, env, others, type_name, _default(info), info.description or "")
        )
    for dotted, sub, sub_prefix, sub_level in nested:
        config = sub.model_config
        sub_sensitive = bool(config.get("case_sensitive", case_sensitive))
        own_delimiter = config.get("env_nested_delimiter")
        sub_delimiter = (
            (str(own_delimiter) if own_delimiter else None)
            if sub_level == "settings"
            else delimiter
        )
        _walk(sub, dotted, sub_prefix, sub_level, sub_delimiter, sub_sensitive, groups)


def collect(settings: type[BaseSettings] | None = None) -> list[Group]:
    """Every setting of ``settings`` (default ``rag.settings.Settings``), group by group."""
    if settings is None:
        from rag.settings import Settings

        settings = Settings
    config = settings.model_config
    groups: list[Group] = []
    _walk(
        settings,
        "",
        str(config.get("env_prefix") or ""),
        "settings",
        config.get("env_nested_delimiter"),
        bool(config.get("case_sensitive", False)),
        groups,
    )
    return groups


def rows(settings: type[BaseSettings] | None = None) -> Iterator[Row]:
    """Every row of every group."""
    for group in collect(settings):
        yield from group.rows


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").replace("<", "&lt;").split())


def render(settings: type[BaseSettings] | None = None) -> str:
    """The settings reference as a Markdown page."""
    lines = [
        "# Settings reference",
        "",
        "Generated from `rag.settings.Settings` when the documentation is built: every setting,",
        "the environment variable that sets it (or a line of `.env`), its type, its default and",
        "its description. [Configuration](configuration.md) explains the settings by topic.",
        "",
    ]
    for group in collect(settings):
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
