"""flows/params/specs.py: params as the components' configs."""

from __future__ import annotations

import pytest

from components.errors import ConfigError
from flows.params import Params, apply_overrides
from flows.params.specs import RADIAL_LABEL_SMOOTHING, label_smoothing, train_config_from_params


def test_auto_label_smoothing_is_the_lorentz_heads_and_none_for_a_euclidean_model():
    p = Params()
    assert p.train.label_smoothing == "auto"
    assert label_smoothing(p, "lorentz") == RADIAL_LABEL_SMOOTHING == 0.3
    assert label_smoothing(p, "euclidean") == 0.0
    # the config follows the geometry it is asked for, else model.geometry's
    assert train_config_from_params(p, geometry="euclidean").label_smoothing == 0.0
    assert train_config_from_params(p).label_smoothing == 0.3
    assert train_config_from_params(apply_overrides(p, ["model.geometry=euclidean"])).label_smoothing == 0.0


def test_a_given_label_smoothing_holds_in_either_geometry_and_one_out_of_range_is_refused():
    p = apply_overrides(Params(), ["train.label_smoothing=0.1"])
    assert label_smoothing(p, "lorentz") == label_smoothing(p, "euclidean") == 0.1
    assert label_smoothing(apply_overrides(Params(), ["train.label_smoothing=0"]), "lorentz") == 0.0
    for bad in ("1.0", "-0.1"):
        with pytest.raises(ConfigError, match=r"train.label_smoothing.*must be in \[0, 1\) or auto"):
            apply_overrides(Params(), [f"train.label_smoothing={bad}"])


def test_the_shipped_defaults_are_bct_at_lambda_3_on_the_tanh_s4_lorentz_head():
    p = Params()
    assert (p.alignment.method, p.alignment.weight) == ("bct", 3.0)
    assert (p.model.geometry, p.geometry.radial, p.model.mlr_scale) == ("lorentz", "tanh", 4.0)
    assert (p.model.classifier, p.model.bn_neck, p.model.classifier_scale) == ("linear", False, 1.0)
