"""The errors a request can get, with their gRPC status and HTTP code (TF Serving's mapping)."""
import grpc

from tfps.errors import error_line  # noqa: F401  (re-exported: serving reports with it)

HTTP = {"INVALID_ARGUMENT": 400, "NOT_FOUND": 404, "RESOURCE_EXHAUSTED": 413,
        "UNAVAILABLE": 503, "UNIMPLEMENTED": 501, "INTERNAL": 500}


class ServingError(Exception):
    """A request's failure: code is a grpc.StatusCode name (INVALID_ARGUMENT, NOT_FOUND, ...)."""

    def __init__(self, code, message):
        if code not in HTTP:
            raise ValueError(f"unknown serving error code {code!r}")
        super().__init__(message)
        self.code, self.message = code, message

    @property
    def grpc_code(self):
        return getattr(grpc.StatusCode, self.code)

    @property
    def http_status(self):
        return HTTP[self.code]
