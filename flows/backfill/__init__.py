"""A backfill: its flow, plan, forecast, re-embedding, gallery transform, publication and switch, the
gallery rollback, the backfill rules, its chunks on a Dask cluster, and the capacity plan of a gallery of N items."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flows import lazy_face

#: the package's public face: each name and the module that defines it (imported on first use)
_FACE = {
    "backfill": "flow",
    "BackfillPlan": "plan",
    "backfill_costs": "capacity",
    "check_version": "rollback",
    "plan_backfill": "make",
    "start": "make",
    "new_corpus_items": "make",
    "reembed": "reembedding",
    "publish": "publishing",
    "switch": "publishing",
    "vetoed": "rules",
}
__all__ = sorted(_FACE)
__getattr__, __dir__ = lazy_face(__name__, _FACE)

if TYPE_CHECKING:  # the face's names for type checkers (re-exported)
    from flows.backfill.capacity import backfill_costs as backfill_costs
    from flows.backfill.flow import backfill as backfill
    from flows.backfill.make import new_corpus_items as new_corpus_items
    from flows.backfill.make import plan_backfill as plan_backfill
    from flows.backfill.make import start as start
    from flows.backfill.plan import BackfillPlan as BackfillPlan
    from flows.backfill.publishing import publish as publish
    from flows.backfill.publishing import switch as switch
    from flows.backfill.reembedding import reembed as reembed
    from flows.backfill.rollback import check_version as check_version
    from flows.backfill.rules import vetoed as vetoed
