"""The inputs of a serving graph: raw-tensor placeholders of a schema (serving_inputs), serialized
tf.train.Examples parsed into them with the classification and regression signatures over them
(example_serving_inputs, example_signatures), and MTGR's padded sequences. Used by both export
formats (tfps.runner.export, tfps.runner.stock_export)."""
import dataclasses
import typing

import tensorflow as tf
from tensorflow.python.saved_model import model_utils

from tfps.data import sequences
from tfps.data.tfrecord import example_features
from tfps.models.spec import ModeKeys
from tfps.runner.graph import build


def serving_inputs(schema):
    """Raw-tensor serving inputs of a schema: dense float32 [None, num_dense], ids int64
    [None, F], each list feature int64 [None, None] (-1 pads). Call in the export's graph."""
    inputs = {"ids": tf.compat.v1.placeholder(tf.int64, [None, len(schema.id_features)], name="ids")}
    if schema.num_dense:
        inputs["dense"] = tf.compat.v1.placeholder(tf.float32, [None, schema.num_dense], name="dense")
    for name in schema.list_features:
        inputs[name] = tf.compat.v1.placeholder(tf.int64, [None, None], name=name)
    return inputs


@dataclasses.dataclass(frozen=True)
class ServingInputs:
    """What the export's signatures take. features: {name: Tensor} the model reads (the
    `serving_default` signature feeds them); examples: string [None] of serialized tf.train.Examples
    that the features default to (the `classification` and `regression` signatures feed it), or None."""
    features: dict
    examples: typing.Optional[tf.Tensor] = None


EXAMPLES_INPUT = "input_example_tensor"   # the Examples placeholder's name (TF Estimator's)


def example_serving_inputs(schema, specs):
    """serving_inputs(schema) that default to the rows of serialized tf.train.Examples with these
    feature specs (tfps.data.tfrecord; what tfps convert writes). Feeding the raw tensors skips
    the parse (Predict); feeding only the Examples parses them, as the TFRecord reader does, into
    the same model inputs (Classify, Regress): one model graph, the same scores. Call in the
    export's graph."""
    examples = tf.compat.v1.placeholder(tf.string, [None], name=EXAMPLES_INPUT)
    parsed = example_features(examples, specs)
    shapes = {"ids": [None, len(schema.id_features)], "dense": [None, schema.num_dense],
              **{name: [None, None] for name in schema.list_features}}
    wanted = ["ids"] + (["dense"] if schema.num_dense else []) + list(schema.list_features)
    missing = [name for name in wanted if name not in parsed]
    if missing or parsed["ids"].shape[1] != len(schema.id_features) or \
            (schema.num_dense and parsed["dense"].shape[1] != schema.num_dense):
        raise ValueError(f"export: the example feature specs {specs} do not make the model's inputs "
                         f"(ids of {len(schema.id_features)}, dense of {schema.num_dense}, lists "
                         f"{list(schema.list_features)})")
    features = {name: tf.compat.v1.placeholder_with_default(parsed[name], shapes[name], name=name) for name in wanted}
    return ServingInputs(features, examples)


def example_signatures(examples, predictions):
    """TF Serving's `classification` (classes "0" and "1", scores 1 - p and p) and `regression`
    (p) signatures over `examples`, from a binary model's probabilities p [B]; {} for a model
    without them."""
    if examples is None or "probabilities" not in (predictions or {}):
        return {}
    p = predictions["probabilities"]
    if p.shape.rank != 1:
        return {}
    with tf.compat.v1.name_scope("example_signatures"):
        scores = tf.stack([1.0 - p, p], axis=1, name="scores")
        classes = tf.tile(tf.constant([["0", "1"]]), [tf.shape(p)[0], 1], name="classes")
    return {"classification": tf.compat.v1.saved_model.classification_signature_def(examples, classes, scores),
            "regression": tf.compat.v1.saved_model.regression_signature_def(examples, p)}


def sequence_serving_inputs():
    """MTGR's serving inputs: each feature of tfps.data.sequences.SPEC but the label and the user,
    with a batch dimension; lists padded with 0 (what padded_batch does) to one length per request."""
    return {name: tf.compat.v1.placeholder(spec.dtype, [None] + spec.shape.as_list(), name=name)
            for name, spec in sequences.SPEC.items() if name not in ("label", "user")}


def serving_graph(model_fn, params, inputs_fn, settings):
    """The model_fn's PREDICT graph, built in the default graph over inputs_fn()'s placeholders
    ({name: Tensor}, or a ServingInputs: the Examples signatures too), and its signatures:
    (ModelSpec, Scaffold, {signature name: SignatureDef})."""
    inputs = inputs_fn()
    if not isinstance(inputs, ServingInputs):
        inputs = ServingInputs(inputs)
    spec, scaffold, _, _ = build(model_fn, params, ModeKeys.PREDICT, settings, features=dict(inputs.features))
    signatures = model_utils.build_all_signature_defs(inputs.features, spec.export_outputs, serving_only=True)
    signatures.update(example_signatures(inputs.examples, spec.predictions))
    return spec, scaffold, signatures
