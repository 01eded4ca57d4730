"""`tfps serve`'s lifecycle, for a ServeConfig: load, announce the ports on stdout, serve until
SIGTERM or SIGINT, drain within the grace, and end -- exit code 1, at once, when requests were
cut, and a watchdog for a stop that never ends. Imports only the standard library at its top, so
that the command line's --help stays fast."""
import faulthandler
import json
import os
import signal
import sys
import threading

STOP_MARGIN_SECS = 5.0   # how long past grace_secs a stop may take before it is ended
# The main thread waits for SIGTERM/SIGINT in steps of this: the kernel may hand the signal to any
# thread (a gRPC or TensorFlow one), and Python runs its handler only when the main thread runs
# again, which an untimed wait never did (a server that ignored SIGTERM; tested with tgkill).
SIGNAL_POLL_SECS = 0.2


def serve(config, printer=None):
    """Serves `config` (a ServeConfig) until SIGTERM or SIGINT; the exit code (0: drained). Its
    messages go to stderr, its one ready line (the ports and versions, JSON) to stdout."""
    from tfps.serving.server import ModelServer, settle_memory
    printer = printer or (lambda *a, **k: print(*a, file=sys.stderr, **k))
    server = ModelServer(config, printer=printer)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    settle_memory()
    server.start()
    if done.is_set():   # stopped while the first versions loaded: never announce a ready server
        _watch_the_stop(config.grace_secs)
        server.stop(config.grace_secs)
        return 0
    loaded = {name: sorted(store.loaded()) for name, store in server.models.stores.items()}
    print(json.dumps({"model_name": server.store.name, "grpc_port": server.port,
                      "rest_api_port": server.rest_api_port, "versions": loaded[server.store.name],
                      "models": loaded}), flush=True)
    while not done.wait(SIGNAL_POLL_SECS):
        pass
    _watch_the_stop(config.grace_secs)
    drained = server.stop(config.grace_secs)
    if server.batcher is not None and server.batcher.runs:
        printer(f"tfps serve: batching ran {server.batcher.requests} requests in {server.batcher.runs} session runs "
                f"({server.batcher.requests / server.batcher.runs:.1f} a run)", flush=True)
    if not drained:
        printer(f"tfps serve: requests still running after --grace_secs {config.grace_secs} were cut", flush=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)   # now: an interpreter exit would wait for the threads still running them
    return 0


def _watch_the_stop(grace_secs):
    """A stop that never ends (a thread or a library that does not return, the interpreter's exit
    waiting on a thread) must not leave a server that neither answers nor exits: STOP_MARGIN_SECS
    past the grace, every thread's stack goes to stderr and the process exits 1 (faulthandler's
    watchdog, a thread of its own that needs no interpreter lock)."""
    faulthandler.dump_traceback_later(grace_secs + STOP_MARGIN_SECS, exit=True)
