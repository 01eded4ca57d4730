"""Models on tfps embeddings: DeepFM, Wide & Deep, DCN-v2, behind one model_fn (model.name)."""
from tfps.models.deepfm import deepfm_logits
from tfps.models.zoo import MODELS, model_fn

__all__ = ["MODELS", "deepfm_logits", "model_fn"]
