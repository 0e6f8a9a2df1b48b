"""docs/openapi.json, generated: the service's app built without a workspace (:func:`offline_app`: its manager never
loads, no request is answered) and its ``app.openapi()`` written. tests/flows/serving/test_openapi.py checks the
committed file is what this writes and that it describes exactly the routes the app answers. A changed route or body
is ``python -m flows.serving.openapi_doc`` (run from the repository root) away from the document.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from flows.params import params_from_dict
from flows.runtime.workspace import Workspace
from flows.serving.app import create_app
from flows.serving.metrics import ServeMetrics
from flows.serving.swap import SwapManager

__all__ = ["DOC", "offline_app", "openapi_json", "write_doc"]

#: the document, relative to the repository root
DOC = Path("docs") / "openapi.json"


def offline_app(token: str | None = None) -> FastAPI:
    """The app ``bctflow serve`` runs (``token``: its bearer token), over a manager that is never loaded: the default
    params and a workspace that is never read (no version is loaded; the app's lifespan never runs)."""
    manager = SwapManager(
        Workspace(Path("unread")), params_from_dict({}, "default params"), ServeMetrics(), device="cpu"
    )
    manager.close()  # its loader thread pool never ran anything
    return create_app(manager, token=token)


def openapi_json() -> str:
    """The document as the committed file holds it: indented JSON, keys in the order FastAPI writes them."""
    document: dict[str, Any] = offline_app().openapi()
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def write_doc(root: Path = Path()) -> Path:
    """Write the document under ``root`` (the repository root); returns its path."""
    path = root / DOC
    path.write_text(openapi_json())
    return path


if __name__ == "__main__":
    print(f"wrote {write_doc()}")
