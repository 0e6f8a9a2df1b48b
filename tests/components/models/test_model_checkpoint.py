"""Model checkpoints (components/models/checkpoint.py): round trip, mismatches, unsafe files."""

from __future__ import annotations

import logging
import pathlib
from dataclasses import MISSING, fields, replace

import pytest
import torch

from components.errors import CheckpointMismatchError
from components.models import ModelSpec, build_model, load_model, save_model
from components.models.checkpoint import (
    LATE_FIELDS,
    MODEL_FORMAT,
    load_torch_safe,
    read_spec,
    save_torch_atomic,
)
from components.models.spec import INERT_EUCLIDEAN_HEAD
from tests.helpers import tiny_spec


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    model = build_model(tiny_spec())
    model.train()
    with torch.no_grad():
        for _ in range(3):  # move BatchNorm running statistics away from their defaults
            model(torch.rand(8, 1, 8, 8))
    model.eval()
    path = tmp_path_factory.mktemp("ckpt") / "model.pt"
    save_model(model, path)
    return model, path


def test_round_trip_gives_identical_outputs(saved):
    model, path = saved
    loaded = load_model(path, expected=model.spec)
    assert loaded.spec == model.spec
    assert not loaded.training
    x = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = model(x), loaded(x)
    assert torch.equal(a.emb, b.emb) and torch.equal(a.z, b.z) and torch.equal(a.logits, b.logits)
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    # the file is a plain dict readable with weights_only=True
    obj = torch.load(path, weights_only=True)
    assert obj["format"] == MODEL_FORMAT and obj["metadata"] == model.spec.to_dict()


@pytest.mark.parametrize(
    "change, field",
    [
        ({"zeta": 1.2}, "zeta"),
        ({"class_order": (9, 1, 2, 3, 4, 5, 6, 7, 8, 0)}, "class_order"),
        ({"geometry": "euclidean"}, "geometry"),
        ({"curvature": 0.5}, "curvature"),
        ({"embed_dim": 32}, "embed_dim"),
    ],
)
def test_expected_spec_mismatch_names_the_field(saved, change, field):
    model, path = saved
    with pytest.raises(CheckpointMismatchError) as info:
        load_model(path, expected=replace(model.spec, **change))
    msg = str(info.value)
    assert field in msg
    assert str(path) in msg


def test_truncated_checkpoint_is_refused(saved, tmp_path):
    _, path = saved
    data = path.read_bytes()
    for cut in (len(data) // 2, 100):
        bad = tmp_path / f"cut_{cut}.pt"
        bad.write_bytes(data[:cut])
        with pytest.raises(CheckpointMismatchError, match="truncated"):
            load_model(bad)


def test_missing_and_foreign_files_are_refused(saved, tmp_path):
    model, _ = saved
    with pytest.raises(CheckpointMismatchError, match="does not exist"):
        load_model(tmp_path / "nope.pt")
    plain = tmp_path / "plain.pt"
    torch.save({"weights": torch.zeros(2)}, plain)
    with pytest.raises(CheckpointMismatchError, match="metadata"):
        load_model(plain)
    other_format = tmp_path / "other.pt"
    torch.save({"format": "something-else/1", "metadata": model.spec.to_dict(), "state_dict": {}}, other_format)
    with pytest.raises(CheckpointMismatchError, match="format"):
        load_model(other_format)


def test_weights_that_do_not_fit_the_metadata_are_refused(saved, tmp_path):
    model, _ = saved
    other = build_model(tiny_spec(embed_dim=8))
    path = tmp_path / "mixed.pt"
    save_torch_atomic(
        {"format": MODEL_FORMAT, "metadata": model.spec.to_dict(), "state_dict": other.state_dict()}, path
    )
    with pytest.raises(CheckpointMismatchError, match="damaged"):
        load_model(path)


class _Payload:
    """Unpickling this object calls Path.touch(marker): arbitrary code execution."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def test_pickle_payload_is_refused_and_not_executed(saved, tmp_path):
    model, _ = saved
    marker = tmp_path / "PWNED"
    evil = tmp_path / "evil.pt"
    torch.save(
        {
            "format": MODEL_FORMAT,
            "metadata": model.spec.to_dict(),
            "state_dict": model.state_dict(),
            "x": _Payload(marker),
        },
        evil,
    )
    assert not marker.exists()
    with pytest.raises(CheckpointMismatchError):
        load_model(evil)
    with pytest.raises(CheckpointMismatchError) as info:
        load_torch_safe(evil)
    assert not marker.exists()
    msg = str(info.value)  # says why, and never suggests the unsafe load torch's own message recommends
    assert "refused unread: unpickling them could run code from the file" in msg
    assert "weights_only" not in msg and "trust" not in msg
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"xyz" * 100)
    with pytest.raises(CheckpointMismatchError, match=r"not a file of tensors and plain values") as info:
        load_torch_safe(garbage)
    assert "weights_only" not in str(info.value)

    # control: the payload is real — an unsafe load would have run it
    control_marker = tmp_path / "CONTROL"
    control = tmp_path / "control.pt"
    torch.save({"x": _Payload(control_marker)}, control)
    torch.load(control, weights_only=False)
    assert control_marker.exists()


def test_save_is_atomic_and_leaves_no_temp_files(saved, tmp_path):
    model, _ = saved
    path = tmp_path / "sub" / "m.pt"
    save_model(model, path)
    save_model(model, path, extra={"note": "again"})
    assert sorted(p.name for p in path.parent.iterdir()) == ["m.pt"]
    assert torch.load(path, weights_only=True)["note"] == "again"


def test_the_mlr_logit_scale_is_saved_and_older_checkpoints_load_with_eq9(tmp_path):
    """model.mlr_scale travels in the checkpoint and rebuilds the classifier; metadata written before the field
    existed (no ``mlr_scale`` key) loads as s = 1, the published Eq. (9)."""
    torch.manual_seed(0)
    model = build_model(tiny_spec(mlr_scale=4.0)).eval()
    path = tmp_path / "model.pt"
    save_model(model, path)
    loaded = load_model(path)
    assert loaded.spec.mlr_scale == 4.0 and loaded.classifier.scale == 4.0
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(loaded(x).logits, model(x).logits)
    old_metadata = {k: v for k, v in tiny_spec().to_dict().items() if k != "mlr_scale"}
    assert read_spec({"metadata": old_metadata}).mlr_scale == 1.0


@pytest.mark.parametrize("name", sorted(LATE_FIELDS))
def test_every_late_field_reads_as_its_table_value_and_its_notice_is_one_line(name, caplog):
    """The table is the one place that says what a file written before a field existed reads as: the field has no
    default of its own, metadata without it reads as the table's value, and the notice (logged) is one line."""
    assert {f.name: f for f in fields(ModelSpec)}[name].default is MISSING
    old = {k: v for k, v in tiny_spec().to_dict().items() if k != name}
    with caplog.at_level(logging.DEBUG, logger="components.models.checkpoint"):
        assert getattr(read_spec({"metadata": old}, "old.pt"), name) == LATE_FIELDS[name].value
    notice = LATE_FIELDS[name].notice
    assert "\n" not in notice and name in notice
    assert caplog.messages == [f"checkpoint old.pt: {notice}"]


def test_a_model_is_loaded_into_uninitialised_tensors_and_one_with_tensors_its_file_lacks_is_built_whole(tmp_path):
    """Loading builds the model on the meta device and takes the file's tensors as its parameters (no memory is
    allocated and initialised only to be overwritten); a backbone with buffers its checkpoint does not hold (a Swin's
    non-persistent relative-position index) is built whole instead. Both answer as the model that was saved."""
    swin = {"img_size": 8, "patch_size": 2, "window_size": 2, "embed_dim": 8, "depths": (1, 1), "num_heads": (1, 1)}
    for spec in (
        tiny_spec(),
        replace(tiny_spec(), backbone="swin_tiny_patch4_window7_224", backbone_kwargs=swin, small_stem=False),
    ):
        torch.manual_seed(0)
        model = build_model(spec).eval()
        save_model(model, tmp_path / "m.pt")
        loaded = load_model(tmp_path / "m.pt")
        assert not any(t.is_meta for t in (*loaded.parameters(), *loaded.buffers()))
        assert all(isinstance(p, torch.nn.Parameter) and p.requires_grad for p in loaded.parameters())
        x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            assert torch.equal(loaded(x).emb, model(x).emb)


def test_a_lorentz_model_holds_one_euclidean_head_whatever_it_is_given_and_a_euclidean_one_keeps_its_own(tmp_path):
    """The Euclidean head's fields are never read by a Lorentz model (its classifier is the Lorentz MLR): every Lorentz
    spec holds INERT_EUCLIDEAN_HEAD there, so a checkpoint written with other values loads against today's request;
    a Euclidean model keeps what it is given, and a request for another head is refused by name."""
    given = {"classifier": "linear", "bn_neck": False, "classifier_scale": 1.0}
    lorentz = tiny_spec(**given)
    assert lorentz == tiny_spec(**INERT_EUCLIDEAN_HEAD)
    assert {k: getattr(lorentz, k) for k in INERT_EUCLIDEAN_HEAD} == INERT_EUCLIDEAN_HEAD
    path = tmp_path / "lorentz.pt"
    save_model(build_model(lorentz), path)
    obj = torch.load(path, weights_only=True)
    obj["metadata"].update(given)  # as a file written before the fields were pinned could say
    torch.save(obj, path)
    assert load_model(path, expected=lorentz).spec == lorentz

    euclidean = tiny_spec(geometry="euclidean", zeta=None, **given)
    assert {k: getattr(euclidean, k) for k in INERT_EUCLIDEAN_HEAD} == given
    save_model(build_model(euclidean), tmp_path / "euclidean.pt")
    with pytest.raises(CheckpointMismatchError, match="classifier: checkpoint has 'linear', requested 'cosine'"):
        load_model(tmp_path / "euclidean.pt", expected=replace(euclidean, classifier="cosine"))
