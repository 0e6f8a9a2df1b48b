"""params.yaml keys that moved: every old dotted key, the key it is now, and the one line that says so.

The one table of params.yaml's old names. An old key is refused, never read silently: the schema does not know it,
and the validation message (:func:`flows.params.overrides.format_validation_error`) says where it went with
:func:`moved_notice` — instead of guessing a near key — so the user moves the value once, where it now lives.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MOVED_KEYS", "Moved", "moved_notice"]


@dataclass(frozen=True)
class Moved:
    """Where an old key went: ``new``, its dotted key now; ``what``, what the new key is when its name alone does not
    say (shown in the notice)."""

    new: str
    what: str = ""


#: old dotted key → where it went
MOVED_KEYS: dict[str, Moved] = {
    # the backfill decision's rules got their own section, backfill.rules
    **{
        f"backfill.{rule}": Moved(f"backfill.rules.{rule}")
        for rule in (
            "metric",
            "require_compatibility",
            "p_com_floor",
            "zeta_ceiling",
            "max_generations_since_backfill",
            "clip_fraction_max",
        )
    },
    # every gallery store keeps versions for rollback, not the backfill alone
    "backfill.retain_versions": Moved("gallery.keep_versions", "the gallery versions every store keeps"),
}


def moved_notice(old: str) -> str | None:
    """The one line that says where the old dotted key ``old`` went and how to write it now (it names the old key
    without its section: the message's location names that); None for a key that never moved.

    ``backfill.retain_versions`` → ``retain_versions moved to gallery.keep_versions (the gallery versions every store
    keeps); write it under `gallery:` as keep_versions (--set gallery.keep_versions=…)``.
    """
    moved = MOVED_KEYS.get(old)
    if moved is None:
        return None
    leaf = old.rsplit(".", 1)[-1]
    *sections, new_leaf = moved.new.split(".")
    where = f"under `{sections[-1]}:`" + "".join(f" in `{s}:`" for s in reversed(sections[:-1]))
    as_leaf = f" as {new_leaf}" if new_leaf != leaf else ""
    what = f" ({moved.what})" if moved.what else ""
    return f"{leaf} moved to {moved.new}{what}; write it {where}{as_leaf} (--set {moved.new}=…)"
