"""The lifecycle policies (docs/design.md §7.18): what a night does with its new generation, a catalog by name.

A policy sees the night (:class:`Night`: the new generation's measured facts, the shipped rules' decision, the
options the night can take with their forecast served mAP and cost, the budget, an unfinished re-embedding carried
from an earlier night) and picks one option, with its reason in one line. It computes nothing: the forecasts come
from the backfill plan and the route measurement (:mod:`flows.lifecycle.options`), the actions are carried out by
the same code the commands run (:mod:`flows.lifecycle.act`).

* ``never`` — never re-embed: promote the new generation when the live gallery accepts its queries, else keep.
* ``always`` — a full backfill with every new generation (production's "wipe and re-ingest on a model change").
* ``every_k`` — a full backfill every ``lifecycle.every_k`` nights; ``never`` in between.
* ``rules`` — the shipped backfill rules and promotion gate: a full backfill when the decision says "required",
  else promote when the gate passes, else keep.
* ``budget`` — the recommended one: the option with the best forecast served mAP whose cost fits the night's budget
  (the cheapest reaching ``lifecycle.target_map`` when one does); a re-embedding larger than the budget is started as
  the largest partial backfill the budget affords and carried over to the next nights (design §11).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from components.errors import ConfigError
from flows.params.lifecycle import POLICIES, LifecycleParams

__all__ = [
    "ACTIONS",
    "STARTS_BACKFILL",
    "Carry",
    "Choice",
    "Night",
    "Option",
    "create_policy",
    "list_policies",
    "register_policy",
]

#: what a night can do: keep serving as is; promote the new generation onto the live gallery; serve it through a
#: query adapter; carry the gallery into its space by a transform; re-embed part of the gallery (``fraction``) or
#: all of it; begin a full re-embedding the night's budget cannot finish (published once done); continue a
#: re-embedding carried over from an earlier night
ACTIONS = ("keep", "promote", "adapter", "transform", "partial", "full", "begin", "continue")
#: the actions that start a backfill of their own: a workspace holds one backfill in progress at a time
STARTS_BACKFILL = ("transform", "partial", "full", "begin")


@dataclass(frozen=True)
class Option:
    """One action the night can take: its forecast served mAP@R and its cost (items re-embedded or carried through a
    map, worker-seconds as forecast). ``fraction``: the share of the gallery the target embeds afterwards."""

    action: str
    generation: int | None
    forecast_map: float | None
    items: int = 0
    seconds: float = 0.0
    fraction: float | None = None
    note: str = ""

    def fits(self, budget: LifecycleParams) -> bool:
        """Within the night's budget of items and worker-seconds (a limit that is not set does not bind)."""
        items_ok = budget.budget_items is None or self.items <= budget.budget_items
        seconds_ok = budget.budget_seconds is None or self.seconds <= budget.budget_seconds
        return items_ok and seconds_ok

    def describe(self) -> str:
        what = self.action if self.fraction is None else f"{self.action} {self.fraction:.0%}"
        fc = "—" if self.forecast_map is None else f"{self.forecast_map:.3f}"
        return f"{what} (forecast {fc}, {self.items} items, {self.seconds:.0f} s)"


@dataclass(frozen=True)
class Carry:
    """A re-embedding started on an earlier night and not finished, with generation ``target``: ``partial`` —
    published partial backfills, the gallery's share ``done`` embedded by it now, going on to ``goal``; ``full`` — a
    full backfill embedded over several nights, published once done, ``left`` items still to embed."""

    target: int
    mode: str = "partial"
    done: float = 0.0
    goal: float = 1.0
    left: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"target": self.target, "mode": self.mode, "done": self.done, "goal": self.goal, "left": self.left}


@dataclass(frozen=True)
class Night:
    """What a policy sees: the night's number, its new generation (None: nothing new trained), whether the live
    gallery accepts its queries, the shipped rules' decision, the nights since the gallery was last fully
    re-embedded, the options with their forecasts, and the re-embedding carried over (if any)."""

    night: int
    generation: int | None
    compatible: bool
    required: bool
    gate_passed: bool
    nights_since_backfill: int
    options: tuple[Option, ...]
    carry: Carry | None = None
    reasons: tuple[str, ...] = field(default_factory=tuple)
    #: the new generation retrieves worse than the live one (the ``not_worse`` veto): neither promoted nor
    #: re-embedded with, by every policy but ``always``
    vetoed: bool = False

    def unvetoed(self) -> Night:
        """The night as the vetoing policies see it: a vetoed generation's options gone (keep and a carried
        re-embedding stay)."""
        if not self.vetoed:
            return self
        kept = tuple(o for o in self.options if o.action in ("keep", "continue"))
        return replace(self, options=kept, compatible=False, required=False, gate_passed=False)

    def holding(self) -> Night:
        """The night as a full re-embedding carried over leaves it: that re-embedding holds the workspace's one
        backfill in progress until it is published, so the options that would start another are not the night's to
        take (keep, promote, adapter and continue stay)."""
        if self.carry is None or self.carry.mode != "full":
            return self
        return replace(self, options=tuple(o for o in self.options if o.action not in STARTS_BACKFILL))

    def option(self, action: str) -> Option | None:
        """The option of ``action`` (the largest fraction for ``partial``), None when the night cannot take it."""
        found = [o for o in self.options if o.action == action]
        return max(found, key=lambda o: o.fraction or 0.0) if found else None

    def keep(self) -> Option:
        return self.option("keep") or Option("keep", None, None)


@dataclass(frozen=True)
class Choice:
    """The option a policy took, and why, in one line."""

    option: Option
    reason: str


Policy = Callable[[Night, LifecycleParams], Choice]
_POLICIES: dict[str, Policy] = {}


def register_policy(name: str) -> Callable[[Policy], Policy]:
    """Register a policy under ``name`` (one of :data:`flows.params.lifecycle.POLICIES`: the schema checks names)."""

    def deco(fn: Policy) -> Policy:
        if name not in POLICIES or name in _POLICIES:
            raise TypeError(f"policy {name!r}: add it to flows/params/lifecycle.py POLICIES (once)")
        _POLICIES[name] = fn
        return fn

    return deco


def list_policies() -> list[str]:
    return list(_POLICIES)


def create_policy(name: str) -> Policy:
    """The policy registered as ``name``; ConfigError in one line for an unknown name."""
    try:
        return _POLICIES[name]
    except KeyError:
        raise ConfigError(f"unknown lifecycle.policy {name!r}; use one of {', '.join(_POLICIES)}") from None


def _promote_or_keep(night: Night, why_not: str = "") -> Choice:
    promote = night.option("promote")
    if promote is not None and night.compatible:
        return Choice(promote, f"the live gallery accepts generation {night.generation}'s queries: promote it")
    return Choice(night.keep(), why_not or "nothing to promote the live gallery accepts: keep serving as is")


def _full(night: Night, why: str) -> Choice | None:
    """A full backfill with the night's generation, or — while a full re-embedding carried over holds the backfill
    (:meth:`Night.holding`) — that one continued; None when the night can do neither."""
    full = night.option("full")
    if full is not None:
        return Choice(full, why)
    carried = night.option("continue")
    if carried is None or night.carry is None or night.carry.mode != "full":
        return None
    return Choice(carried, f"{why}; the full re-embedding with generation {night.carry.target} carried over holds "
                           "the backfill until it is published: continue it")  # fmt: skip


def _veto_note(night: Night, choice: Choice) -> Choice:
    if night.vetoed and choice.option.action == "keep":
        return Choice(choice.option, f"generation {night.generation} retrieves worse than the live one (the "
                                     "not_worse veto): neither promoted nor re-embedded with; keep")  # fmt: skip
    return choice


@register_policy("never")
def _never(night: Night, params: LifecycleParams) -> Choice:
    return _veto_note(night, _promote_or_keep(night.unvetoed()))


@register_policy("always")
def _always(night: Night, params: LifecycleParams) -> Choice:
    return _full(night, f"a full backfill with every new generation (generation {night.generation})") or Choice(
        night.keep(), "no new generation tonight: keep"
    )


@register_policy("every_k")
def _every_k(night: Night, params: LifecycleParams) -> Choice:
    return _veto_note(night, _every_k_of(night.unvetoed(), params))


def _every_k_of(night: Night, params: LifecycleParams) -> Choice:
    due = night.nights_since_backfill + 1 >= params.every_k
    if due:
        full = _full(night, f"{night.nights_since_backfill + 1} nights since the last full backfill ≥ {params.every_k}")
        if full is not None:
            return full
    return _promote_or_keep(night)


@register_policy("rules")
def _rules(night: Night, params: LifecycleParams) -> Choice:
    return _veto_note(night, _rules_of(night.unvetoed(), params))


def _rules_of(night: Night, params: LifecycleParams) -> Choice:
    if night.required:
        full = _full(night, "the backfill rules require one: " + "; ".join(night.reasons))
        if full is not None:
            return full
    if night.gate_passed and night.option("promote") is not None:
        return Choice(night.option("promote"), f"generation {night.generation} passed the promotion gate")  # type: ignore[arg-type]
    return Choice(night.keep(), "the promotion gate refuses it and no backfill is required: keep")


def _best(options: list[Option]) -> Option:
    """The best forecast; at equal forecast (to 1e-4) the cheaper in items, then the earlier in :data:`ACTIONS`."""
    return max(options, key=lambda o: (round(o.forecast_map or 0.0, 4), -o.items, -o.seconds, -ACTIONS.index(o.action)))


def _budget_items(params: LifecycleParams, full: Option) -> int:
    """Items of ``full`` the night's budget affords (by items, and by seconds at ``full``'s rate)."""
    n = full.items
    if params.budget_items is not None:
        n = min(n, params.budget_items)
    if params.budget_seconds is not None and full.seconds > 0:
        n = min(n, int(params.budget_seconds / (full.seconds / max(full.items, 1))))
    return max(0, n)


@register_policy("budget")
def _budget(night: Night, params: LifecycleParams) -> Choice:
    return _veto_note(night, _budget_of(night.unvetoed(), params))


def _budget_of(night: Night, params: LifecycleParams) -> Choice:
    known = [o for o in night.options if o.forecast_map is not None]
    affordable = [o for o in known if o.fits(params)]
    keep = night.keep()
    if params.target_map is not None:
        reaching = [o for o in affordable if (o.forecast_map or 0.0) >= params.target_map]
        if reaching:
            pick = min(reaching, key=lambda o: (o.items, o.seconds, ACTIONS.index(o.action)))
            return Choice(pick, f"the cheapest option reaching the target {params.target_map:.3f}: {pick.describe()}")
    pick = _best(affordable) if affordable else keep
    carried = night.option("continue")
    if night.carry is not None and night.carry.mode == "full" and carried is not None and pick.action == "keep":
        return Choice(carried, f"continue the full re-embedding with generation {night.carry.target} carried over "
                               f"({night.carry.left} items left): {carried.describe()}")  # fmt: skip
    ideal = _best(known) if known else keep
    why = f"the best forecast within the budget: {pick.describe()}"
    if ideal is pick:
        return Choice(pick, why)
    if ideal.action in ("full", "partial", "continue") and pick.action in ("partial", "continue"):
        why += f"; the rest of {ideal.describe()} carries over to the next nights"
        return Choice(replace(pick, note=f"carry:{ideal.generation}:{ideal.fraction or 1.0}"), why)
    if ideal.action == "full" and pick.action == "keep" and night.carry is None:  # nothing partial to mix: spread it
        n = _budget_items(params, ideal)
        if n:
            begin = Option("begin", ideal.generation, keep.forecast_map, n, ideal.seconds * n / max(ideal.items, 1),
                           n / max(ideal.items, 1))  # fmt: skip
            return Choice(begin, f"{ideal.describe()} is beyond the night's budget and cannot be mixed in part: "
                                 f"begin it, {n} items tonight, published once every item is embedded")  # fmt: skip
    return Choice(pick, why + f" (beyond it: {ideal.describe()})")
