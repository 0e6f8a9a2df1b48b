"""Models: timm backbones, Euclidean / Lorentz heads, classifiers, checkpoints."""

from components.models.checkpoint import load_model, save_model
from components.models.encoder import EmbeddingModel, ModelOutput, build_meta_model, build_model
from components.models.spec import ModelSpec

__all__ = ["EmbeddingModel", "ModelOutput", "ModelSpec", "build_meta_model", "build_model", "load_model", "save_model"]
