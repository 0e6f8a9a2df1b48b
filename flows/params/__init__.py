"""params.yaml's schema and what reads it: every default, the overrides, the key tags and digests, the
components' configs (model, training, index) built from it. The package's face is the schema
(:mod:`flows.params.schema`): ``from flows.params import Params, load_params``."""

from flows.params.schema import *  # noqa: F403
from flows.params.schema import __all__ as __all__
