"""Training: one loop for every alignment method, device selection, embedding."""

from components.training.checkpoints import latest_checkpoint
from components.training.device import select_device
from components.training.embed import Embeddings, embed_images, embed_split, embed_stream, retrieval_vectors
from components.training.loop import (
    TrainConfig,
    TrainingDivergedError,
    TrainResult,
    train_model,
)

__all__ = [
    "Embeddings",
    "TrainConfig",
    "TrainResult",
    "TrainingDivergedError",
    "embed_images",
    "embed_split",
    "embed_stream",
    "latest_checkpoint",
    "retrieval_vectors",
    "select_device",
    "train_model",
]
