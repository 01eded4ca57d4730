"""What `tfps launch` prints of its tasks: a task's status while the job runs (its state, a
trainer's progress, the evaluator's last evaluation), the caps, the cost per task and a task's
summary from its log's last JSON line."""
import json
import os
import re

from tfps.cluster.process import untimestamped


def lines(path):
    """The last lines of a log (its last 16 KiB), without their time stamps."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            return [untimestamped(line) for line in f.read().decode(errors="replace").strip().splitlines()]
    except OSError:
        return []


def last_line(path, json_only=False):
    """The last line of a log (the last JSON object line with json_only), or ''."""
    found = lines(path)
    if json_only:
        found = [line for line in found if line.startswith("{") and line.endswith("}")]
    return found[-1] if found else ""


def caps_words(tasks, groups):
    """The launch line's words on the memory caps ('' without)."""
    if groups is None:
        return ""
    caps = ", ".join(f"{t.name} {t.cap_mib} MiB" for t in tasks if t.cap_mib)
    return f"; memory caps {caps} (a cgroup per task in {groups.parent}, cgroup v{groups.hierarchy.version})"


def print_status(tasks, shown, printer):
    """Each task's status when it changed since shown {task name: what was printed}."""
    for t in tasks:
        now = status(t)
        if shown.get(t.name) != now:
            shown[t.name] = now
            printer(f"[{t.name}] {now}", flush=True)


PROGRESS = re.compile(r"step \d+(/\d+ \(\d+%\))?")   # the head of a trainer's progress line (ProgressHook)


def status(t):
    """A task's state, and where a running task is: a trainer's last progress (`step N/M (P%)`), the
    evaluator's last evaluation (`evaluated global step N`; it goes on to the next checkpoint).
    A task that exited 0 has `finished`. Nothing else of the log (placement tables, TF's lines)."""
    state = t.state
    if state == "exited 0":
        return "finished"
    if state != "running":
        return state
    if t.type in ("chief", "master", "worker"):
        progress = [m.group(0) for m in map(PROGRESS.match, lines(t.log_path)) if m]
        return f"running: {progress[-1]}" if progress else "running"
    if t.type == "evaluator":
        last = last_line(t.log_path, json_only=True)
        try:
            step = json.loads(last).get("global_step") if last else None
        except ValueError:
            step = None
        return f"running: evaluated global step {step}" if step is not None else "running"
    return state


TASK_WORDS = {"local_steps": "steps run by this task", "task_examples_per_sec": "examples/s of its own",
               "global_step": "global step", "cpu_allocator": "CPU allocator"}


def task_words(key, value):
    return f"{value} {TASK_WORDS[key]}" if key in ("local_steps", "task_examples_per_sec") else \
        f"{TASK_WORDS.get(key, key)} {value}"


def print_cost(c, printer):
    if c["total"]["cpu_s_per_1k_examples"] is None:
        return
    for name, row in c["tasks"].items():
        parts = [f"{row['cpu_s_per_1k_examples']} CPU-s per 1k examples"]
        if row.get("bytes_sent_per_step") is not None:
            parts.append(f"{row['bytes_sent_per_step'] / 1024:.1f} KiB sent and "
                         f"{row['bytes_received_per_step'] / 1024:.1f} KiB received per step")
        if row.get("messages_per_step") is not None:
            parts.append(f"{row['messages_per_step']:g} messages per step")
        printer(f"[{name}] cost: {', '.join(parts)}", flush=True)
    printer(f"cluster: {c['total']['cpu_s_per_1k_examples']} CPU-s per 1k examples over {c['window']['examples']} "
            f"examples of the steady window", flush=True)
    for name, row in c.get("evaluation", {}).items():
        printer(f"[{name}] cost: {row['cpu_seconds']} CPU-s in all, evaluating checkpoints (not counted per training "
                f"example)", flush=True)


def json_line(task):
    """The task's last JSON line (its final metrics), or {}."""
    line = last_line(task.log_path, json_only=True)
    try:
        return json.loads(line) if line else {}
    except json.JSONDecodeError:
        return {}


def summary(task):
    metrics = json_line(task)
    keep = ("local_steps", "task_examples_per_sec", "global_step", "auc", "loss", "cpu_allocator")
    return {k: metrics[k] for k in keep if k in metrics} or {"state": task.state}
