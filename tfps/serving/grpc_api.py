"""TF Serving's gRPC API (tensorflow.serving.PredictionService and ModelService) over grpcio, with
the messages of the tensorflow-serving-api package: a stock PredictionServiceStub works unchanged."""
import functools
import math

import numpy as np
import tensorflow as tf
from google.protobuf import struct_pb2
from tensorflow_serving.apis import (classification_pb2, get_model_metadata_pb2, get_model_status_pb2,
                                     inference_pb2, model_service_pb2_grpc, predict_pb2, prediction_service_pb2_grpc,
                                     regression_pb2)

from tfps.serving import inference, tensors
from tfps.serving.errors import ServingError

_STATES = {"AVAILABLE": get_model_status_pb2.ModelVersionStatus.AVAILABLE,
           "END": get_model_status_pb2.ModelVersionStatus.END}


def requested_version(spec):
    """The version a ModelSpec asks for (None: the newest); labels are not supported."""
    if spec.WhichOneof("version_choice") == "version_label":
        raise ServingError("INVALID_ARGUMENT", f"version labels are not supported (got {spec.version_label!r}); "
                           f"ask for a version number")
    return spec.version.value if spec.HasField("version") else None


def to_arrays(protos, signature, max_bytes):
    """{alias: TensorProto} -> {alias: np.ndarray}. INVALID_ARGUMENT naming the input for a dtype
    other than the signature's (no silent casts), a shape with unknown dimensions, a malformed
    proto; RESOURCE_EXHAUSTED for a tensor larger than max_bytes once expanded (a proto may give
    one value for a whole shape)."""
    out = {}
    for alias, proto in protos.items():
        want = signature.enums.get(alias)
        if want is not None and proto.dtype != want:
            try:
                got = tf.dtypes.as_dtype(proto.dtype).name if proto.dtype else "an invalid dtype"
            except TypeError:
                got = f"dtype {proto.dtype}, which names no TensorFlow dtype"
            raise ServingError("INVALID_ARGUMENT", f"input {alias!r} is {got}; the signature expects "
                               f"{signature.inputs[alias][1].name}")
        shape = proto.tensor_shape
        dims = [d.size for d in shape.dim]
        if shape.unknown_rank or any(n < 0 for n in dims):
            raise ServingError("INVALID_ARGUMENT", f"input {alias!r}: a tensor's shape must be fully known, got "
                               f"{dims if not shape.unknown_rank else 'unknown rank'}")
        try:
            size = math.prod(dims) * tensors.itemsize(proto.dtype)
        except TypeError as e:   # an enum that names no dtype
            raise ServingError("INVALID_ARGUMENT", f"input {alias!r} is not a valid tensor: {e}") from None
        if size > max_bytes:
            raise ServingError("RESOURCE_EXHAUSTED", f"input {alias!r} of shape {dims} is {size} bytes; the server "
                               f"takes at most {max_bytes} (--max_request_bytes)")
        try:
            out[alias] = tensors.to_array(proto, dims)
        except (TypeError, ValueError, IndexError) as e:
            raise ServingError("INVALID_ARGUMENT", f"input {alias!r} is not a valid tensor: {e}") from None
    return out


def handled(method):
    """A servicer method counted in the server's requests in flight (refused with UNAVAILABLE
    once the server drains), its ServingErrors answered with their status."""
    @functools.wraps(method)
    def run(self, request, context):
        try:
            self._server.in_flight.enter()
        except ServingError as e:
            context.abort(e.grpc_code, e.message)
        try:
            return method(self, request, context)
        except ServingError as e:
            context.abort(e.grpc_code, e.message)
        finally:
            self._server.in_flight.leave()
    return run


def _spec(response_spec, spec, version, signature_name):
    response_spec.name = spec.name
    response_spec.version.value = version
    response_spec.signature_name = signature_name


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    """Predict, Classify, Regress, MultiInference and GetModelMetadata."""

    def __init__(self, server):
        self._server = server

    @handled
    def Predict(self, request, context):   # noqa: N802  (the service's method names)
        spec = request.model_spec
        with self._server.models.use(spec.name, requested_version(spec)) as servable:
            signature = servable.signature(spec.signature_name)
            inputs = signature.check(to_arrays(request.inputs, signature, self._server.max_request_bytes))
            outputs = self._server.execute(servable, signature, inputs, list(request.output_filter))
            response = predict_pb2.PredictResponse()
            response.model_spec.name = spec.name
            response.model_spec.version.value = servable.version
            response.model_spec.signature_name = signature.name
            for alias, value in outputs.items():
                tensors.fill(response.outputs[alias], value)
            return response

    def _on_examples(self, request, method, response, result):
        """Classify's and Regress's shared path: `method` (inference.classify or .regress) on the
        request's tf.Examples; result(*what it returns but the signature's name) -> the result proto."""
        spec = request.model_spec
        examples = inference.serialized_examples(request.input)
        with self._server.models.use(spec.name, requested_version(spec)) as servable:
            name, *values = method(self._server, servable, spec.signature_name, examples)
            _spec(response.model_spec, spec, servable.version, name)
            response.result.CopyFrom(result(*values))
            return response

    @handled
    def Classify(self, request, context):   # noqa: N802
        return self._on_examples(request, inference.classify, classification_pb2.ClassificationResponse(),
                                 inference.classification_result)

    @handled
    def Regress(self, request, context):   # noqa: N802
        return self._on_examples(request, inference.regress, regression_pb2.RegressionResponse(),
                                 inference.regression_result)

    @handled
    def MultiInference(self, request, context):   # noqa: N802
        """Each task (one model and version for all, each its own signature, classify or regress)
        on the same examples."""
        tasks = list(request.tasks)
        if not tasks:
            raise ServingError("INVALID_ARGUMENT", "MultiInference needs at least one task")
        first = tasks[0].model_spec
        for i, task in enumerate(tasks):
            if task.model_spec.name != first.name or requested_version(task.model_spec) != requested_version(first):
                raise ServingError("INVALID_ARGUMENT", f"every task must name the same model and version; task 0 "
                                   f"names {first.name!r} version {requested_version(first)}, task {i} "
                                   f"{task.model_spec.name!r} version {requested_version(task.model_spec)}")
            if task.method_name not in (inference.CLASSIFY, inference.REGRESS):
                raise ServingError("INVALID_ARGUMENT", f"task method_name {task.method_name!r}: MultiInference "
                                   f"runs {inference.CLASSIFY} or {inference.REGRESS}")
        names = [t.model_spec.signature_name for t in tasks]
        if len(set(names)) != len(names):
            raise ServingError("INVALID_ARGUMENT", f"the tasks' signature names {names} must differ")
        examples = inference.serialized_examples(request.input)
        with self._server.models.use(first.name, requested_version(first)) as servable:
            response = inference_pb2.MultiInferenceResponse()
            for task in tasks:
                result = response.results.add()
                if task.method_name == inference.CLASSIFY:
                    name, classes, scores = inference.classify(self._server, servable, task.model_spec.signature_name,
                                                               examples)
                    result.classification_result.CopyFrom(inference.classification_result(classes, scores))
                else:
                    name, values = inference.regress(self._server, servable, task.model_spec.signature_name, examples)
                    result.regression_result.CopyFrom(inference.regression_result(values))
                _spec(result.model_spec, task.model_spec, servable.version, name)
            return response

    @handled
    def GetModelMetadata(self, request, context):   # noqa: N802
        unknown = [f for f in request.metadata_field if f != "signature_def"]
        if unknown or not request.metadata_field:
            raise ServingError("INVALID_ARGUMENT", f"metadata_field must be ['signature_def'], got "
                               f"{list(request.metadata_field)}")
        spec = request.model_spec
        with self._server.models.use(spec.name, requested_version(spec)) as servable:
            response = get_model_metadata_pb2.GetModelMetadataResponse()
            response.model_spec.name = spec.name
            response.model_spec.version.value = servable.version
            signatures = get_model_metadata_pb2.SignatureDefMap()
            for name, signature in servable.signatures.items():
                signatures.signature_def[name].CopyFrom(signature.proto)
            response.metadata["signature_def"].Pack(signatures)
            if servable.state():   # the model's fingerprint and the step of the state served
                state = struct_pb2.Struct()
                state.update(servable.state())
                response.metadata["tfps_state"].Pack(state)
            return response


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
    """GetModelStatus (HandleReloadConfigRequest answers UNIMPLEMENTED)."""

    def __init__(self, server):
        self._server = server

    @handled
    def GetModelStatus(self, request, context):   # noqa: N802
        spec = request.model_spec
        response = get_model_status_pb2.GetModelStatusResponse()
        for version, state, error in self._server.models.status(spec.name, requested_version(spec)):
            status = response.model_version_status.add()
            status.version, status.state = version, _STATES[state]
            status.status.error_code = 0 if not error else 2   # tensorflow.error.Code OK / UNKNOWN
            status.status.error_message = error
        return response


def add_services(grpc_server, server):
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(PredictionService(server), grpc_server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(server), grpc_server)
