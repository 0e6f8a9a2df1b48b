"""create_source: every kind by name, and the errors of a wrong kind, path or option."""

from __future__ import annotations

import numpy as np
import pytest

from components.data.sources import (
    ImageFolderSource,
    ManifestSource,
    WebDatasetSource,
    create_source,
    list_sources,
    write_manifest,
    write_webdataset,
)
from components.errors import DataError
from tests.components.data.sources.source_files import images, save_png


def test_every_kind_opens_what_was_written_there(tmp_path, monkeypatch):
    imgs = images(3)
    paths = [save_png(tmp_path / "flat" / f"{k}.png", imgs[k]) for k in range(3)]
    write_manifest(tmp_path / "m.csv", [str(p) for p in paths], labels=[0, 1, 0])
    written = write_webdataset(tmp_path / "wds", [(imgs, np.zeros(3, np.int64), np.arange(3))])
    write_webdataset(tmp_path / "other", [(imgs, np.array([0, 1, 1]), np.arange(3))])
    assert list_sources() == ["folder", "manifest", "webdataset"]
    f = create_source("folder", tmp_path / "flat")
    assert isinstance(f, ImageFolderSource) and len(f) == 3 and not f.labelled  # images directly in the folder
    m = create_source("manifest", str(tmp_path / "m.csv"), name="mine", channels=3)
    assert isinstance(m, ManifestSource) and m.name == "mine" and m.channels == 3  # the options reach the source
    assert m.labels.tolist() == [0, 1, 0]
    monkeypatch.setenv("HOME", str(tmp_path))
    w = create_source("webdataset", "~/wds")  # a path from the user's home
    assert isinstance(w, WebDatasetSource) and w.path == tmp_path / "wds"
    assert w.ids.tolist() == [0, 1, 2] and w.labels.tolist() == [0, 0, 0]
    # the content the writer fingerprinted, and not another corpus's
    assert w.fingerprint() == written.fingerprint() != create_source("webdataset", tmp_path / "other").fingerprint()


def test_wrong_kind_path_or_option(tmp_path):
    with pytest.raises(DataError, match=r"unknown image source kind 'lmdb'; use one of \['folder', 'manifest'"):
        create_source("lmdb", tmp_path)
    with pytest.raises(DataError, match=r"manifest source path .*gone\.csv does not exist; point it at a \.parquet"):
        create_source("manifest", tmp_path / "gone.csv")
    save_png(tmp_path / "f" / "a.png", images(1)[0])
    with pytest.raises(DataError, match=r"folder source does not take option\(s\) \['colour'\]"):
        create_source("folder", tmp_path / "f", colour=True)
    with pytest.raises(DataError, match="channels must be 1 .grey. or 3 .RGB., got 2"):
        create_source("folder", tmp_path / "f", channels=2)
