"""TF Serving's gRPC API (tensorflow.serving.PredictionService and ModelService) over grpcio, with
the messages of the tensorflow-serving-api package: a stock PredictionServiceStub works unchanged."""
import numpy as np
import tensorflow as tf
from google.protobuf import struct_pb2
from tensorflow_serving.apis import (get_model_metadata_pb2, get_model_status_pb2, model_service_pb2_grpc,
                                     predict_pb2, prediction_service_pb2_grpc)

from tfps.serving.errors import ServingError

_STATES = {"AVAILABLE": get_model_status_pb2.ModelVersionStatus.AVAILABLE,
           "END": get_model_status_pb2.ModelVersionStatus.END}


def requested_version(spec):
    """The version a ModelSpec asks for (None: the newest); labels are not supported."""
    if spec.WhichOneof("version_choice") == "version_label":
        raise ServingError("INVALID_ARGUMENT", f"version labels are not supported (got {spec.version_label!r}); "
                           f"ask for a version number")
    return spec.version.value if spec.HasField("version") else None


def to_arrays(tensors, signature, max_bytes):
    """{alias: TensorProto} -> {alias: np.ndarray}. INVALID_ARGUMENT naming the input for a dtype
    other than the signature's (no silent casts), a shape with unknown dimensions, a malformed
    proto; RESOURCE_EXHAUSTED for a tensor larger than max_bytes once expanded (a proto may give
    one value for a whole shape)."""
    out = {}
    for alias, proto in tensors.items():
        if alias in signature.inputs:
            want = signature.inputs[alias][1]
            if proto.dtype != want.as_datatype_enum:
                got = tf.dtypes.as_dtype(proto.dtype).name if proto.dtype else "an invalid dtype"
                raise ServingError("INVALID_ARGUMENT", f"input {alias!r} is {got}; the signature expects {want.name}")
        shape = proto.tensor_shape
        if shape.unknown_rank or any(d.size < 0 for d in shape.dim):
            raise ServingError("INVALID_ARGUMENT", f"input {alias!r}: a tensor's shape must be fully known, got "
                               f"{[d.size for d in shape.dim] if not shape.unknown_rank else 'unknown rank'}")
        elements = int(np.prod([d.size for d in shape.dim], dtype=np.float64))
        # a string element costs a Python object (about 16 bytes of references) however short
        itemsize = 16 if proto.dtype in (0, tf.string.as_datatype_enum) else tf.dtypes.as_dtype(proto.dtype).size
        if elements * itemsize > max_bytes:
            raise ServingError("RESOURCE_EXHAUSTED", f"input {alias!r} of shape {[d.size for d in shape.dim]} is "
                               f"{elements * itemsize} bytes; the server takes at most {max_bytes} "
                               f"(--max_request_bytes)")
        try:
            out[alias] = tf.make_ndarray(proto)
        except (TypeError, ValueError, IndexError) as e:
            raise ServingError("INVALID_ARGUMENT", f"input {alias!r} is not a valid tensor: {e}") from None
    return out


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    """Predict and GetModelMetadata; Classify, Regress and MultiInference answer UNIMPLEMENTED."""

    def __init__(self, server):
        self._server = server

    def Predict(self, request, context):   # noqa: N802  (the service's method names)
        try:
            spec = request.model_spec
            with self._server.store.use(spec.name, requested_version(spec)) as servable:
                signature = servable.signature(spec.signature_name)
                inputs = signature.check(to_arrays(request.inputs, signature, self._server.max_request_bytes))
                outputs = self._server.execute(servable, signature, inputs, list(request.output_filter))
                response = predict_pb2.PredictResponse()
                response.model_spec.name = spec.name
                response.model_spec.version.value = servable.version
                response.model_spec.signature_name = signature.name
                for alias, value in outputs.items():
                    response.outputs[alias].CopyFrom(tf.make_tensor_proto(value))
                return response
        except ServingError as e:
            context.abort(e.grpc_code, e.message)

    def GetModelMetadata(self, request, context):   # noqa: N802
        try:
            unknown = [f for f in request.metadata_field if f != "signature_def"]
            if unknown or not request.metadata_field:
                raise ServingError("INVALID_ARGUMENT", f"metadata_field must be ['signature_def'], got "
                                   f"{list(request.metadata_field)}")
            spec = request.model_spec
            with self._server.store.use(spec.name, requested_version(spec)) as servable:
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
        except ServingError as e:
            context.abort(e.grpc_code, e.message)


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
    """GetModelStatus (HandleReloadConfigRequest answers UNIMPLEMENTED)."""

    def __init__(self, server):
        self._server = server

    def GetModelStatus(self, request, context):   # noqa: N802
        try:
            spec = request.model_spec
            self._server.store.check_name(spec.name)
            response = get_model_status_pb2.GetModelStatusResponse()
            for version, state, error in self._server.store.status(requested_version(spec)):
                status = response.model_version_status.add()
                status.version, status.state = version, _STATES[state]
                status.status.error_code = 0 if not error else 2   # tensorflow.error.Code OK / UNKNOWN
                status.status.error_message = error
            return response
        except ServingError as e:
            context.abort(e.grpc_code, e.message)


def add_services(grpc_server, server):
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(PredictionService(server), grpc_server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(server), grpc_server)
