"""`tfps serve`'s settings, typed: one ServeConfig, parsed once from the command line
(ServeConfig.from_args) or built in Python, and checked once (problems), as TF Serving fills its
ModelServer::Options from the flags."""
import dataclasses
import os
from typing import Optional, Tuple

from tfps.serving.models import ModelEntry, check_name, read_model_config


MAX_SECS = 86400   # the longest poll interval and stop grace a server takes (a day)


@dataclasses.dataclass(frozen=True)
class ServeConfig:
    """What a ModelServer serves and how (the flags of `tfps serve`, named after TF Serving's).

    Either model_base_path and model_name (one model), or models (several, e.g. from
    read_model_config). port / rest_api_port: 0 any free port, rest_api_port None no REST; host:
    the address both listen on ("0.0.0.0": every interface, as TF Serving -- grpcio takes it as the
    IPv4 and IPv6 wildcard; "127.0.0.1": this machine only). Batching (enable_batching) merges
    concurrent requests into runs of at most max_batch_size rows, waiting at most
    batch_timeout_micros, num_batch_threads at once. poll_secs (--file_system_poll_wait_seconds):
    how often versions and the followed model_dir are looked at (0: load once); follow: a
    trainer's model_dir whose checkpoints and deltas the tables follow (one model only);
    num_versions: the newest versions kept loaded; max_request_bytes: the largest request body;
    grpc_threads: gRPC handler threads (None: 16, or with batching max_batch_size + 8 within
    [16, 256]); session_threads (--tensorflow_session_parallelism): the sessions' inter- and
    intra-op threads (0: each run in its caller's thread); grace_secs: how long a stop waits for
    the requests begun."""
    model_base_path: Optional[str] = None
    model_name: Optional[str] = None
    models: Optional[Tuple[ModelEntry, ...]] = None
    host: str = "0.0.0.0"
    port: int = 8500
    rest_api_port: Optional[int] = 8501
    enable_batching: bool = False
    max_batch_size: int = 32
    batch_timeout_micros: int = 1000
    num_batch_threads: int = 2
    poll_secs: float = 1.0
    follow: Optional[str] = None
    num_versions: int = 1
    max_request_bytes: int = 64 << 20
    grpc_threads: Optional[int] = None
    session_threads: int = 0
    grace_secs: float = 10.0

    def problems(self):
        """[what is wrong, naming the flag], empty when the settings can serve."""
        out = [f"{flag} must be in [0, 65535], got {v}" for flag, v in (
            ("--port", self.port), ("--rest_api_port", self.rest_api_port)) if v is not None and not 0 <= v <= 65535]
        if self.port and self.port == self.rest_api_port:
            out.append(f"--port and --rest_api_port must differ (both {self.port}): gRPC and REST each listen on "
                       f"their own")
        out += [f"{flag} must be > 0, got {v}" for flag, v in (
            ("--max_batch_size", self.max_batch_size), ("--max_request_bytes", self.max_request_bytes),
            ("--num_batch_threads", self.num_batch_threads)) if v < 1]
        if self.session_threads < 0:
            out.append(f"--tensorflow_session_parallelism must be >= 0, got {self.session_threads}")
        if self.grpc_threads is not None and self.grpc_threads < 1:
            out.append(f"--grpc_threads must be >= 1, got {self.grpc_threads}")
        if self.batch_timeout_micros < 0:
            out.append(f"--batch_timeout_micros must be >= 0, got {self.batch_timeout_micros}")
        if self.num_versions < 1:
            out.append(f"--num_versions must be >= 1, got {self.num_versions}")
        if not 0 <= self.poll_secs <= MAX_SECS:   # (nan too)
            out.append(f"--file_system_poll_wait_seconds must be in [0, {MAX_SECS}] (0: load once), got "
                       f"{self.poll_secs}")
        elif self.poll_secs == 0 and self.follow is not None:
            out.append("--follow needs --file_system_poll_wait_seconds > 0: with 0 the versions load once and the "
                       "followed model_dir is never looked at again")
        if not 0 <= self.grace_secs <= MAX_SECS:
            out.append(f"--grace_secs must be in [0, {MAX_SECS}], got {self.grace_secs}")
        if (self.models is None) == (self.model_base_path is None and self.model_name is None):
            out.append("give --model_name and --model_base_path, or --model_config_file (models), not both")
        elif self.models is None:
            if not self.model_name or "/" in self.model_name or ":" in self.model_name:
                out.append(f"--model_name must be a non-empty name without '/' or ':', got {self.model_name!r}")
        elif self.follow is not None and len(self.models) != 1:
            out.append(f"--follow applies one trainer's model_dir to one model; the config file names "
                       f"{len(self.models)}")
        return out

    def checked(self):
        """This config, or ValueError naming every problem; each model's name checked."""
        problems = self.problems()
        if problems:
            raise ValueError("tfps serve: " + "; ".join(problems))
        for m in self.entries():
            check_name(m.name, "a model name")
        return self

    def entries(self):
        """[ModelEntry] of the models served."""
        return list(self.models) if self.models is not None else [ModelEntry(self.model_name, self.model_base_path)]

    def grpc_handler_threads(self):
        """The gRPC handler threads: grpc_threads, or by default 16 and, with batching, enough for
        a batch to fill and the next to start gathering (each thread is another for Python's
        interpreter lock: 132 threads cost 1.5x the CPU per request of 40, measured)."""
        if self.grpc_threads is not None:
            return self.grpc_threads
        return max(16, min(self.max_batch_size + 8, 256)) if self.enable_batching else 16

    @classmethod
    def from_args(cls, args):
        """The ServeConfig of `tfps serve`'s parsed flags: the model config file read, the
        directories checked; ValueError or OSError naming the flag otherwise."""
        if (args.model_config_file is None) == (args.model_base_path is None):
            raise ValueError("tfps serve: give --model_base_path (with --model_name) or --model_config_file, one "
                             "of them")
        models = None
        if args.model_config_file is not None:
            if args.model_name is not None:
                raise ValueError("tfps serve: --model_name goes with --model_base_path; --model_config_file names "
                                 "its models")
            if not os.path.isfile(args.model_config_file):
                raise OSError(f"--model_config_file {args.model_config_file!r} is not a file")
            models = tuple(read_model_config(args.model_config_file))
        else:
            if args.model_name is None:
                raise ValueError("tfps serve: --model_base_path needs --model_name (the name clients ask for)")
            if not os.path.isdir(args.model_base_path):
                raise OSError(f"--model_base_path {args.model_base_path!r} is not a directory")
        if args.follow is not None and not os.path.isdir(args.follow):
            raise OSError(f"--follow {args.follow!r} is not a directory (the trainer's model_dir)")
        batching = args.enable_batching or args.max_batch_size is not None or args.batch_timeout_micros is not None
        return cls(model_base_path=args.model_base_path, model_name=args.model_name, models=models, host=args.host,
                   port=args.port, rest_api_port=args.rest_api_port or None, enable_batching=batching,
                   max_batch_size=32 if args.max_batch_size is None else args.max_batch_size,
                   batch_timeout_micros=1000 if args.batch_timeout_micros is None else args.batch_timeout_micros,
                   num_batch_threads=args.num_batch_threads, poll_secs=args.file_system_poll_wait_seconds,
                   follow=args.follow, num_versions=args.num_versions, max_request_bytes=args.max_request_bytes,
                   grpc_threads=args.grpc_threads, session_threads=args.tensorflow_session_parallelism,
                   grace_secs=args.grace_secs).checked()
