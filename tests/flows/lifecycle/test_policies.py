"""The lifecycle policies (flows/lifecycle/policies.py) on hand-made nights: each policy's choice and its reason, the
budget policy within its budget (the cheapest option reaching the target; a re-embedding beyond the budget started
as the largest affordable partial and carried over), and params ``lifecycle:``'s bad input refused in one line."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from components.errors import ConfigError
from flows.lifecycle.policies import Carry, Night, Option, create_policy, list_policies
from flows.params import apply_overrides, load_params
from flows.params.lifecycle import POLICIES, LifecycleParams
from tests.conftest import REPO


def _night(compatible: bool = True, required: bool = False, gate: bool = True, since: int = 0) -> Night:
    options = (
        Option("keep", 0, 0.50),
        Option("promote", 1, 0.55),
        *(
            Option("partial", 1, 0.55 + 0.02 * k, items=100 * k, seconds=float(k), fraction=k / 10)
            for k in range(1, 10)
        ),
        Option("full", 1, 0.80, items=1000, seconds=10.0, fraction=1.0),
    )
    if not compatible:
        options = (options[0], options[-1])
    return Night(3, 1, compatible, required, gate, since, options, reasons=("clip 99% > 95%",))


def test_the_catalog_holds_exactly_the_schemas_policies():
    assert sorted(list_policies()) == sorted(POLICIES)
    with pytest.raises(ConfigError, match=r"unknown lifecycle.policy 'sometimes'; use one of "):
        create_policy("sometimes")


def test_never_promotes_what_the_gallery_accepts_and_keeps_otherwise():
    p = LifecycleParams(policy="never")
    assert create_policy("never")(_night(), p).option.action == "promote"
    assert create_policy("never")(_night(compatible=False), p).option.action == "keep"


def test_always_re_embeds_everything_with_every_generation():
    assert create_policy("always")(_night(compatible=False), LifecycleParams(policy="always")).option.action == "full"


@pytest.mark.parametrize(("since", "action"), [(0, "promote"), (1, "promote"), (2, "full")])
def test_every_k_re_embeds_every_k_nights(since: int, action: str):
    choice = create_policy("every_k")(_night(since=since), LifecycleParams(policy="every_k", every_k=3))
    assert choice.option.action == action


def test_rules_re_embed_when_required_and_promote_through_the_gate():
    p = LifecycleParams(policy="rules")
    required = create_policy("rules")(_night(required=True), p)
    assert required.option.action == "full" and "clip 99% > 95%" in required.reason
    assert create_policy("rules")(_night(), p).option.action == "promote"
    assert create_policy("rules")(_night(gate=False), p).option.action == "keep"


def test_budget_takes_the_best_forecast_it_can_afford_and_carries_the_rest_over():
    choice = create_policy("budget")(_night(), LifecycleParams(policy="budget", budget_items=300))
    assert (choice.option.action, choice.option.fraction) == ("partial", 0.3)
    assert "carries over" in choice.reason and choice.option.note == "carry:1:1.0"
    roomy = create_policy("budget")(_night(), LifecycleParams(policy="budget", budget_items=5000))
    assert roomy.option.action == "full"


def test_budget_takes_the_cheapest_option_that_reaches_its_target():
    p = LifecycleParams(policy="budget", budget_items=5000, target_map=0.6)
    choice = create_policy("budget")(_night(), p)
    assert (choice.option.action, choice.option.fraction) == ("partial", 0.3) and "target 0.600" in choice.reason


def test_budget_begins_a_full_re_embedding_it_cannot_afford_and_continues_it_the_nights_after():
    night = Night(1, 1, False, True, False, 0, (Option("keep", 0, 0.5), Option("full", 1, 0.8, items=1000)))
    begin = create_policy("budget")(night, LifecycleParams(policy="budget", budget_items=300))
    assert (begin.option.action, begin.option.items, begin.option.forecast_map) == ("begin", 300, 0.5)
    assert "cannot be mixed in part" in begin.reason
    carry = Carry(1, "full", left=700)
    later = Night(2, None, False, False, False, 1, (Option("keep", 0, 0.5), Option("continue", 1, None, 300)), carry)
    cont = create_policy("budget")(later, LifecycleParams(policy="budget", budget_items=300))
    assert cont.option.action == "continue" and "700 items left" in cont.reason


@pytest.mark.parametrize("policy", ["always", "rules", "budget"])
def test_a_full_re_embedding_carried_over_holds_the_backfill_until_it_is_published(policy: str):
    """A night with a new generation while a begun full re-embedding is unpublished: no option that starts another
    backfill (the workspace holds one in progress; the bench's night 2 once chose a transform and was refused)."""
    carry = Carry(1, "full", left=700)
    options = (Option("keep", 0, 0.5), Option("full", 2, 0.8, items=1000), Option("transform", 2, 0.7, items=50),
               Option("partial", 2, 0.6, items=100, fraction=0.1), Option("continue", 1, None, 300))  # fmt: skip
    night = Night(2, 2, True, True, False, 1, options, carry).holding()
    assert {o.action for o in night.options} == {"keep", "continue"}
    choice = create_policy(policy)(night, LifecycleParams(policy=policy, budget_items=300))
    assert choice.option.action == "continue" and choice.option.generation == 1, choice
    free = Night(2, 2, True, True, False, 1, options[:4]).holding()  # nothing carried: every option stays
    assert len(free.options) == 4


@pytest.mark.parametrize("policy", ["never", "every_k", "rules", "budget"])
def test_a_vetoed_generation_is_neither_promoted_nor_re_embedded_with_but_always_re_embeds(policy: str):
    night = replace(_night(required=True, since=5), vetoed=True)
    params = LifecycleParams(policy=policy, budget_items=5000)
    choice = create_policy(policy)(night, params)
    assert choice.option.action == "keep" and "not_worse veto" in choice.reason
    assert create_policy("always")(night, LifecycleParams(policy="always")).option.action == "full"


def test_budget_keeps_when_nothing_beats_keeping():
    night = Night(1, 1, False, False, False, 0, (Option("keep", 0, 0.5), Option("full", 1, 0.4, items=1000)))
    assert create_policy("budget")(night, LifecycleParams(policy="budget", budget_items=10)).option.action == "keep"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("lifecycle.policy=sometimes", r"unknown lifecycle.policy 'sometimes'; use one of never, rules"),
        ("lifecycle.budget_items=0", r"lifecycle.budget_items"),
        ("lifecycle.budget_seconds=-1", r"lifecycle.budget_seconds"),
        ("lifecycle.target_map=1.5", r"lifecycle.target_map"),
        ("lifecycle.policy=budget", r"lifecycle.policy budget needs a budget: set lifecycle.budget_items"),
    ],
)
def test_bad_lifecycle_params_are_one_line(override: str, message: str):
    base = load_params(REPO / "params.yaml")
    with pytest.raises(ConfigError, match=message) as err:
        apply_overrides(base, [override])
    assert "\n" not in str(err.value)


def test_the_schema_refuses_a_budget_policy_without_a_budget():
    with pytest.raises(ValidationError, match="needs a budget"):
        LifecycleParams(policy="budget")


def test_the_night_records_its_chosen_option_and_the_action_embeds_what_it_planned():
    """A begun re-embedding embeds the items the policy planned (the recorded row's ``items`` is what the action
    did, 0 until it ran: the bench's first season began a full re-embedding of 0 items every night)."""
    from flows.lifecycle.act import _planned_items
    from flows.lifecycle.night import _record
    from registry.orm import Night as NightRow

    night = Night(1, 1, False, True, False, 0, (Option("keep", 0, 0.5), Option("full", 1, 0.8, items=1000)))
    choice = create_policy("budget")(night, LifecycleParams(policy="budget", budget_items=300))
    rec = _record(choice, night, "night-01", "budget", 0, 0, [], None)
    assert [o["action"] for o in rec.options if o.get("chosen")] == ["begin"] and len(rec.options) == 3
    row = NightRow(night="night-01", action=rec.action, options=rec.options, items=0)
    assert _planned_items(row) == 300
    with pytest.raises(Exception, match="no chosen option"):
        _planned_items(NightRow(night="night-00", action="begin", options=rec.options[:2], items=0))
