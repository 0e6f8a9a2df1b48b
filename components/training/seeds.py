"""One initialisation seed per model: the run's seed, the generation and the model's role.

Seeding every model with the run's ``train.seed`` alone gives the old model, its successor and the independent
reference φ* the same initial weights: a free head start towards compatibility for every method, and a φ* that is
not independent of φ_old. :func:`init_seed` mixes the three with NumPy's ``SeedSequence`` (a hash built for
exactly this: streams of nearby keys are statistically independent), so every (seed, generation, role) starts from
its own weights while a rerun of the same run starts from the same ones.
"""

from __future__ import annotations

import numpy as np

__all__ = ["INIT_ROLES", "init_seed"]

#: the roles a model plays in a generation: the generation's own model, or its independently trained reference φ*
INIT_ROLES = ("model", "reference")


def init_seed(seed: int, generation: int, role: str = "model") -> int:
    """The seed of the model playing ``role`` in ``generation`` of a run seeded ``seed`` (a 31-bit int)."""
    if role not in INIT_ROLES:
        raise ValueError(f"unknown model role {role!r}; use one of {INIT_ROLES}")
    state = np.random.SeedSequence([int(seed) % 2**32, int(generation), INIT_ROLES.index(role)]).generate_state(1)
    return int(state[0] >> 1)
