"""tfps.cluster.launch's status while a job runs: a task's line is printed when its state or the
last line of its log changes, whole, and a finished task's JSON is not repeated."""
import json

from tfps.cluster import launch


class _FakeTask:
    def __init__(self, name, log_path):
        self.name, self.log_path, self.state = name, str(log_path), "running"


def test_a_tasks_status_is_printed_once_per_change_whole_and_its_final_json_as_finished(tmp_path):
    log = tmp_path / "worker0.log"
    long_line = "placement: " + " | ".join(f"/job:ps/task:{i} {i * 1000} bytes" for i in range(12))
    assert len(long_line) > 200
    task, shown, printed = _FakeTask("worker0", log), {}, []

    def status():
        launch._print_status([task], shown, lambda line, flush=False: printed.append(line))
        return printed[-1] if printed else None
    log.write_text("2026-12-06 02:50:01.123 starting\n")
    assert status() == "[worker0] running: starting"       # the time stamp is the log's, not the status's
    status()
    assert len(printed) == 1                                  # unchanged: not printed again
    log.write_text(f"starting\n2026-12-06 02:50:02.000 {long_line}\n")
    assert status() == f"[worker0] running: {long_line}"    # whole
    task.state = "exited 0"
    log.write_text(f"{long_line}\n" + json.dumps({"task": "worker:0", "local_steps": 5}) + "\n")
    assert status() == "[worker0] exited 0: finished"
    status()
    status()
    assert len(printed) == 3


def test_the_final_jsons_unavailable_reasons_are_short_and_said_once_per_field():
    from tfps.cluster.cost import Meter, cost
    out = cost(Meter(), {}, ["ps0", "chief0"], {"chief0": {}})
    reasons = out["unavailable"]
    assert {"bytes_sent_per_step", "bytes_received_per_step", "packets_sent_per_step",
            "packets_received_per_step"} <= set(reasons)
    assert all(len(why) <= 80 for why in reasons.values()), reasons
