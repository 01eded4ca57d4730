"""Runs one benchmark and keeps what it printed, dated: `python benchmarks/record.py NAME -- CMD...`.

The benchmark's output goes to the terminal as it comes, and into benchmarks/results/NAME.json:
its lines (the ratios it prints against the built-in or peer it replaces), its final JSON line
when it ends with one, the date, the commit and the machine. `make bench` runs every benchmark
this way, then benchmarks/report.py writes docs/benchmarks.md from the results: re-measuring
changes no prose. Exits with the benchmark's code (a failed run records nothing).

Figures come from committed code only: with uncommitted changes in the tree (`git status
--porcelain`, untracked files included; benchmarks/results/, docs/benchmarks.md and the plots
in docs/, which `make bench` itself writes, aside) it refuses in one line and runs nothing (exit 2).
`python benchmarks/record.py --check` makes only that check (`make bench` runs it first)."""
import datetime
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


def _commit():
    def git(*args):
        return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("-dirty" if _dirty() else "")   # (the results make bench writes are not the code)


WRITTEN_BY_BENCH = ("benchmarks/results", "docs/benchmarks.md", "docs/*.png")   # what make bench writes


def _dirty():
    """The `git status --porcelain` lines of the tree, but for what `make bench` writes."""
    out = subprocess.run(["git", "status", "--porcelain", "--", ".", *[f":!{p}" for p in WRITTEN_BY_BENCH]],
                         cwd=os.path.dirname(HERE), capture_output=True, text=True)
    return out.stdout.splitlines()


def _refuse_dirty():
    """Exit code 2 and one line when the tree has uncommitted changes, else 0."""
    dirty = _dirty()
    if dirty:
        print(f"record.py: the tree has {len(dirty)} uncommitted change(s) ({dirty[0].strip()}, ...): figures are "
              f"recorded from committed code only; commit or stash them first", file=sys.stderr)
        return 2
    return 0


def main(argv):
    if argv == ["--check"]:
        return _refuse_dirty()
    if len(argv) < 3 or argv[1] != "--":
        raise SystemExit("usage: record.py NAME -- CMD [ARGS...]")
    name, cmd = argv[0], argv[2:]
    if _refuse_dirty():
        return 2
    started, commit = datetime.datetime.now(datetime.timezone.utc), _commit()   # the code that runs
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        lines.append(line.rstrip("\n"))
    code = proc.wait()
    if code != 0:
        print(f"record.py: {name} exited {code}; nothing recorded", file=sys.stderr)
        return code
    final = None
    if lines and lines[-1].lstrip().startswith(("{", "[")):
        try:
            final = json.loads(lines[-1])
            lines = lines[:-1]
        except ValueError:
            pass
    path = os.path.join(RESULTS, f"{name}.json")   # NAME may be DIR/NAME (e.g. a TF line's: tf-2.15/bench_step)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    result = {"benchmark": name, "command": " ".join(cmd), "date": started.strftime("%Y-%m-%d"),
              "seconds": round((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds(), 1),
              "commit": commit, "cores": os.cpu_count(), "lines": lines, "json": final}
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
