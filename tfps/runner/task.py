"""The pieces of a cluster task around its training: its server, the watch on the PS tasks, and the hooks and log filter that tell what the cluster
does (placement, re-created sessions, checkpoint events)."""
import logging
import os
import socket

import tensorflow as tf

from tfps.cluster.health import watch_peers
from tfps.cluster.tf_config import ClusterConfigError

PEER_TIMEOUT_EXIT = 75   # EX_TEMPFAIL: a PS did not answer for cluster.peer_timeout_secs


def start_server(cluster_config, protocol):
    """This task's tf.distribute.Server, started (a PS then joins it).

    The server's config makes the thread pools that run this task's share of every step (a PS
    runs only those): like the trainers' sessions (cluster._session_config), they do not spin
    while idle. Measured on the demo (2 PS + chief, 1,500 steps of 256, alternated): 25.3-25.5
    CPU-s a run with spinning, 21.6-23.0 without, at the same examples/s or more."""
    config = tf.compat.v1.ConfigProto(log_device_placement=False)
    config.experimental.disable_thread_spinning = True
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster_config.cluster), job_name=cluster_config.task_type,
                                  task_index=cluster_config.task_index, config=config, start=False,
                                  protocol=protocol)
    server.start()
    return server


class CheckpointEvents(logging.Filter):
    """Lets TF's own checkpoint lines through a logger otherwise kept at ERROR: which checkpoint
    a (re-created) session restored and when the chief saves."""

    def filter(self, record):
        return record.levelno >= logging.ERROR or record.getMessage().startswith(
            ("Restoring parameters from", "Saving checkpoints for"))


def check_address_free(cluster_config):
    """A clear error when this task's host:port is taken, before TF's gRPC server tries it."""
    address = cluster_config.cluster[cluster_config.task_type][cluster_config.task_index]
    host, port = address.rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
        except OSError as e:
            raise ClusterConfigError(f"TF_CONFIG {cluster_config.task_type}[{cluster_config.task_index}]: cannot "
                                     f"listen on {address}: {e.strerror}") from None


class PrintPlacement(tf.compat.v1.train.SessionRunHook):
    """Prints the placement table once the graph is built, before training starts."""

    def __init__(self, strategy, printer):
        self._strategy, self._print = strategy, printer

    def begin(self):
        self._print("placement of variables and table shards over the PS tasks:\n" + self._strategy.table(),
                    flush=True)


class RecoveryLog(tf.compat.v1.train.SessionRunHook):
    """Says so when MonitoredTrainingSession re-creates the session after a task failed (the
    chief's session creator has just restored the latest checkpoint and logged which)."""

    def __init__(self, printer):
        self._print = printer
        self.sessions = 0

    def begin(self):
        self._gs = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session, coord):
        self.sessions += 1
        if self.sessions == 1:
            return
        self._print(f"session re-created after a task failure ({self.sessions - 1} so far); the model is "
                    f"ready at global step {int(session.run(self._gs))}", flush=True)


def watch_ps(cfg, cluster_config, printer):
    """A trainer pings its PS tasks every few seconds: says `waiting on ps1 for N s` while one is
    silent (gone, unreachable or frozen), and exits with PEER_TIMEOUT_EXIT once one has been
    silent for cluster.peer_timeout_secs -- instead of waiting forever. Returns the stop event."""
    peers = {f"ps{i}": address for i, address in enumerate(cluster_config.cluster["ps"])}
    me = f"{cluster_config.task_type}{cluster_config.task_index}"

    def silent(name, address, seconds):
        printer(f"{me}: waiting on {name} ({address}) for {seconds:.0f} s", flush=True)

    def deadline(name, address, seconds):
        printer(f"{me}: {name} ({address}) has not answered for {seconds:.0f} s (cluster.peer_timeout_secs = "
                f"{cfg.cluster.peer_timeout_secs:g}); giving up so that the task can be restarted", flush=True)
        os._exit(PEER_TIMEOUT_EXIT)
    return watch_peers(peers, cfg.cluster.peer_timeout_secs, silent, deadline,
                       every_secs=min(5.0, cfg.cluster.peer_timeout_secs / 4))
