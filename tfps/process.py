"""Process-wide settings of a tfps command, made once when it starts: NumPy's BLAS threads,
TensorFlow's CPU allocator (and the probe that tells which one a process got), the log levels.
They hold for the whole process and the tasks it starts, so they live here, apart from the
command line (tfps.cli) that asks for them."""
import os
import sys

_BFC_VARIABLE = "TF_CPU_ALLOCATOR_USE_BFC"


def quiet_native_logs():
    """TensorFlow's C++ logs: warnings and errors only (TF_CPP_MIN_LOG_LEVEL=2, unless the
    environment says otherwise). Before TensorFlow is imported: it reads the variable then."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def import_tensorflow():
    """Imports TensorFlow with Python's cyclic garbage collector paused, then moves what the import
    made to the collector's permanent generation (gc.freeze): the collector's passes during the
    import took about 0.5 s of its 3 s of CPU, and later full collections walked the import's
    objects again (a command's import of TensorFlow and its runner: 3.0 s of CPU, now 1.7 s).
    Nothing of the import is garbage; a forked task shares the frozen pages."""
    import gc
    enabled = gc.isenabled()
    gc.disable()
    try:
        import tensorflow as tf
    finally:
        if enabled:
            gc.enable()
    gc.freeze()
    return tf


def quiet_python_logs():
    """TensorFlow's Python logger: errors only (a command prints what it has to say itself).
    Imports TensorFlow (import_tensorflow)."""
    import_tensorflow().get_logger().setLevel("ERROR")


def single_threaded_blas():
    """NumPy's OpenBLAS keeps a thread per core that spins (sched_yield) after each call; in a
    trainer, where numpy only makes the input's small products, those threads took a quarter of
    the chief's CPU samples from TF's threads (perf, 2 cores). TF itself does not use OpenBLAS."""
    from threadpoolctl import threadpool_limits
    return threadpool_limits(limits=1, user_api="blas")   # restore_original_limits() undoes it


def without_autotune(dataset):
    """`dataset` with tf.data's autotuning model off. Its optimizer thread sleeps for a period
    that doubles up to seconds, and a session's close waited that sleep out for each iterator:
    every train and eval ended up to 2.5 s late (0.5-2.5 s, measured after 200 steps). A map's
    AUTOTUNE parallelism is then the task's cores, and a prefetch's AUTOTUNE buffer is sized by
    TensorFlow's own prefetch autotuner (which runs no thread)."""
    import tensorflow as tf
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def use_cpu_allocator(cfg):
    """train.cpu_allocator for this process and the tasks it starts: TensorFlow's switch
    TF_CPU_ALLOCATOR_USE_BFC, which it reads when it makes its first CPU device (a session, or a
    PS's tf.distribute.Server), so this runs right after the config is read. BFC keeps freed
    memory for the next step; with malloc, TF 2.21 handed each step's freed buffers back to the
    kernel: the chief of `make demo` took ~1,700-2,000 page faults a step (2.15: 1) and 17-22 ms
    of CPU a step against 12-14 with BFC (docs/cluster.md). The config wins over a different
    value in the environment, and says so. `serve` (no job config) keeps malloc: its memory over
    version swaps was measured on it."""
    want = "true" if cfg.train.cpu_allocator == "bfc" else "false"
    had = os.environ.get(_BFC_VARIABLE)
    if had is not None and had.lower() != want:
        print(f"tfps: train.cpu_allocator={cfg.train.cpu_allocator} overrides {_BFC_VARIABLE}={had} from the "
              f"environment", file=sys.stderr)
    os.environ[_BFC_VARIABLE] = want


def cpu_allocator_in_use():
    """The allocator TensorFlow gives this process's CPU tensors, as it names it in a traced step:
    "bfc" for its BFC allocator (`bfc_cpu_allocator_for_gpu`), "malloc" for TensorFlow's default
    (`cpu`, or `mklcpu` where oneDNN is on: a CPU with AVX512_VNNI or AMX, whose default allocator
    serves large tensors from a pool of its own and keeps memory statistics too, so statistics do
    not tell the two apart)."""
    import tensorflow as tf
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None])
        y = tf.concat([x, x], 0)
    metadata = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(y, {x: [0.0] * 1024}, run_metadata=metadata,
                    options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE))
    names = {m.allocator_name for d in metadata.step_stats.dev_stats for n in d.node_stats for m in n.memory}
    return "bfc" if any(name.startswith("bfc") for name in names) else "malloc"
