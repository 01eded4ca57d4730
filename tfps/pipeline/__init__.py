"""The embedding pipeline: the lookups of batch t + depth run while batch t trains
(tfps.pipeline.stage). PipelineDataset is the switch: an input_fn returns one, and tfps's runners
wrap their input in one when the config's pipeline.enabled is on."""
from tfps.pipeline.dataset import PipelineDataset
from tfps.pipeline.stage import MAX_DEPTH, Pipeline

__all__ = ["MAX_DEPTH", "Pipeline", "PipelineDataset"]
