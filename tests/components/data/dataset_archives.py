"""Builders for small dataset files in their real on-disk formats, and a local HTTP server (no network)."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import pickle
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import ClassVar

import numpy as np


def md5_of(path: Path) -> str:
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


def leftovers(folder: Path) -> list[str]:
    """Temp files / folders left in ``folder``: ours (``.<name>.<hex>.tmp``) and pooch's downloads (``tmp<random>``)."""
    return sorted(p.name for p in Path(folder).iterdir() if p.name.endswith(".tmp") or p.name.startswith("tmp"))


# --------------------------------------------------------------------------- HTTP


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@contextmanager
def serve_dir(directory: Path, fail_first: int = 0) -> Iterator[tuple[str, list[str]]]:
    """Serve ``directory`` on 127.0.0.1 (random port); yields (base URL ending in '/', list of requested paths).

    The first ``fail_first`` requests are answered ``503 Service Unavailable`` (a server having a bad moment).
    """
    requests: list[str] = []

    class Handler(_Handler):
        def do_GET(self):
            requests.append(self.path)
            if len(requests) <= fail_first:
                self.send_error(503)
                return
            super().do_GET()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def closed_port_url(name: str = "file.bin") -> str:
    """A URL on a localhost port nobody listens on (connection refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/{name}"


# --------------------------------------------------------------------------- IDX (MNIST format)


def idx_bytes(array: np.ndarray, magic: int) -> bytes:
    a = np.ascontiguousarray(array, dtype=np.uint8)
    return struct.pack(">I", magic) + struct.pack(f">{a.ndim}I", *a.shape) + a.tobytes()


def write_idx_gz(path: Path, array: np.ndarray, magic: int) -> bytes:
    """Write a gzip'd IDX file; returns the decompressed bytes."""
    raw = idx_bytes(array, magic)
    path.write_bytes(gzip.compress(raw, mtime=0))
    return raw


# --------------------------------------------------------------------------- Python 2 pickles (CIFAR)


class Py2Pickler(pickle._Pickler):  # type: ignore[name-defined]
    """Writes str/bytes as Python 2 ``str`` (BINSTRING) opcodes, like cPickle did for the CIFAR files."""

    dispatch: ClassVar[dict] = dict(pickle._Pickler.dispatch)  # type: ignore[attr-defined]

    def save_bytes(self, obj):
        n = len(obj)
        if n < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([n]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", n) + obj)
        self.memoize(obj)

    def save_str(self, obj):
        self.save_bytes(obj.encode("latin1"))

    dispatch[bytes] = save_bytes
    dispatch[str] = save_str


def py2_pickle(obj) -> bytes:
    f = io.BytesIO()
    Py2Pickler(f, protocol=2).dump(obj)
    # Python 2's numpy pickled arrays through numpy.core.multiarray
    return f.getvalue().replace(b"cnumpy._core.multiarray\n_reconstruct\n", b"cnumpy.core.multiarray\n_reconstruct\n")


def add_tar_member(tar, name: str, data: bytes) -> None:
    import tarfile

    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))
