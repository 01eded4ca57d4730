"""benchmarks/record.py: a benchmark's figures are recorded from committed code only -- a tree
with uncommitted changes is refused before the benchmark runs; what `make bench` writes itself
(the results, docs/benchmarks.md, the plots) does not count."""
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def _record(repo, name, marker):
    """record.py NAME -- a command that writes `marker` (the oracle: did the benchmark run?)."""
    return subprocess.run([sys.executable, str(repo / "benchmarks" / "record.py"), name, "--", sys.executable, "-c",
                           f"open({str(marker)!r}, 'w').close(); print('{{\"x\": 1}}')"],
                          capture_output=True, text=True, timeout=60)


def test_a_dirty_tree_is_refused_before_the_benchmark_runs_and_benchs_own_outputs_do_not_count(tmp_path):
    repo = tmp_path / "repo"
    (repo / "benchmarks" / "results").mkdir(parents=True)
    (repo / "docs").mkdir()
    shutil.copy(os.path.join(ROOT, "benchmarks", "record.py"), repo / "benchmarks")
    (repo / "code.py").write_text("x = 1\n")
    (repo / "docs" / "benchmarks.md").write_text("figures\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "c")
    out = _record(repo, "a", tmp_path / "ran_a")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "ran_a").exists()
    result = json.loads((repo / "benchmarks" / "results" / "a.json").read_text())
    assert result["json"] == {"x": 1} and not result["commit"].endswith("-dirty")
    # What make bench writes (a result, docs/benchmarks.md, a plot) leaves the tree clean for the next.
    (repo / "docs" / "benchmarks.md").write_text("new figures\n")
    (repo / "docs" / "plot.png").write_bytes(b"png")
    assert _record(repo, "b", tmp_path / "ran_b").returncode == 0 and (tmp_path / "ran_b").exists()
    for change in (lambda: (repo / "code.py").write_text("x = 2\n"), lambda: (repo / "new.py").write_text("")):
        _git(repo, "checkout", "-q", "--", "code.py")
        change()
        out = _record(repo, "c", tmp_path / "ran_c")
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert not (tmp_path / "ran_c").exists() and not (repo / "benchmarks" / "results" / "c.json").exists()
        check = subprocess.run([sys.executable, str(repo / "benchmarks" / "record.py"), "--check"],
                               capture_output=True, text=True)
        assert check.returncode == 2
