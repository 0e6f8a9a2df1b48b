"""Dotted-key overrides of a raw params mapping (``--set train.epochs=5``) and the one-line validation message."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import ValidationError

from components.errors import ConfigError

__all__ = ["flatten_overrides", "format_validation_error", "parse_overrides", "set_dotted"]


def format_validation_error(err: ValidationError, source: str) -> str:
    """A pydantic validation error as one line naming each bad key and its fix."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"] if not str(p).startswith("function-after"))
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key (typo?); remove it or check the spelling against params.yaml"
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
