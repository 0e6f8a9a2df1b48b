"""The one selection rule of the method tables (docs/design.md §6.6), on the validation split only.

Every configuration a method is tried with at seed 0 (head × λ × the method's own temperature) is scored on the
validation split against its own old model and φ*: mAP P_com and mAP P_up (:func:`components.evaluation.p_com`,
:func:`~components.evaluation.p_up`). The rule: the largest validation P_com among the configurations with validation
P_up ≥ ``p_up_floor`` (−0.01); when none meets that constraint, the one with the largest validation P_up, and the row
says "constraint not met". Self quality alone never decides: P_up is the new model's self quality *relative to φ*'s*,
and it only ever decides when no configuration is compatible-and-harmless.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CONSTRAINT_NOT_MET",
    "MAX_P_COM",
    "P_UP_FLOOR",
    "RULE_TEXT",
    "SELECTION_RULES",
    "Scored",
    "select_configuration",
]

#: validation mAP P_up a configuration must keep to compete on P_com
P_UP_FLOOR = -0.01
#: the rule that chose a row's configuration: the constraint held for at least one configuration …
MAX_P_COM = "max val mAP P_com s.t. val mAP P_up >= floor"
#: … or for none of them
CONSTRAINT_NOT_MET = "constraint not met: max val mAP P_up"
#: every ``selection_rule`` a trained row of the method tables may carry
SELECTION_RULES = (MAX_P_COM, CONSTRAINT_NOT_MET)
#: the rule as the reports state it
RULE_TEXT = (
    "each method's configuration (head × λ × its own temperature) is the one with the largest validation mAP P_com "
    "among those with validation mAP P_up ≥ {floor:g}; when none meets that, the one with the largest validation "
    "mAP P_up, marked *constraint not met*"
)


@dataclass(frozen=True)
class Scored:
    """One configuration's validation scores (None: undefined, e.g. a P_com whose denominator is not positive)."""

    val_p_com: float | None
    val_p_up: float | None


def _key(v: float | None) -> float:
    return -math.inf if v is None or math.isnan(v) else v


def select_configuration(scored: Sequence[Scored], p_up_floor: float = P_UP_FLOOR) -> tuple[int, str]:
    """The index of the chosen configuration in ``scored`` and the rule that chose it (:data:`SELECTION_RULES`).

    Ties keep the first configuration (the order the grid lists them in), so a rerun chooses the same one.
    """
    if not scored:
        raise ValueError("select_configuration needs at least one scored configuration")
    ok = [i for i, s in enumerate(scored) if s.val_p_up is not None and s.val_p_up >= p_up_floor]
    if ok:
        return max(ok, key=lambda i: (_key(scored[i].val_p_com), -i)), MAX_P_COM
    return max(range(len(scored)), key=lambda i: (_key(scored[i].val_p_up), -i)), CONSTRAINT_NOT_MET
