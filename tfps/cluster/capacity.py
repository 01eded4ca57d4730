"""What this machine can start: a launch of N tasks refused in one line, before any task, when
its memory or the kernel's thread limit cannot hold them (tfps launch)."""


TASK_THREADS = 64   # threads a running task may start (TF's pools, gRPC): the process bound counts them


def check_capacity(num_tasks):
    """ValueError (one line) when this machine cannot start num_tasks tasks: memory, taking each
    task as large as this process's own memory now (a task starts as a copy of the launcher with
    TensorFlow imported, and grows from there), or the kernel's thread limit (TASK_THREADS each)."""
    per_task = _rss_bytes()
    available = _meminfo("MemAvailable")
    if per_task and available and num_tasks * per_task > available:
        raise ValueError(f"launch: {num_tasks} tasks need about {num_tasks * per_task / 2**30:.1f} GiB "
                         f"({per_task / 2**20:.0f} MiB each, what a task starts with), and this machine has "
                         f"{available / 2**30:.1f} GiB available: at most {max(available // per_task, 1)} tasks "
                         f"(--ps + --workers + evaluator) fit")
    threads_max = _read_int("/proc/sys/kernel/threads-max")
    running = _threads_running()
    if threads_max and running is not None and running + num_tasks * TASK_THREADS > threads_max:
        raise ValueError(f"launch: {num_tasks} tasks may start about {num_tasks * TASK_THREADS} threads, and this "
                         f"machine allows {threads_max - running} more (kernel.threads-max {threads_max}): at most "
                         f"{max((threads_max - running) // TASK_THREADS, 1)} tasks fit")


def _rss_bytes():
    """This process's anonymous resident memory (what a fork of it comes to own as it writes; the
    libraries' pages stay shared)."""
    return _proc_kib("/proc/self/status", "RssAnon")


def _meminfo(key):
    return _proc_kib("/proc/meminfo", key)


def _proc_kib(path, key):
    """The bytes of a `KEY: N kB` line of a /proc file, or None."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _read_int(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _threads_running():
    try:
        with open("/proc/loadavg") as f:   # "0.1 0.2 0.3 running/total last_pid"
            return int(f.read().split()[3].split("/")[1])
    except (OSError, ValueError, IndexError):
        return None
