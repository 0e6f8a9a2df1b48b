"""Dotted-key overrides of a raw params mapping (``--set train.epochs=5``) and the one-line validation message,
which names where a moved key went, or the key a typo'd one was meant to be."""

from __future__ import annotations

import difflib
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from components.errors import ConfigError
from flows.params.moved_keys import moved_notice

__all__ = [
    "closest_key",
    "flatten_overrides",
    "format_validation_error",
    "parse_overrides",
    "schema_keys",
    "set_dotted",
]


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: itself, or the item of a list or an optional (None for a plain value or a mapping)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        if (found := _model_of(arg)) is not None:
            return found
    return None


def schema_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted key of a schema: each field, and under a nested model (or a list of them: ``generations``) its
    fields, in declaration order."""
    keys: list[str] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        keys.append(key)
        if (sub := _model_of(field.annotation)) is not None:
            keys.extend(schema_keys(sub, key + "."))
    return keys


def closest_key(schema: type[BaseModel], loc: tuple[str | int, ...]) -> str | None:
    """The key an unknown key at ``loc`` was probably meant to be (difflib), as a dotted key: a field beside it
    (``train.epoch`` → ``train.epochs``), else one of that name in another section (``train.embed_dim`` →
    ``model.embed_dim``); None when nothing is close."""
    model: type[BaseModel] | None = schema
    for part in loc[:-1]:  # the model that holds the unknown key (a list item: the list's model)
        if model is not None and not isinstance(part, int):
            field = model.model_fields.get(part)
            model = _model_of(field.annotation) if field is not None else None
    typed = str(loc[-1])
    if model is not None and (near := difflib.get_close_matches(typed, list(model.model_fields), n=1)):
        return ".".join([*(str(p) for p in loc[:-1]), near[0]])
    keys = schema_keys(schema)
    named = [k for k in keys if difflib.get_close_matches(typed, [k.rsplit(".", 1)[-1]], n=1, cutoff=0.8)]
    near = difflib.get_close_matches(".".join(str(p) for p in loc if not isinstance(p, int)), named, n=1, cutoff=0)
    return near[0] if near else None


def format_validation_error(err: ValidationError, source: str, schema: type[BaseModel] | None = None) -> str:
    """A pydantic validation error as one line naming each bad key and its fix (an unknown key of ``schema``: where it
    moved, :data:`flows.params.moved_keys.MOVED_KEYS`, else the key it was probably meant to be)."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"] if not str(p).startswith("function-after"))
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden" and (notice := moved_notice(loc)) is not None:
            loc, msg = loc.rpartition(".")[0], notice  # the section it was in, and where it went
        elif e["type"] == "extra_forbidden":
            meant = closest_key(schema, e["loc"]) if schema is not None else None
            msg = (
                f"unknown key; did you mean `{meant}`?"
                if meant
                else "unknown key (typo?); remove it or check the spelling against params.yaml"
            )
        elif e["type"] == "missing":
            msg = "required key is missing; add it"
        got = e.get("input")
        shown = (
            ""
            if e["type"] in ("extra_forbidden", "missing") or isinstance(got, dict) or "(got " in msg
            else f" (got {got!r})"
        )
        parts.append(f"{loc}: {msg}{shown}" if loc else msg)
    return f"invalid parameters in {source}: " + "; ".join(parts)


def parse_overrides(overrides: list[str]) -> list[tuple[str, Any]]:
    """``KEY=VALUE`` strings → (dotted key, YAML-parsed value) pairs."""
    parsed = []
    for o in overrides:
        if "=" not in o:
            raise ConfigError(f"override {o!r} is not KEY=VALUE; write e.g. train.epochs=5")
        k, v = o.split("=", 1)
        parsed.append((k.strip(), yaml.safe_load(v)))
    return parsed


def set_dotted(raw: dict[str, Any], items: list[tuple[str, Any]]) -> None:
    """Set dotted keys in a raw params mapping, in place."""
    for key, value in items:
        node = raw
        parts = key.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                if part in node and node[part] is not None:
                    raise ConfigError(f"override {key!r}: {part!r} is not a section; check the key against params.yaml")
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value


def flatten_overrides(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"train": {"epochs": 5}} → {"train.epochs": 5} (dict-valued leaves under known dict fields stay whole)."""
    whole = {"backbone_kwargs", "options", "base_options"}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and k not in whole:
            out.update(flatten_overrides(v, key + "."))
        else:
            out[key] = v
    return out
