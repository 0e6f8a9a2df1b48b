"""params.yaml's schema and what reads it: every default, the overrides, the key tags and digests, the
components' configs (model, training, index) built from it. The package's face is the schema
(:mod:`flows.params.schema`): ``from flows.params import Params, load_params``, and the components' configs built
from it (:mod:`flows.params.specs`, imported on first use: it imports torch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flows import lazy_face
from flows.params.schema import *  # noqa: F403
from flows.params.schema import __all__ as _SCHEMA

#: the configs built from the params, and the module that defines each (imported on first use)
_FACE = {"index_options": "specs", "model_spec_from_params": "specs", "train_config_from_params": "specs"}
__all__ = [*_SCHEMA, *sorted(_FACE)]
__getattr__, __dir__ = lazy_face(__name__, _FACE)

if TYPE_CHECKING:  # the face's names for type checkers (re-exported)
    from flows.params.specs import index_options as index_options
    from flows.params.specs import model_spec_from_params as model_spec_from_params
    from flows.params.specs import train_config_from_params as train_config_from_params
