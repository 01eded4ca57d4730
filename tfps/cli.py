"""The `tfps` command: `tfps train --config FILE [--set key.sub=value ...]`,
`tfps export --config FILE --set model_dir=DIR --export-dir OUT`, `tfps inspect CHECKPOINT`,
`tfps convert --from criteo|movielens PATH --to DIR`, `tfps launch --config FILE --ps N --workers M`,
`tfps serve --model_base_path DIR --model_name NAME [--port 8500] [--rest_api_port 8501]`
(or `--model_config_file FILE` for several models).

The last line `tfps train` prints is one JSON object with the final metrics.
"""
import argparse
import json
import os
import re
import sys
import warnings

from tfps.process import (cpu_allocator_in_use, import_tensorflow, quiet_native_logs, quiet_python_logs,
                          single_threaded_blas, use_cpu_allocator)
from tfps.serving.run import STOP_MARGIN_SECS   # (run.py imports only the standard library at its top)


def _train(args):
    from tfps.config import ConfigError, check_model_dir, load_config
    cfg = load_config(args.config, args.set)
    use_cpu_allocator(cfg)
    check_model_dir(cfg.model_dir)
    quiet_python_logs()
    from tfps.cluster.tf_config import parse_tf_config
    cluster = parse_tf_config()
    if cluster is not None:
        if cfg.model_dir is None:
            raise ConfigError("training on a cluster (TF_CONFIG) needs model_dir shared by all tasks")
        from tfps.runner.cluster import run_task
        metrics = run_task(cfg, cluster)
        metrics["cpu_allocator"] = cpu_allocator_in_use()
        if not cluster.is_chief:   # a worker's own rate, the evaluator's last evaluation
            print(json.dumps(metrics), flush=True)
            return 0
    else:
        from tfps.runner.local import run
        metrics = run(cfg)
        metrics["cpu_allocator"] = cpu_allocator_in_use()
    quality = [f"AUC {'undefined' if metrics['auc'] is None else metrics['auc']}"] + [
        f"{k} {metrics[k]}" for k in ("gauc", "logloss", "oracle_auc", "bad_rows") if metrics.get(k) is not None]
    print(f"{', '.join(quality)}; {metrics['examples_per_sec'] or 0:.0f} examples/s (steady), "
          f"{metrics['examples_per_sec_overall']:.0f} overall", flush=True)
    print(json.dumps(metrics), flush=True)
    return 0


def _export(args):
    from tfps.config import load_config
    cfg = load_config(args.config, args.set)
    use_cpu_allocator(cfg)
    if cfg.model_dir is None:
        from tfps.config import ConfigError
        raise ConfigError("export needs model_dir (--set model_dir=DIR) holding a trained checkpoint")
    quiet_python_logs()
    from tfps.runner.job import export
    path = export(cfg, args.export_dir, args.format, version=args.version)
    print(json.dumps({"saved_model": path}), flush=True)
    return 0


def _inspect(args):
    quiet_python_logs()
    import tensorflow as tf
    from tfps.embedding.checkpoint_tools import inspect
    from tfps.state import deltas, manifest
    names, embedding_dim = (), None
    if args.config:   # names the features of merged tables, and gives the model's embedding_dim
        from tfps.config import load_config
        from tfps.data.sources import schema_of
        cfg = load_config(args.config)
        schema, embedding_dim = schema_of(cfg), cfg.model.embedding_dim
        names = tuple(schema.id_features) + tuple(schema.list_features)
    # A model_dir: what a resume would do (its newest cut, found by its files, or the refusal).
    checkpoint, state = args.checkpoint, None
    if os.path.isdir(args.checkpoint):
        state = deltas.resume_summary(args.checkpoint)
        checkpoint = os.path.join(args.checkpoint, state["checkpoint"]) if state.get("checkpoint") else None
        if checkpoint is None and "refused" in state:   # nothing to show but the refusal train would print
            raise ValueError(state["refused"])
        if checkpoint is None:   # a Saver's own names, by its `checkpoint` file
            from tfps.state import disk
            checkpoint = disk.latest_checkpoint(args.checkpoint) or tf.train.latest_checkpoint(args.checkpoint)
            state = None
            if checkpoint is None:
                raise ValueError(f"cannot read checkpoint {args.checkpoint!r}: no checkpoint there (no whole "
                                 f"model.ckpt-<step>.index with its data files, nor a `checkpoint` file naming one)")
    tables = []
    if checkpoint:
        try:
            state = deltas.resume_summary(checkpoint) if state is None else state
            saved = manifest.read(checkpoint)
            names = names + tuple(n for pairs in ((saved or {}).get("features") or {}).values() for _, n in pairs
                                  if n not in names)
            tables = inspect(checkpoint, top=args.top, feature_names=names)
        except (tf.errors.OpError, ValueError, RuntimeError, IndexError) as e:
            raise ValueError(f"cannot read checkpoint {checkpoint!r}: {str(e).strip().splitlines()[0]}") from None
        if not tables:
            print(f"no tfps tables in {checkpoint}", flush=True)
    state = state or {}
    for t in tables:
        top = ", ".join(f"{k}:{f}" for k, f in t["top_ids_by_freq"])
        dim = (f"dim {t['dim']} (embedding_dim {embedding_dim} + 1: the first-order weight)"
               if embedding_dim is not None and t["dim"] == embedding_dim + 1 else f"dim {t['dim']}")
        print(f"{t['table']}: {t['rows']} rows, {dim}, {t['slots']} slots, "
              f"{t['bytes'] / 2**20:.2f} MiB; top ids (id:updates) {top}", flush=True)
        order = {n: i for i, n in enumerate(names)}
        for f in sorted(t.get("features", []), key=lambda f: (order.get(f["feature"], len(order)), f["tag"])):
            print(f"  tag {f['tag']:>5} {f['feature'] or '?':<16} {f['rows']} rows, {f['updates']} updates", flush=True)
    if any("features" in t for t in tables):
        print("(tag: a merged table's key is (tag << 48) | id, the tag a feature's own (crc32 of its name)"
              + ("; ? is a tag no feature of the model has)" if names else
                 "; --config names the features and gives the model's embedding_dim)"), flush=True)
    if state.get("checkpoint"):
        print(f"model fingerprint {state['fingerprint']}; tables above are {state['checkpoint']}"
              + (f"; the newest cut adds deltas {state['deltas']} (step {state['step']})" if state["deltas"] else
                 f" (step {state['step']})"), flush=True)
    if "refused" in state:
        print(f"a resume would refuse: {state['refused']}", flush=True)
    if os.path.isdir(args.checkpoint) and "refused" not in state:
        from tfps.state import disk
        note = disk.unfinished_note(args.checkpoint)   # what a resume passes over, said
        if note:
            print(note, flush=True)
            state["passed_over"] = note
    print(json.dumps({"tables": tables, **({"state": state} if state else {})}), flush=True)
    return 0


def _convert(args):
    quiet_python_logs()
    from tfps.data.convert import convert
    result = convert(args.kind, args.path, args.to, skip_bad_rows=args.skip_bad_rows, rows_per_file=args.rows_per_file,
                     eval_fraction=args.eval_fraction, sequence_options={
                         "window": args.window, "history_len": args.history_len, "realtime_len": args.realtime_len})
    for o in result["outputs"]:
        print(f"{o['dir']}: {o['rows']} rows in {o['files']} files" +
              (f", {o['bad_rows']} malformed rows skipped" if o["bad_rows"] else ""), flush=True)
    print(json.dumps(result), flush=True)
    return 0


def _launch(args):
    from tfps.cluster.launch import launch
    from tfps.cluster.launch_config import LaunchConfig
    from tfps.config import check_model_dir, load_config
    cfg = load_config(args.config, LaunchConfig.overrides_of(args))   # fail here, before starting any process
    use_cpu_allocator(cfg)   # (each task reads the config again and sets it too)
    check_model_dir(cfg.model_dir)
    from tfps.cluster.tf_config import check_protocol
    check_protocol(cfg.cluster.protocol)
    # What every task would refuse, refused once here, before any task, log or lease: a data path
    # without its data, a model_dir whose state a resume refuses (a partial copy, a broken chain).
    from tfps.data.sources import make_source
    make_source(cfg)
    if cfg.model_dir and os.path.isdir(cfg.model_dir):
        from tfps.state import deltas, disk
        deltas.latest_cut(cfg.model_dir)
        note = disk.unfinished_note(cfg.model_dir)
        if note:
            print(note, flush=True)
    return launch(LaunchConfig.from_args(args, cfg),
                  **(dict(task_main=main, preload=_preload_task) if cfg.cluster.fork_tasks else {}))


def _preload_task():
    """What every launched task imports (`tfps train` under a TF_CONFIG), imported once in the
    launcher, whose forks the tasks are. Imports only: no graph, no session, no TF thread."""
    quiet_python_logs()
    import tfps.runner.cluster  # noqa: F401
    import tfps.models.zoo  # noqa: F401


def _serve(args):
    import_tensorflow().compat.v1.disable_eager_execution()
    quiet_python_logs()
    from tfps.serving.config import ServeConfig
    from tfps.serving.run import serve
    return serve(ServeConfig.from_args(args))


def _op_error_line(message):
    """The line of a TF error message that says what went wrong, without the graph's stack."""
    from tfps.serving.errors import error_line
    return error_line(RuntimeError(message))


def _warning_line(message, category, *_):
    """A warning as one line (a renamed config key, say), not the file, line and source of the
    call that raised it."""
    return f"tfps: {category.__name__}: {message}\n"


def main(argv=None):
    quiet_native_logs()
    single_threaded_blas()
    warnings.formatwarning = _warning_line
    parser = argparse.ArgumentParser(prog="tfps", description="TF1-style PS trainer with hash-table embeddings")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--verbose", action="store_true",
                        help="on an error, also print TensorFlow's whole message (the iterator chain of an input "
                             "function, the graph's stack) before tfps's one line")
    train = sub.add_parser("train", parents=[common],
                          help="train and evaluate a model in this process")
    train.add_argument("--config", help="YAML job config (configs/demo.yaml)")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config field, e.g. --set train.steps=200 (repeatable)")
    train.set_defaults(fn=_train)
    exp = sub.add_parser("export", parents=[common],
                          help="write a serving SavedModel from the latest checkpoint")
    exp.add_argument("--config", help="the YAML job config the model was trained with")
    exp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    exp.add_argument("--export-dir", required=True, help="directory under which the SavedModel is written, as a "
                     "new newest version EXPORT_DIR/<version>/ (what TF Serving's --model_base_path reads)")
    exp.add_argument("--version", type=int, default=None,
                     help="the version number (default: the time in seconds, or one above the highest version "
                          "there); it must be above every version already in --export-dir")
    exp.add_argument("--format", choices=("stock", "tfps"), default=None,
                     help="stock: stock TensorFlow ops only (the unmodified tensorflow_model_server loads it); "
                          "tfps: tfps's table ops (default: export.format of the config)")
    exp.set_defaults(fn=_export)
    lau = sub.add_parser("launch", parents=[common],
                          help="run a PS/worker cluster on this machine (one process per task)")
    lau.add_argument("--config", help="YAML job config")
    lau.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    lau.add_argument("--ps", type=int, default=2, help="parameter server tasks")
    lau.add_argument("--workers", type=int, default=2, help="worker tasks, the chief included")
    lau.add_argument("--protocol", help="server protocol, default cluster.protocol of the config (grpc); "
                                         "grpc+verbs needs a TF build with verbs")
    lau.add_argument("--netns", action="store_true",
                     help="every task an emulated host: a network namespace of its own, with its own address on "
                          "one bridge (cluster.netns; root and iproute2; cluster.emulated_bandwidth_gbit shapes "
                          "the links)")
    lau.add_argument("--evaluator", action="store_true",
                     help="also run an evaluator task that evaluates each new checkpoint")
    lau.add_argument("--max-restarts", type=int, default=3,
                     help="how many times in all a dead task (ps, worker, chief, evaluator) is restarted "
                          "before the job fails")
    lau.set_defaults(fn=_launch)
    con = sub.add_parser("convert", parents=[common],
                          help="write text data (criteo, movielens) as sharded TFRecords")
    con.add_argument("--from", dest="kind", required=True, choices=["criteo", "movielens", "movielens_sequences"],
                     help="input layout (movielens_sequences: MTGR's user samples)")
    con.add_argument("path", help="criteo: file, glob or directory; movielens: the directory of ratings.csv")
    con.add_argument("--to", required=True, help="output directory (movielens: DIR/train and DIR/eval)")
    con.add_argument("--skip-bad-rows", action="store_true", help="drop malformed rows (counted) instead of failing")
    con.add_argument("--rows-per-file", type=int, default=1_000_000, help="examples per TFRecord file")
    con.add_argument("--eval-fraction", type=float, default=0.2, help="movielens: each user's latest share for eval")
    con.add_argument("--window", type=int, default=8, help="movielens_sequences: candidates per sample")
    con.add_argument("--history-len", type=int, default=64, help="movielens_sequences: history ratings per sample")
    con.add_argument("--realtime-len", type=int, default=16, help="movielens_sequences: real-time ratings per sample")
    con.set_defaults(fn=_convert)
    ins = sub.add_parser("inspect", parents=[common],
                          help="per table of a checkpoint: rows, bytes, top ids by frequency")
    ins.add_argument("checkpoint", help="checkpoint prefix or model directory")
    ins.add_argument("--top", type=int, default=5, help="how many top ids to list per table")
    ins.add_argument("--config", help="the model's YAML config: names the features of merged tables")
    ins.set_defaults(fn=_inspect)
    srv = sub.add_parser("serve", parents=[common],
                          help="serve SavedModel versions over TF Serving's gRPC and REST APIs")
    srv.add_argument("--model_base_path", help="directory of SavedModel versions DIR/<int>/ "
                     "(what tfps export --export-dir writes)")
    srv.add_argument("--model_name", help="the name clients ask for (with --model_base_path)")
    srv.add_argument("--model_config_file", help="TF Serving's text-format ModelServerConfig: model_config_list "
                     "{ config { name: ... base_path: ... model_platform: \"tensorflow\" } ... }, several models in "
                     "one server (instead of --model_name and --model_base_path)")
    srv.add_argument("--host", default="0.0.0.0", help="address the gRPC and REST ports listen on (default "
                     "0.0.0.0: every interface, as TF Serving; 127.0.0.1: this machine only)")
    srv.add_argument("--port", type=int, default=8500, help="gRPC port (0: any free one, printed)")
    srv.add_argument("--rest_api_port", type=int, default=8501, help="REST port (0: no REST API, as TF Serving)")
    srv.add_argument("--enable_batching", action="store_true",
                     help="merge concurrent requests into one run (also on when a batching flag is given)")
    srv.add_argument("--max_batch_size", type=int, help="rows per merged run (default 32)")
    srv.add_argument("--batch_timeout_micros", type=int, help="longest wait for a batch to fill (default 1000)")
    srv.add_argument("--num_batch_threads", type=int, default=2, help="merged runs at once")
    srv.add_argument("--file_system_poll_wait_seconds", type=float, default=1.0,
                     help="how often new versions (and --follow's checkpoints) are looked for")
    srv.add_argument("--follow", metavar="MODEL_DIR", help="apply this trainer model_dir's new checkpoints and "
                     "table deltas to the served tables in place")
    srv.add_argument("--num_versions", type=int, default=1, help="newest versions kept loaded")
    srv.add_argument("--max_request_bytes", type=int, default=64 << 20, help="largest request accepted")
    srv.add_argument("--tensorflow_session_parallelism", type=int, default=0,
                     help="TensorFlow's inter- and intra-op threads for the models' sessions (0: each run in "
                          "the thread that calls it, its kernels on one thread)")
    srv.add_argument("--grpc_threads", type=int, default=None,
                     help="gRPC handler threads (default 16; with batching max_batch_size + 8 within [16, 256], so "
                          "that a batch can fill while the next gathers)")
    srv.add_argument("--grace_secs", type=float, default=10.0, help="on SIGTERM or SIGINT: new requests are "
                     "refused (UNAVAILABLE / 503), those begun are answered, and the server exits within this many "
                     "seconds (exit code 1 when some were still running and were cut; a stop still not done "
                     f"{STOP_MARGIN_SECS:g} s past it writes every thread's stack to stderr and exits 1)")
    srv.set_defaults(fn=_serve)
    args = parser.parse_args(argv)
    from tfps.cluster.tf_config import ClusterConfigError
    from tfps.config import ConfigError
    from tfps.errors import ReaderError, nothing_to_train
    from tfps.state.lease import LeaseHeld
    try:
        return args.fn(args)
    except (ConfigError, ClusterConfigError) as e:
        print(f"tfps: config error: {e}", file=sys.stderr)
        return 2
    except LeaseHeld as e:
        print(f"tfps: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        lines = str(e).strip().splitlines()
        if args.verbose and len(lines) > 1:
            print(f"tfps: {type(e).__name__}: {e}", file=sys.stderr)
        if len(lines) > 1:   # TF's own (a failed restore with its graph trace): its first and telling lines
            cause = _op_error_line(str(e).split("Original error:")[-1])
            lines = [f"{lines[0].strip(chr(39))} ({cause}; is the checkpoint in model_dir from this config, and whole?)"]
        said = lines[0] if lines else repr(e)
        print(said if said.startswith("tfps") else f"tfps: {said}", file=sys.stderr)
        return 2
    except OSError as e:   # a file or address the user named: one line, not a traceback
        said = e.strerror if e.filename is None and e.strerror else str(e)
        print(said if said.startswith("tfps") else f"tfps: {said}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 -- only TF's errors are turned into one line here
        import tensorflow as tf
        if type(e).__name__ == "NanLossDuringTrainingError":
            print("tfps: the training loss became NaN (diverged); lower train.learning_rate or check the data",
                  file=sys.stderr)
            return 2
        if not isinstance(e, tf.errors.OpError):
            raise
        if args.verbose:
            print(f"tfps: {type(e).__name__}: {e.message or e}", file=sys.stderr)
        # Bad data: the reader's own line (file, line, what, what to do), out of TF's iterator chain.
        bad_input = ReaderError.find(e) or nothing_to_train(e)
        if bad_input is not None:
            print(f"tfps: {bad_input}", file=sys.stderr)
            return 2
        # A checkpoint that does not fit the config (a variable missing or of another shape), a
        # damaged file: TF's own words, its one telling line, without the graph's stack.
        first = _op_error_line(e.message or str(e))
        about_checkpoint = (not first.startswith("tfrecord:") and
                            re.search(r"checkpoint|restor", first, re.IGNORECASE) is not None)
        hint = " (is the checkpoint in model_dir from this config, and whole?)" if about_checkpoint else ""
        print(f"tfps: {type(e).__name__}: {first}{hint}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
