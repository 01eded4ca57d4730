"""The errors a request can get, with their gRPC status and HTTP code (TF Serving's mapping)."""
import re

import grpc

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


def error_line(e):
    """The line of an exception that says what went wrong: for TF's errors, the one after the
    graph's trace (not 'Graph execution error:')."""
    message = (getattr(e, "message", None) or str(e)).strip()
    lines = [line.strip() for line in message.splitlines() if line.strip().strip("=")
             and not re.fullmatch(r"([A-Z_]+: )?From /job:\S*:", line.strip())]
    if not lines:
        return type(e).__name__
    nodes = [i for i, line in enumerate(lines) if line.startswith("Node:")]
    if nodes and nodes[-1] + 1 < len(lines):
        return lines[nodes[-1] + 1]
    rest = [line for line in lines if line != "Graph execution error:" and not line.startswith("[[")]
    return rest[0] if rest else lines[0]
