"""memory_stats against the process: a table's reported bytes vs the RSS it adds, while it
fills and while keys churn (40 rounds of inserting and removing 200k keys, incremental
checkpoints off and on). Prints bytes per key both ways and their ratio."""
import ctypes
import sys

import numpy as np
import tensorflow as tf

sys.path.insert(0, __import__("os").path.dirname(__file__))
from common import session  # noqa: E402

tf.compat.v1.disable_eager_execution()
import tfps  # noqa: E402

DIM, FILL, CHURN, ROUNDS = 16, 2_000_000, 200_000, 40


def rss():
    """Resident bytes, after glibc has handed free heap pages back (malloc_trim), so that memory
    TensorFlow freed is not counted as the table's."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1]) * 1024


def main():
    with tf.Graph().as_default():
        ev = tfps.get_embedding_variable("mem", DIM)
        keys = tf.compat.v1.placeholder(tf.int64, [None])
        with tf.control_dependencies([ev.assign(keys, tf.zeros([tf.size(keys), DIM]))]):
            fill = ev.size()
        remove = ev.remove(keys)
        track = tf.group(*[tfps.ops.embedding_table.table_track_removed(h, 0) for h in ev.handles])
        stats = ev.memory_stats()
        with session() as s:
            s.run(fill, {keys: np.arange(10, dtype=np.int64)})   # the ops' own buffers, before measuring
            base_rss, base = rss(), s.run(stats)
            chunk = 250_000
            for start in range(0, FILL, chunk):
                s.run(fill, {keys: np.arange(start, start + chunk, dtype=np.int64) * 7919})
            st = s.run(stats)
            grown = rss() - base_rss
            reported = st["bytes_reserved"] - base["bytes_reserved"]
            print(f"fill {FILL} keys, dim {DIM}: memory_stats {reported / FILL:.1f} B/key, RSS {grown / FILL:.1f} "
                  f"B/key, ratio {reported / grown:.3f} (ideal {8 + 4 * DIM} B/key)", flush=True)
            for tracked in (False, True):
                if tracked:
                    s.run(track)
                for r in range(ROUNDS):
                    batch = (np.arange(CHURN, dtype=np.int64) + 10**9 + r * 10**7)
                    s.run(fill, {keys: batch})
                    s.run(remove, {keys: batch})
                    if r == 1:   # the pools have grown to the peak (2M + 200k rows) by now
                        before_rss, before = rss(), s.run(stats)
                after = s.run(stats)
                print(f"churn {ROUNDS} x {CHURN} keys on top, removed-keys log {'on' if tracked else 'off'}, "
                      f"rounds 2..{ROUNDS}: RSS {(rss() - before_rss) / 2**20:+.1f} MiB, memory_stats "
                      f"{(after['bytes_reserved'] - before['bytes_reserved']) / 2**20:+.1f} MiB, "
                      f"keys logged {after['removed_logged']} (bound 64 x 65536, then a complete delta)",
                      flush=True)


if __name__ == "__main__":
    main()
