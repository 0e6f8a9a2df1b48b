"""MLflow pyfunc model of a generation, logged as *models from code*.

MLflow executes this file to load the model (nothing is cloudpickled); the
weights are the generation's checkpoint artifact, loaded with
``weights_only=True``. ``predict`` takes uint8 images (N, H, W, C) and returns
retrieval vectors (N, D) float32: unit vectors (Euclidean) or hyperboloid
points, time first (Lorentz) — the same vectors the FAISS index holds.
"""

from __future__ import annotations

import mlflow
import numpy as np


class BctflowEmbedder(mlflow.pyfunc.PythonModel):
    def load_context(self, context):  # untyped: MLflow validates type hints on PythonModel methods
        from components.models.checkpoint import load_model

        self.model = load_model(context.artifacts["checkpoint"])

    def predict(self, context, model_input, params=None):
        from components.training.embed import embed_images, retrieval_vectors

        images = np.asarray(model_input, dtype=np.uint8)
        emb = embed_images(self.model, images)
        return retrieval_vectors(
            emb, self.model.spec.geometry, float(self.model.curvature), self.model.spec.features
        ).astype(np.float32)


mlflow.models.set_model(BctflowEmbedder())
