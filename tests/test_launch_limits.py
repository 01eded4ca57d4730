"""tfps launch at the machine's limits: a launch of more tasks than the machine can hold is
refused before it starts anything, and a fork that fails stops the tasks already started."""
import os
import time

import pytest

pytestmark = pytest.mark.slow   # it starts processes


def test_a_launch_beyond_the_machine_is_refused_before_it_starts_anything(tmp_path, cli):
    for ps in ("500", "99999999999999999999"):   # (the second: counted, not listed, before the refusal)
        code, _, err = cli("launch", "--config", "configs/demo.yaml", "--ps", ps, "--set", f"model_dir={tmp_path / 'm'}")
        assert code == 2, err[-2000:]
        assert not (tmp_path / "m").exists()


def test_a_fork_that_fails_stops_the_tasks_already_started(tmp_path, monkeypatch):
    """The third fork of a launch fails (EAGAIN, as when the machine is out of processes): the
    launcher stops the two tasks it started and returns 1, with no exception."""
    from tfps.cluster import launch as launch_lib
    from tfps.cluster.launch_config import LaunchConfig
    started = []
    real = launch_lib.fork_task

    def third_fails(*args, **kwargs):
        if len(started) == 2:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        child = real(*args, **kwargs)
        started.append(child.pid)
        return child
    monkeypatch.setattr(launch_lib, "fork_task", third_fails)
    lines = []
    code = launch_lib.launch(LaunchConfig(num_ps=2, num_workers=2, model_dir=str(tmp_path / "m")),
                             task_main=lambda argv: time.sleep(120), printer=lambda *a, **k: lines.append(a[0]))
    assert code == 1 and len(started) == 2
    for pid in started:
        with pytest.raises(ProcessLookupError):   # stopped and reaped
            os.kill(pid, 0)
