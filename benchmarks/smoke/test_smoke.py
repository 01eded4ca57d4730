"""`make bench-smoke`: each benchmark's shortest run, checked (outside `make test`, which they would
double; .ci/run runs both)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args, timeout=900):
    out = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_scaling_benchmark_runs_its_smallest_cell():
    """benchmarks/bench_scaling.py --quick (10^5 keys, dim 16): every phase runs and reports, on
    2 threads and pinned to 1, with bench_floor's floor at 1 and 2 threads beside it."""
    (cell,) = _run("benchmarks/bench_scaling.py", "--quick", timeout=600)
    assert (cell["n"], cell["dim"]) == (10**5, 16)
    tfps_rates = ("insert", "lookup_uniform", "lookup_zipf", "lookup_ro_uniform", "lookup_ro_zipf",
                  "adagrad_uniform", "adagrad_zipf", "adam_uniform")
    for phase, rates in (("tfps", tfps_rates), ("tfps_1thread", tfps_rates),
                         ("dht", ("insert", "lookup_uniform", "lookup_zipf")),
                         ("variable", ("adagrad_uniform", "adagrad_zipf", "gather_uniform"))):
        assert all(cell[phase][r] > 0 for r in rates), cell[phase]
    assert cell["skipped"] == {}
    assert sorted(f["threads"] for f in cell["floor"]) == [1, 2]
    for f in cell["floor"]:
        assert (f["n"], f["dim"]) == (10**5, 16)
        for pages in ("floor", "huge"):
            assert all(f[r] > 0 and f[f"{r}_cpu_ns"] > 0 for r in (f"{pages}_lookup", f"{pages}_rmw1", f"{pages}_rmw2")), f
    for key in ("memory", "memory_slot"):
        (rows, reserved, *_), split = cell["tfps"][key]
        assert rows == 10**5 and split[0] + split[1] + split[3] + split[4] == reserved


def test_the_benchmarks_load_run_has_no_failed_request_across_a_swap_and_deltas():
    """benchmarks/bench_serving.py --quick: its load run (a trainer writing deltas that the
    server follows, a new version dropped in) in short."""
    result = _run("benchmarks/bench_serving.py", "--quick", "--no-plot")
    load = result["load_run"]
    assert load["failed"] == 0 and load["qps"] > 0
    assert load["versions_answered"] == 2   # from the answers' model_spec
    for mode in result["latency"].values():
        assert all(cell["failed"] == 0 and cell["qps"] > 0 for cell in mode.values())
    # The servers' CPU per request (the echo floor's and tfps's) and the ratios are reported.
    served = [result["latency"][m][c] for m in ("gRPC echo (floor)", "gRPC", "gRPC + batching") for c in ("1", "8", "32")]
    assert all(cell["server_cpu_us_per_request"] > 0 for cell in served)
    assert all(r["grpc_vs_echo"] > 0 and r["grpc_vs_in_process"] > 0 for r in result["ratios"].values())


def _train(tmp_path, name, *sets):
    """`tfps train` of the demo model, 1500 steps: its final JSON."""
    args = [a for s in ["train.steps=1500", f"model_dir={tmp_path / name}", *sets] for a in ("--set", s)]
    return _run("-m", "tfps.cli", "train", "--config", "configs/demo.yaml", *args, timeout=600)


def test_the_pipelined_demo_model_reaches_the_auc_of_the_plain_step(tmp_path):
    off = _train(tmp_path, "off")
    on = _train(tmp_path, "on", "pipeline.enabled=true")
    assert abs(on["auc"] - off["auc"]) <= 0.005, (on["auc"], off["auc"])


def test_the_scaling_model_fits_the_kept_calibration_and_predicts():
    """benchmarks/scaling_model.py on the kept runs (benchmarks/results/scaling/runs.json): every
    calibration run is read (the measured rates are the launcher's, recomputed here from the kept
    final JSON lines), every held-out run gets a prediction, and a curve per system and PS count."""
    result = _run("benchmarks/scaling_model.py", "--no-plot", timeout=300)
    with open(os.path.join(ROOT, "benchmarks", "results", "scaling", "runs.json")) as f:
        runs = json.load(f)["runs"]
    clusters = [r for r in runs if r["workers"] and not r["extra"]]
    assert len(result["checks"]) == len(clusters) == 20
    for check, run in zip(result["checks"], clusters):
        window = run["final"]["cost"]["window"]
        assert check["measured"] == round(window["examples"] / window["seconds"]), (check, window)
        assert check["predicted"] > 0
    assert sum(c["held_out"] for c in result["checks"]) == 12
    assert set(result["curves"]) == {"tfps P=8", "tfps P=32", "stock P=8", "stock P=32", "stock, 1e+08 rows P=32"}
    for system in ("tfps", "stock"):
        assert all(v > 0 for v in result["saturation"][system]["workers_per_ps"].values())


def test_the_cluster_batch_benchmark_compares_both_batch_sizes():
    """benchmarks/bench_cluster_batch.py --quick: a pipelined 2 PS + 1 worker cluster and one process
    at batch 1024 and 4096; each pair's ratios and the cluster's extra CPU per step come from the
    two runs' own figures."""
    result = _run("benchmarks/bench_cluster_batch.py", "--quick", timeout=900)
    assert sorted(result) == ["1024", "4096"]
    for batch, cell in result.items():
        ((one, cluster),) = cell["runs"]
        assert one["examples_per_sec"] > 0 and cluster["examples_per_sec"] > 0
        assert cell["speed_ratio"] == [round(cluster["examples_per_sec"] / one["examples_per_sec"], 3)]
        assert cell["extra_cpu_ms_per_step"] == [
            round((cluster["cpu_us_per_example"] - one["cpu_us_per_example"]) * int(batch) / 1000, 2)]
        assert set(cluster["tasks"]) == {"ps0", "ps1", "chief0"}
        assert abs(cluster["auc"] - one["auc"]) <= 0.01   # the same model trained, whichever runs it


def test_the_stock_step_benchmark_compares_one_process_and_the_cluster_at_both_loop_lengths():
    """benchmarks/bench_stock_step.py --quick: stock TF's model as one process and as 2 PS + a chief,
    1 and 16 steps per session.run. The PS's counter shows every step run was applied (64 timed and
    the warm-up's: 64 runs of 1 step, 4 runs of 16), each ratio comes from the runs' own figures and
    the cluster's CPU is its three processes', each of them busy."""
    result = _run("benchmarks/bench_stock_step.py", "--quick", timeout=600)
    for k in ("1", "16"):
        ((one, cluster),) = result[k]["runs"]
        warmup = max(3, 64 // int(k)) * int(k)
        assert one["steps_applied"] == cluster["steps_applied"] == warmup + 64
        assert one["steps_per_sec"] > 0 and cluster["steps_per_sec"] > 0
        assert len(one["tasks"]) == 1 and len(cluster["tasks"]) == 3 and min(cluster["tasks"]) >= 0.5, cluster
        assert result[k]["cpu_ratio"] == [round(cluster["cpu_ms_per_step"] / one["cpu_ms_per_step"], 3)]
        assert result[k]["extra_cpu_ms_per_step"] == [round(cluster["cpu_ms_per_step"] - one["cpu_ms_per_step"], 2)]
    extra = {k: result[k]["extra_cpu_ms_per_step"][0] for k in ("1", "16")}
    assert result["loop_ratio"] == [round(extra["16"] / extra["1"], 3)]


def test_the_export_benchmark_measures_both_formats():
    """benchmarks/bench_export.py --quick (10^3 rows, the fixed cost, then 10^5): both formats
    exported, loaded in fresh processes (the stock one without tfps) and served; the stock export
    carries no optimizer slot, so it is smaller on disk than the tfps one, and its graph does not
    hold the rows. The 10^5 export's growth is measured against the 10^3 one's peak."""
    small, cell = _run("benchmarks/bench_export.py", "--quick", timeout=900)
    assert (small["n"], cell["n"]) == (10**3, 10**5)
    fixed = {f: small[f]["export_peak_bytes"] for f in ("stock", "tfps")}
    assert small["fixed_export_bytes"] == cell["fixed_export_bytes"] == fixed
    for f in ("stock", "tfps"):
        side = cell[f]
        assert side["export_growth"] == (side["export_peak_bytes"] - fixed[f]) / side["table_bytes"]
    stock, tfps = cell["stock"], cell["tfps"]
    assert stock["tfps_loaded"] is False and tfps["tfps_loaded"] is True
    assert stock["disk_bytes"] < tfps["disk_bytes"] and stock["pb_bytes"] < cell["table_bytes"] / 10
    for fmt in (stock, tfps):
        assert fmt["load_s"] > 0 and fmt["loaded_bytes"] > 0 and fmt["peak_bytes"] >= fmt["loaded_bytes"]
        assert all(fmt["rps"][b] > 0 for b in ("1", "64", "1024")), fmt["rps"]


def test_the_checkpoint_benchmark_saves_and_restores_over_ps_tasks():
    """benchmarks/bench_checkpoint.py --ps 1,2 --rows 50000: the table saved and restored over 1
    and 2 PS tasks and 3 into 4, every row exact, each PS's growth and the floor measured."""
    result = _run("benchmarks/bench_checkpoint.py", "--ps", "1,2", "--rows", "50000", timeout=600)
    assert [(r["save_ps"], r["restore_ps"]) for r in result["runs"]] == [(1, 1), (2, 2), (3, 4)]
    for r in result["runs"]:
        assert r["exact"] and r["save_s"] > 0 and r["restore_s"] > 0 and r["checkpoint_bytes"] > 50000 * 136
        assert len(r["save_growth"]) == r["save_ps"] and len(r["restore_growth"]) == r["restore_ps"]
        assert len(r["restore_shard_bytes"]) == r["restore_ps"] and min(r["restore_shard_bytes"]) > 0
    assert [f["ps"] for f in result["floors"]] == [1, 2] and all(f["save_s"] > 0 for f in result["floors"])
