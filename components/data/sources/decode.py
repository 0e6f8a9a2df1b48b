"""The one image decoding path of the file-backed sources (manifest, folder, WebDataset shards).

An image (a file, or the bytes of a tar member) is decoded with Pillow and converted to ``"L"`` (1 channel) or
``"RGB"`` (3 channels), or read as a ``.npy`` uint8 array (the raw format of :func:`write_webdataset`); it comes
out as a uint8 tensor (C, H, W). Resizing is bilinear with antialiasing in torch, the same arithmetic as
:func:`components.data.batches.resize_images`, so every source resizes alike.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from components.errors import DataError

if TYPE_CHECKING:
    from PIL import Image

__all__ = [
    "IMAGE_EXTENSIONS",
    "NPY_MAGIC",
    "check_channels",
    "decode_image",
    "fit_image",
    "image_info",
    "resize_uint8",
]

#: File name endings of the images the folder source picks up (any case).
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
#: The first bytes of a ``.npy`` file.
NPY_MAGIC = b"\x93NUMPY"
_GREY_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"})
_BAD_IMAGE = (OSError, ValueError, SyntaxError, EOFError)


def check_channels(channels: int | None) -> int | None:
    """``channels`` if it is None, 1 or 3; DataError otherwise."""
    if channels not in (None, 1, 3):
        raise DataError(f"channels must be 1 (grey) or 3 (RGB), got {channels!r}")
    return channels


def _bad(name: str, e: BaseException, hint: str) -> DataError:
    return DataError(f"cannot decode image {name} ({type(e).__name__}: {e}); {hint}")


def _read_npy(data: bytes, name: str, hint: str) -> np.ndarray:
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except _BAD_IMAGE as e:
        raise _bad(name, e, hint) from e
    if arr.dtype != np.uint8 or arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] not in (1, 3)):
        raise DataError(f"image {name} is a {arr.dtype} {arr.shape} array, not uint8 (H, W[, 1|3]); {hint}")
    return arr if arr.ndim == 3 else arr[:, :, None]


def _open(src: bytes | str | Path, name: str, hint: str, *, load: bool = True) -> Image.Image:
    """The image opened by Pillow; ``load``: its pixels decoded too (else only its header read, Pillow's lazy open)."""
    from PIL import Image

    try:
        im = Image.open(io.BytesIO(src) if isinstance(src, bytes | bytearray | memoryview) else src)
        if load:
            im.load()
        return im
    except (*_BAD_IMAGE, Image.DecompressionBombError) as e:
        raise _bad(name, e, hint) from e


def image_info(src: bytes | str | Path, *, name: str, hint: str) -> tuple[int, int, int]:
    """(channels, height, width) of an image: channels 1 for grey modes, 3 for everything else."""
    if isinstance(src, bytes | bytearray | memoryview) and bytes(src[:6]) == NPY_MAGIC:
        arr = _read_npy(bytes(src), name, hint)
        return arr.shape[2], arr.shape[0], arr.shape[1]
    with _open(src, name, hint) as im:
        return (1 if im.mode in _GREY_MODES else 3), im.height, im.width


def decode_image(
    src: bytes | str | Path,
    *,
    channels: int,
    name: str,
    hint: str,
    check: Callable[[int, int, int, bool], None] | None = None,
) -> Tensor:
    """The image at ``src`` (a path, or encoded bytes) as uint8 (C, H, W) with ``channels`` channels (1 or 3).

    ``name`` (the file, or shard and key) and ``hint`` (how to fix it) make up the DataError of an undecodable
    image. ``check(channels, height, width, is_npy)``, when given, sees what the file holds (channels as
    :func:`image_info` counts them) once its header is read and before its pixels are decoded, and may raise to
    refuse it (a query service's size limit): one open of the file, not one for the header and one for the pixels.
    """
    if isinstance(src, bytes | bytearray | memoryview) and bytes(src[:6]) == NPY_MAGIC:
        arr = _read_npy(bytes(src), name, hint)
        if check is not None:
            check(arr.shape[2], arr.shape[0], arr.shape[1], True)
        if arr.shape[2] != channels:  # grey ↔ RGB like Pillow's L / RGB conversion
            if channels == 1:
                w = np.array([299, 587, 114], dtype=np.uint32)
                arr = ((arr.astype(np.uint32) @ w + 500) // 1000).astype(np.uint8)[:, :, None]
            else:
                arr = np.repeat(arr, 3, axis=2)
        return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))
    with _open(src, name, hint, load=check is None) as im:
        if check is not None:
            check(1 if im.mode in _GREY_MODES else 3, im.height, im.width, False)
        try:
            arr = np.array(im.convert("L" if channels == 1 else "RGB"), dtype=np.uint8)  # a writable copy
        except _BAD_IMAGE as e:
            raise _bad(name, e, hint) from e
    arr = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
    return torch.from_numpy(np.ascontiguousarray(arr))


def resize_uint8(x: Tensor, size: int) -> Tensor:
    """(B, C, H, W) uint8 → (B, C, size, size) uint8: bilinear, antialiased, rounded (unchanged if already so)."""
    if x.shape[-2:] == (size, size):
        return x
    out = F.interpolate(x.float(), size=(size, size), mode="bilinear", align_corners=False, antialias=True)
    return out.round_().clamp_(0, 255).to(torch.uint8)


def fit_image(img: Tensor, *, image_size: int | None, native_hw: tuple[int, int] | None, name: str) -> Tensor:
    """(C, H, W) uint8 resized to ``image_size``, or checked against the source's native (H, W) when None."""
    if image_size is not None:
        return resize_uint8(img[None], image_size)[0]
    if native_hw is not None and tuple(img.shape[1:]) != tuple(native_hw):
        h, w = native_hw
        raise DataError(
            f"image {name} is {img.shape[2]}×{img.shape[1]} pixels but the source's first image is {w}×{h}: "
            "images of different sizes cannot be batched at their native size; pass image_size=<pixels> "
            "to loader() to resize every image"
        )
    return img
