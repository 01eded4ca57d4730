"""The analysis of a traced step (tf.compat.v1.RunMetadata with FULL_TRACE and partition graphs):
its cross-task traffic (rpc_stats, messages_by_task) and where its time went (step_phases).
tfps.runner.hooks.StepStatsHook traces a few steps of a run and prints them."""



def rpc_stats(run_metadata):
    """Cross-task traffic of one traced distributed step, from its RunMetadata step stats.

    Returns {"recv_tensor_rpcs", "bytes", "bytes_to_ps", "bytes_from_ps", "tasks"}: each
    RecvTensor entry is one tensor fetched over gRPC from another task (its timeline label
    reads `[size] ... edge_... from /job:a/... to /job:b/...`, its output the tensor's bytes);
    "tasks" is how many tasks ran a partition of the step (each one RunGraph call).

    The trace of remote tasks is best effort (a few RecvTensor entries can be missing from one
    step), so when the step also returned its partition graphs (RunOptions
    output_partition_graphs) the result holds "messages": the cross-task tensors the step's
    graph sends, counted from the partitions themselves, the same on every step."""
    stats = _traced_traffic(run_metadata)
    if run_metadata.partition_graphs:
        stats["messages"] = cross_task_messages(run_metadata.partition_graphs)
    return stats


def cross_task_messages(partition_graphs):
    """How many tensors one run of these partition graphs sends from one task to another: the
    `_Recv` ops whose sender is on another task (each is one RecvTensor RPC when it runs)."""
    return sum(c["sent"] for c in messages_by_task(partition_graphs).values())


def messages_by_task(partition_graphs):
    """Per task ('ps0', 'chief0', 'worker1': job and index), the tensors one run of these
    partition graphs has it send to and receive from other tasks: {task: {"sent", "received"}}."""
    def task(device):
        return device.split("/device:")[0]

    def name(task):   # /job:ps/replica:0/task:1 -> ps1
        parts = dict(p.split(":", 1) for p in task.strip("/").split("/") if ":" in p)
        return f"{parts.get('job', '?')}{parts.get('task', '0')}"
    counts = {}
    for graph in partition_graphs:
        for node in graph.node:
            if node.op not in ("_Recv", "_HostRecv"):
                continue
            src, dst = task(node.attr["send_device"].s.decode()), task(node.attr["recv_device"].s.decode())
            if src != dst:
                counts.setdefault(name(src), {"sent": 0, "received": 0})["sent"] += 1
                counts.setdefault(name(dst), {"sent": 0, "received": 0})["received"] += 1
    return counts


def _traced_traffic(run_metadata):
    rpcs = nbytes = to_ps = from_ps = 0
    tasks = set()
    for dev in run_metadata.step_stats.dev_stats:
        tasks.add(dev.device.split("/device:")[0])
        for node in dev.node_stats:
            if node.node_name != "RecvTensor":
                continue
            size = sum(o.tensor_description.allocation_description.requested_bytes for o in node.output)
            route = node.timeline_label.rsplit(" from ", 1)[-1].split(" to ")
            src, dst = route if len(route) == 2 else ("", "")
            rpcs += 1
            nbytes += size
            to_ps += size if "/job:ps/" in dst else 0
            from_ps += size if "/job:ps/" in src else 0
    return {"recv_tensor_rpcs": rpcs, "bytes": nbytes, "bytes_to_ps": to_ps, "bytes_from_ps": from_ps,
            "tasks": len(tasks)}


_ROW_SOURCES = ("TfpsTableFind", "TfpsTableLookupUnique")


def step_phases(run_metadata):
    """Where the time of one traced training step went, on the trainer (the task that ran the
    gradient ops), in milliseconds from the first op it ran:

      embedding_wait_ms: until the embedding rows the dense model needs were there (the last
        table probe, or the pipeline's dequeue of staged rows);
      dense_ms:          from then until the last gradient op ended (forward and backward);
      push_ms:           from then until the step's last op on any task ended (gradients sent
        and applied, variables read back);
      embedding_graph_ms: until the last table probe result reached the trainer, whatever
        waited on it (with the pipeline: the lookups of a later batch, run concurrently);
      step_ms:           the whole traced step.
    Returns None when the trace holds no gradient ops."""
    nodes = [(d.device, n) for d in run_metadata.step_stats.dev_stats for n in d.node_stats]
    trainer = {dev for dev, n in nodes if n.node_name.startswith("gradients/")}
    if not trainer:
        return None
    mine = [n for dev, n in nodes if dev in trainer]
    start = min(n.all_start_micros for n in mine)
    end = max(n.all_start_micros + n.all_end_rel_micros for _, n in nodes)

    def finish(ns):
        return max((n.all_start_micros + n.all_end_rel_micros for n in ns), default=start)
    staged = [n for n in mine if n.node_name.startswith("tfps_pipeline_") and n.node_name.endswith("_staged")]
    probes = [n for n in mine if any(f"_{src}" in n.timeline_label.split(" from ")[0] or n.node_name.startswith(src)
                                     for src in _ROW_SOURCES)]
    rows = finish(staged) if staged else finish(probes)
    grads = finish([n for n in mine if n.node_name.startswith("gradients/")])
    ms = 1e-3
    return {"embedding_wait_ms": round((rows - start) * ms, 2), "dense_ms": round(max(grads - rows, 0) * ms, 2),
            "push_ms": round(max(end - grads, 0) * ms, 2), "embedding_graph_ms": round((finish(probes) - start) * ms, 2),
            "step_ms": round((end - start) * ms, 2)}
