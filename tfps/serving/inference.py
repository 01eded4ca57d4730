"""Classify, Regress and MultiInference (TF Serving's inference over tf.train.Examples), shared by
the gRPC and REST APIs: the examples of a request, the signature that answers it, its results.

A `classification` signature (method tensorflow/serving/classify) takes serialized Examples under
"inputs" and gives "scores" float [B, C] and/or "classes" string [B, C]; a `regression` signature
(tensorflow/serving/regress) gives "outputs" float [B] or [B, 1] (what tfps export writes:
tfps.runner.serving_inputs.example_signatures)."""
import base64

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import classification_pb2, regression_pb2

from tfps.serving.errors import ServingError
from tfps.serving.servable import DEFAULT_SIGNATURE, EXAMPLE_METHODS

CLASSIFY, REGRESS = EXAMPLE_METHODS
# the signature a request without a signature_name gets: serving_default if it is of the method
# (TF Serving's rule), else the one tfps export writes for the method
FALLBACK = {CLASSIFY: "classification", REGRESS: "regression"}
_WORD = {CLASSIFY: "classify", REGRESS: "regress"}


def serialized_examples(request_input):
    """A tensorflow.serving.Input -> string [B] of serialized Examples. With a context, each row is
    the context with the example's own features over it (protobuf's merge of the concatenated
    bytes: TF Serving's rule)."""
    kind = request_input.WhichOneof("kind")
    if kind == "example_list":
        rows = [e.SerializeToString() for e in request_input.example_list.examples]
    elif kind == "example_list_with_context":
        listed = request_input.example_list_with_context
        context = listed.context.SerializeToString()
        rows = [context + e.SerializeToString() for e in listed.examples]
    else:
        raise ServingError("INVALID_ARGUMENT", "the request's input is empty: give input.example_list or "
                           "input.example_list_with_context")
    return _rows(rows)


def _rows(rows):
    if not rows:
        raise ServingError("INVALID_ARGUMENT", "the request has no examples")
    out = np.empty(len(rows), dtype=object)
    out[:] = rows
    return out


def _feature(name, value):
    """A JSON feature value (a value or a list of them) -> tf.train.Feature, typed as TF Serving's
    REST API types it: strings and {"b64": ...} are bytes, numbers all integers int64, else float.
    An empty list is a feature of no kind (an empty list of any type)."""
    values = value if isinstance(value, list) else [value]
    if not values:
        return tf.train.Feature()
    if all(isinstance(v, str) or (isinstance(v, dict) and set(v) == {"b64"}) for v in values):
        try:
            data = [base64.b64decode(v["b64"], validate=True) if isinstance(v, dict) else v.encode()
                    for v in values]
        except (ValueError, TypeError):
            raise ServingError("INVALID_ARGUMENT", f"feature {name!r}: a b64 value is not base64") from None
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=data))
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        if all(isinstance(v, int) for v in values):
            if any(not -2**63 <= v < 2**63 for v in values):
                raise ServingError("INVALID_ARGUMENT", f"feature {name!r} holds an integer out of int64's range")
            return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    raise ServingError("INVALID_ARGUMENT", f"feature {name!r} must be a number, a string, {{\"b64\": ...}} or a list "
                       f"of one of those kinds, got {str(value)[:100]}")


def _example(row, what):
    if not isinstance(row, dict):
        raise ServingError("INVALID_ARGUMENT", f"{what} must be an object {{feature: value}}, got "
                           f"{type(row).__name__}")
    return tf.train.Example(features=tf.train.Features(feature={k: _feature(k, v) for k, v in row.items()}))


def json_examples(body):
    """The "examples" (and "context") of a REST :classify or :regress body -> string [B]."""
    if not isinstance(body, dict) or not isinstance(body.get("examples"), list):
        raise ServingError("INVALID_ARGUMENT", 'the request body must be a JSON object with "examples": a list of '
                           'objects {feature: value}')
    context = _example(body["context"], '"context"').SerializeToString() if "context" in body else b""
    return _rows([context + _example(row, f"example {i}").SerializeToString()
                  for i, row in enumerate(body["examples"])])


def signature_for(servable, name, method):
    """The signature of `method` (CLASSIFY or REGRESS) that a request names (or the default);
    INVALID_ARGUMENT when it is of another method or does not take serialized Examples."""
    if not name:
        default = servable.signatures.get(DEFAULT_SIGNATURE)
        name = DEFAULT_SIGNATURE if default is not None and default.proto.method_name == method else FALLBACK[method]
    signature = servable.signature(name)
    if signature.proto.method_name != method:
        raise ServingError("INVALID_ARGUMENT", f"signature {name!r} is a {signature.proto.method_name or 'predict'} "
                           f"signature; {_WORD[method]} needs one of method {method} (version {servable.version} has "
                           f"{sorted(servable.signatures)})")
    if set(signature.inputs) != {"inputs"} or signature.inputs["inputs"][1] != tf.string:
        raise ServingError("INVALID_ARGUMENT", f"signature {name!r} does not take serialized Examples under "
                           f"'inputs' (it takes {sorted(signature.inputs)})")
    return signature


def classify(server, servable, name, examples):
    """(signature name, labels string [B, C] or None, scores float32 [B, C] or None)."""
    signature = signature_for(servable, name, CLASSIFY)
    wanted = [k for k in ("classes", "scores") if k in signature.outputs]
    if not wanted:
        raise ServingError("INVALID_ARGUMENT", f"classification signature {signature.name!r} has neither 'classes' "
                           f"nor 'scores' (it has {sorted(signature.outputs)})")
    out = server.execute(servable, signature, {"inputs": examples}, wanted)
    rows = len(examples)
    classes, scores = out.get("classes"), out.get("scores")
    for key, value in (("classes", classes), ("scores", scores)):
        if value is not None and (value.ndim != 2 or value.shape[0] != rows):
            raise ServingError("INTERNAL", f"signature {signature.name!r}: {key} has shape {list(value.shape)}, "
                               f"expected [{rows}, classes]")
    if classes is not None and scores is not None and classes.shape != scores.shape:
        raise ServingError("INTERNAL", f"signature {signature.name!r}: classes {list(classes.shape)} and scores "
                           f"{list(scores.shape)} differ in shape")
    return signature.name, classes, scores


def regress(server, servable, name, examples):
    """(signature name, values float32 [B])."""
    signature = signature_for(servable, name, REGRESS)
    if "outputs" not in signature.outputs:
        raise ServingError("INVALID_ARGUMENT", f"regression signature {signature.name!r} has no 'outputs' (it has "
                           f"{sorted(signature.outputs)})")
    values = server.execute(servable, signature, {"inputs": examples}, ["outputs"])["outputs"]
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.shape != (len(examples),):
        raise ServingError("INTERNAL", f"signature {signature.name!r}: outputs has shape {list(values.shape)}, "
                           f"expected [{len(examples)}] or [{len(examples)}, 1]")
    return signature.name, values


def classification_result(classes, scores):
    result = classification_pb2.ClassificationResult()
    rows, width = (classes if classes is not None else scores).shape
    for i in range(rows):
        row = result.classifications.add()
        for j in range(width):
            c = row.classes.add()
            if classes is not None:
                c.label = classes[i, j].decode() if isinstance(classes[i, j], bytes) else str(classes[i, j])
            if scores is not None:
                c.score = float(scores[i, j])
    return result


def regression_result(values):
    result = regression_pb2.RegressionResult()
    for v in values:
        result.regressions.add().value = float(v)
    return result


def classify_json(classes, scores):
    """TF Serving's REST :classify results: per example [[label, score], ...]."""
    rows, width = (classes if classes is not None else scores).shape
    label = (lambda i, j: classes[i, j].decode()) if classes is not None else (lambda i, j: "")
    score = (lambda i, j: float(scores[i, j])) if scores is not None else (lambda i, j: 0.0)
    return [[[label(i, j), score(i, j)] for j in range(width)] for i in range(rows)]
