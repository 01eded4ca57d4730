"""tfps launch's status (tfps.cluster.launch_report) while a job runs: a task's state, and where a running one is (a
trainer's progress, the evaluator's last evaluation), printed when it changes."""
import json

from tfps.cluster import launch_report


class _FakeTask:
    def __init__(self, name, log_path):
        self.name, self.log_path, self.state = name, str(log_path), "running"
        self.type = name.rstrip("0123456789")


def _statuses(task, writes):
    """What _print_status prints over a run whose log is `writes` in turn ((log text, state) each)."""
    shown, printed = {}, []
    for text, state in writes:
        with open(task.log_path, "a") as f:
            f.write(text)
        task.state = state
        launch_report.print_status([task], shown, lambda line, flush=False: printed.append(line))
    return printed


def test_a_trainers_status_is_its_state_and_progress_once_per_change(tmp_path):
    """A worker's log: its start, the placement table and TF's lines (never shown), progress
    lines (shown by their `step N/M (P%)` head, once per change), then its final JSON: `finished`."""
    task = _FakeTask("worker0", tmp_path / "worker0.log")
    table = "".join(f"2026-12-06 02:50:01.123 /job:ps/task:{i}     12      80392304    49.8%\n" for i in range(2))
    printed = _statuses(task, [
        ("2026-12-06 02:50:01.000 worker 0: training to global step 400\n", "running"),
        (table, "running"),
        ("2026-12-06 02:50:02.000 INFO:tensorflow:Restoring parameters from /m/model.ckpt-0\n", "running"),
        ("2026-12-06 02:50:03.000 step 200/400 (50%) loss 0.5608 examples/s 45938 (this task 21296) eta 9s\n",
         "running"),
        ("2026-12-06 02:50:04.000 step 200/400 (50%) loss 0.5608 examples/s 45000 (this task 21000) eta 9s\n",
         "running"),
        (json.dumps({"task": "worker:0", "local_steps": 5}) + "\n", "exited 0"),
        ("", "exited 0")])
    assert printed == ["[worker0] running", "[worker0] running: step 200/400 (50%)", "[worker0] finished"]


def test_the_evaluators_status_says_what_it_evaluated_until_it_exits(tmp_path):
    """The evaluator prints a JSON line per evaluation and goes on to the next checkpoint: it is
    running (`evaluated global step N`), and `finished` only once it exited 0. A PS: its state."""
    task = _FakeTask("evaluator0", tmp_path / "evaluator0.log")
    result = {"task": "evaluator", "global_step": 0, "auc": 0.5}
    printed = _statuses(task, [
        ("INFO:tensorflow:Restoring parameters from /m/model.ckpt-0\n", "running"),
        (json.dumps(result) + "\n", "running"),
        (json.dumps({**result, "global_step": 600}) + "\n", "running"),
        (json.dumps({**result, "global_step": 600, "cpu_allocator": "bfc"}) + "\n", "exited 0")])
    assert printed == ["[evaluator0] running", "[evaluator0] running: evaluated global step 0",
                       "[evaluator0] running: evaluated global step 600", "[evaluator0] finished"]
    ps = _FakeTask("ps1", tmp_path / "ps1.log")
    assert _statuses(ps, [("ps 1 serving at 127.0.0.1:1\n", "running"), ("", "exited -9")]) == \
        ["[ps1] running", "[ps1] exited -9"]


def test_the_final_jsons_unavailable_reasons_are_short_and_said_once_per_field():
    from tfps.cluster.cost import Meter, cost
    out = cost(Meter(), {}, ["ps0", "chief0"], {"chief0": {}})
    reasons = out["unavailable"]
    assert {"bytes_sent_per_step", "bytes_received_per_step", "packets_sent_per_step",
            "packets_received_per_step"} <= set(reasons)
    assert all(len(why) <= 80 for why in reasons.values()), reasons
