"""The models a config names (model.name) and the one model_fn that builds any of them.

    MODELS[name] = (logits(rows, dense, model), extra row columns)
deepfm and wdl keep each feature's first-order weight in its row (width dim + 1); dcn_v2 does not.
"""
from tfps.data.schema import Schema
from tfps.embedding.model_graph import ModelGraph
from tfps.models.common import dense_input, embed_inputs, embedding_options, model_spec, hashing_embed_inputs
from tfps.models.dcn import dcn_v2
from tfps.models.deepfm import deepfm
from tfps.models.mtgr import mtgr_model_fn
from tfps.models.spec import ModeKeys
from tfps.models.wdl import wdl

MODELS = {"deepfm": (deepfm, 1), "wdl": (wdl, 1), "dcn_v2": (dcn_v2, 0)}


def model_fn(features, labels, mode, params, model_graph=None):
    """tfps model_fn (returns a tfps.models.spec.ModelSpec; tfps.estimator adapts it). params:
    the JobConfig's `model` and `train` sections as dicts and 'schema' (tfps.data.schema.Schema.to_params() of the data source).
    model_graph: the tfps.embedding.ModelGraph the runner hands down (None, as under
    tf.estimator: the default graph's)."""
    m, schema = params["model"], Schema.from_params(params["schema"])
    model_graph = model_graph or ModelGraph.of()
    if m["name"] == "mtgr":
        return mtgr_model_fn(features, labels, mode, params, model_graph=model_graph)
    logits_of, extra = MODELS[m["name"]]
    training = mode == ModeKeys.TRAIN
    if m["hashing_trick"]:
        rows = hashing_embed_inputs(features, schema, m["embedding_dim"] + extra, m["hashing_buckets"], m["num_shards"],
                                  m["initializer_stddev"])
    else:
        rows = embed_inputs(features, schema, m["embedding_dim"] + extra, embedding_options(m),
                            m["initializer_stddev"], insert=training, model_graph=model_graph)
    logits = logits_of(rows, dense_input(features, schema), m)
    return model_spec(mode, logits, labels, features, schema, params["train"], hashing_trick=m["hashing_trick"],
                      model_graph=model_graph)
