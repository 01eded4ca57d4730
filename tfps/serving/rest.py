"""TF Serving's REST API as a WSGI app (Werkzeug parses HTTP; nothing here does).

  POST /v1/models/NAME[/versions/V]:predict   {"instances": [...]} (rows) or {"inputs": ...} (columns)
  POST /v1/models/NAME[/versions/V]:classify  {"examples": [{feature: value}], "context": {...}}
                                              -> {"results": [[[label, score], ...], ...]}
  POST /v1/models/NAME[/versions/V]:regress   the same -> {"results": [value, ...]}
  GET  /v1/models/NAME[/versions/V]           version status
  GET  /v1/models/NAME[/versions/V]/metadata  signatures

Answers and errors ({"error": "..."}, HTTP 400 / 404 / 413 / 503) in TF Serving's formats."""
import base64
import ctypes
import json
import re

import numpy as np
from google.protobuf import json_format
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Request, Response

from tfps.serving import inference
from tfps.serving.errors import ServingError

_PATH = re.compile(r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d+))?"
                   r"(?:(?P<verb>:[a-z]+)|(?P<meta>/metadata))?$")
_STATE_CODE = {"AVAILABLE": "OK", "END": "UNKNOWN"}


def _json(body, status=200):
    return Response(json.dumps(body), status=status, mimetype="application/json")


def _decode(value, what):
    """JSON values -> something np.asarray takes: {"b64": s} becomes bytes."""
    if isinstance(value, dict):
        if set(value) != {"b64"}:
            raise ServingError("INVALID_ARGUMENT", f"{what}: an object value must be {{\"b64\": ...}}, got keys "
                               f"{sorted(value)}")
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (ValueError, TypeError):
            raise ServingError("INVALID_ARGUMENT", f"{what}: b64 value is not base64") from None
    if isinstance(value, list):
        return [_decode(v, what) for v in value]
    return value


def _encode(array):
    if array.dtype == object:
        return np.vectorize(lambda b: {"b64": base64.b64encode(b).decode()}, otypes=[object])(array).tolist() \
            if array.size else array.tolist()
    return array.tolist()


def _inputs(body, signature):
    """The request's inputs {alias: value} and whether it is row format ("instances")."""
    if not isinstance(body, dict) or ("instances" in body) == ("inputs" in body):
        raise ServingError("INVALID_ARGUMENT", 'the request body must be a JSON object with exactly one of '
                           '"instances" (row format) or "inputs" (columnar format)')
    names = sorted(signature.inputs)
    if "inputs" in body:
        data = body["inputs"]
        if isinstance(data, dict):
            return {k: _decode(v, f"input {k!r}") for k, v in data.items()}, False
        if len(names) != 1:
            raise ServingError("INVALID_ARGUMENT", f'"inputs" must name the signature\'s inputs {names}')
        return {names[0]: _decode(data, f"input {names[0]!r}")}, False
    rows = body["instances"]
    if not isinstance(rows, list) or not rows:
        raise ServingError("INVALID_ARGUMENT", '"instances" must be a non-empty list')
    if all(isinstance(r, dict) and set(r) != {"b64"} for r in rows):
        keys = set(rows[0])
        if any(set(r) != keys for r in rows):
            raise ServingError("INVALID_ARGUMENT", "every instance must name the same inputs; instance 0 has "
                               f"{sorted(keys)}")
        return {k: [_decode(r[k], f"input {k!r}") for r in rows] for k in keys}, True
    if len(names) != 1:
        raise ServingError("INVALID_ARGUMENT", f"each instance must be an object naming the signature's inputs "
                           f"{names}")
    return {names[0]: _decode(rows, f"input {names[0]!r}")}, True


TRIM_AFTER_BYTES = 8 << 20   # a request body this large: its memory is given back once answered


def _give_back_memory():
    """Hands the heap's free memory back to the OS (glibc's malloc_trim). A large JSON body
    becomes many times its size in Python objects; freed, glibc keeps those pages in its arenas,
    and a server stayed at 4.3 GB after four concurrent 46 MB requests."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):   # not glibc
        pass


class RestApp:
    """The WSGI application; `server` gives models, in_flight, execute() and max_request_bytes."""

    def __init__(self, server):
        self._server = server

    def __call__(self, environ, start_response):
        """Each request counts in the server's in_flight from here until its answer is written
        (the WSGI server closes the body it iterated); once the server drains, 503."""
        request = Request(environ)
        try:
            self._server.in_flight.enter()
        except ServingError as e:
            response = _json({"error": e.message}, e.http_status)
            response.headers["Connection"] = "close"
            return response(environ, start_response)
        try:
            response = self._answer(request)
            response.call_on_close(self._server.in_flight.leave)
            if (request.content_length or 0) >= TRIM_AFTER_BYTES:
                response.call_on_close(_give_back_memory)
        except BaseException:
            self._server.in_flight.leave()
            raise
        return response(environ, start_response)

    def _answer(self, request):
        try:
            response = self._route(request)
        except ServingError as e:
            response = _json({"error": e.message}, e.http_status)
        except HTTPException as e:   # Werkzeug's own
            response = _json({"error": e.description}, e.code)
        except RecursionError:
            response = _json({"error": "the request nests too deep"}, 400)
        except Exception as e:   # noqa: BLE001  (a defect of ours: still TF Serving's error format)
            response = _json({"error": f"internal error: {type(e).__name__}: {e}"}, 500)
        return response

    def _route(self, request):
        match = _PATH.match(request.path)
        if not match:
            raise ServingError("NOT_FOUND", f"no such path {request.path!r}; the API is /v1/models/NAME"
                               f"[/versions/V][:predict | :classify | :regress | /metadata]")
        name, version, verb, meta = match.group("name", "version", "verb", "meta")
        store = self._server.models
        if verb:
            if verb not in (":predict", ":classify", ":regress"):
                raise ServingError("NOT_FOUND", f"{verb[1:]} is not supported; use :predict, :classify or :regress")
            if request.method != "POST":
                raise ServingError("INVALID_ARGUMENT", f"{request.path} takes POST, got {request.method}")
            if verb == ":predict":
                return self._predict(request, name, version)
            return self._infer(request, name, version, inference.CLASSIFY if verb == ":classify" else inference.REGRESS)
        if request.method != "GET":
            raise ServingError("INVALID_ARGUMENT", f"{request.path} takes GET, got {request.method}")
        if meta:
            with store.use(name, version) as servable:
                signatures = {k: json_format.MessageToDict(s.proto) for k, s in servable.signatures.items()}
                return _json({"model_spec": {"name": name, "signature_name": "", "version": str(servable.version)},
                              "metadata": {"signature_def": {"signature_def": signatures},
                                           **({"tfps_state": servable.state()} if servable.state() else {})}})
        rows = store.status(name, version)
        return _json({"model_version_status": [
            {"version": str(v), "state": state, "status": {"error_code": _STATE_CODE[state], "error_message": error}}
            for v, state, error in rows]})

    def _body(self, request):
        """The request's JSON body (INVALID_ARGUMENT when it is not JSON, RESOURCE_EXHAUSTED over
        --max_request_bytes)."""
        limit = self._server.max_request_bytes
        if request.content_length is not None and request.content_length > limit:
            raise ServingError("RESOURCE_EXHAUSTED", f"the request body is {request.content_length} bytes; the server "
                               f"takes at most {limit} (--max_request_bytes)")
        data = request.stream.read(limit + 1)   # a chunked body has no length: read one byte more than allowed
        if len(data) > limit:
            raise ServingError("RESOURCE_EXHAUSTED", f"the request body is over {limit} bytes, the most the server "
                               f"takes (--max_request_bytes)")
        try:
            body = json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise ServingError("INVALID_ARGUMENT", f"the request body is not valid JSON: {str(e)[:200]}") from None
        signature_name = body.get("signature_name") if isinstance(body, dict) else None
        if signature_name is not None and not isinstance(signature_name, str):
            raise ServingError("INVALID_ARGUMENT", f'"signature_name" must be a string, got {type(signature_name).__name__}')
        return body, signature_name

    def _infer(self, request, name, version, method):
        """:classify and :regress (TF Serving's REST formats)."""
        body, signature_name = self._body(request)
        examples = inference.json_examples(body)
        with self._server.models.use(name, version) as servable:
            if method == inference.CLASSIFY:
                _, classes, scores = inference.classify(self._server, servable, signature_name, examples)
                return _json({"results": inference.classify_json(classes, scores)})
            _, values = inference.regress(self._server, servable, signature_name, examples)
            return _json({"results": [float(v) for v in values]})

    def _predict(self, request, name, version):
        body, signature_name = self._body(request)
        with self._server.models.use(name, version) as servable:
            signature = servable.signature(signature_name)
            raw, rows = _inputs(body, signature)
            inputs = signature.check(raw)
            outputs = self._server.execute(servable, signature, inputs, None)
        if not rows:
            if len(outputs) == 1:
                return _json({"outputs": _encode(next(iter(outputs.values())))})
            return _json({"outputs": {k: _encode(v) for k, v in outputs.items()}})
        if any(not v.ndim for v in outputs.values()):
            raise ServingError("INVALID_ARGUMENT", "the row format (\"instances\") needs outputs with a batch "
                               "dimension; this signature has a scalar output: send \"inputs\" instead")
        if len(outputs) == 1:
            return _json({"predictions": _encode(next(iter(outputs.values())))})
        columns = {k: _encode(v) for k, v in outputs.items()}
        count = len(next(iter(columns.values())))
        return _json({"predictions": [{k: c[i] for k, c in columns.items()} for i in range(count)]})
