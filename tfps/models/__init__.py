"""Models on tfps embeddings."""
from tfps.models.deepfm import deepfm_logits, model_fn as deepfm_model_fn

__all__ = ["deepfm_logits", "deepfm_model_fn"]
