"""Re-rendering a committed table (benchmarks/rerender.py): a context written before it recorded which roles the train
criterion holds takes them from its profile."""

from __future__ import annotations

from benchmarks.profile import CRITERION_ROLES
from benchmarks.rerender import _with_criterion_roles


def test_a_context_without_criterion_roles_takes_its_profiles_and_a_recorded_one_is_kept():
    # cpu_budget holds only the old model to the criterion; cpu_equal holds the old model and φ*
    assert _with_criterion_roles({"profile": "cpu_budget", "train_criterion": 0.8})["criterion_roles"] == ["old"]
    assert _with_criterion_roles({"profile": "cpu_equal", "train_criterion": 0.8})["criterion_roles"] == [
        "old",
        "reference",
    ]
    gone = {"profile": "a_profile_no_longer_here", "train_criterion": 0.8}
    assert _with_criterion_roles(gone)["criterion_roles"] == list(CRITERION_ROLES)
    recorded = {"profile": "cpu_budget", "train_criterion": 0.8, "criterion_roles": ["old", "reference"]}
    assert _with_criterion_roles(recorded) is recorded
    assert _with_criterion_roles({"profile": "cpu_budget", "train_criterion": None}) == {
        "profile": "cpu_budget",
        "train_criterion": None,
    }
