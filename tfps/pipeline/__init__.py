"""The embedding pipeline: the lookups of batch t + depth run while batch t trains
(tfps.pipeline.stage); PipelineDataset is the user's switch, enable() the runners'."""
from tfps.pipeline.dataset import PipelineDataset
from tfps.pipeline.settings import depth, disable, enable, enabled
from tfps.pipeline.stage import MAX_DEPTH, Pipeline

__all__ = ["MAX_DEPTH", "Pipeline", "PipelineDataset", "depth", "disable", "enable", "enabled"]
