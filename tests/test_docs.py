"""README.md and docs/*.md as a new user follows them: every fenced block runs as written.

Each page's blocks run in order in one scratch directory, as a reader goes down the page (a
server one block starts in the background serves the next; every process a page started is
stopped at its end):
- `python` blocks are executed (a file each, `python FILE`);
- `bash` blocks run with `bash -e` (the venv's `tfps` on PATH, `.venv` the venv that runs
  this test); `/tmp/` in a block means the scratch directory's `tmp/`;
- `yaml` blocks are read as a job config (`tfps.config.load_config`), `json` blocks parsed;
- blocks of another language (`text`, or none) are listings of output, not run.

The scratch directory holds a small copy of configs/ (`train.steps` at most 60 and a checkpoint
every 30 where a config saves by steps: what a block does with a job, not how long it trains, is
under test; a synthetic eval set of 4,096 examples) and small data where the shipped configs
look for theirs (data/: a MovieLens directory in the GroupLens layout and Criteo text files;
day_0.gz and day_1.gz).

A block preceded by `<!-- not run: REASON -->` is illustrative and not run (rare: the reason
says why); one preceded by `<!-- needs: tf.estimator -->` runs where TensorFlow has tf.estimator
(an `estimator` test of its own: `make test-compat TF=2.15` runs it). Pages with bash blocks
are `slow`."""
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(f"docs/{n}" for n in os.listdir(os.path.join(ROOT, "docs")) if n.endswith(".md"))
MARK = re.compile(r"^<!--\s*(not run|needs):\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
RUN = ("python", "bash", "yaml", "json")
MAX_NOT_RUN = 8          # illustrative blocks are rare: each says why
MUTATION = "This mutation will have no effect"   # TensorFlow's warning of an op changed after a session ran it
BLOCK_SECS = 600      # a block that does not end (a server started in the foreground) fails after this


def blocks(page):
    """[(line, language, text, mark)] of a page's fenced blocks; mark: (kind, value) or None."""
    lines = open(os.path.join(ROOT, page)).read().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, language, start = m.group(1), m.group(2), i
        body, i = [], i + 1
        while i < len(lines) and not FENCE.match(lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        mark = MARK.match(previous.strip())
        out.append((start + 1, language, "\n".join(body) + "\n", (mark.group(1), mark.group(2)) if mark else None))
        i += 1
    return out


def _runs(page):
    return [b for b in blocks(page) if b[1] in RUN and b[3] is None]


def _estimator_blocks():
    return [pytest.param(page, line, id=f"{page}:{line}") for page in PAGES
            for line, language, _, mark in blocks(page) if mark == ("needs", "tf.estimator")]


def _page_param(page):
    # Pages that serve on 8500/8501 run one at a time; the others on any worker.
    serves = any(port in text for _, _, text, _ in _runs(page) for port in ("8500", "8501"))
    marks = [pytest.mark.xdist_group("docs_serving_ports")] if serves else []
    if any(language == "bash" for _, language, _, _ in _runs(page)):
        marks.append(pytest.mark.slow)
    return pytest.param(page, marks=marks, id=page)


@pytest.fixture
def scratch(tmp_path):
    """A directory set up as a clone is after `make setup`, with small configs and data."""
    import ml_tiny
    d = tmp_path / "clone"
    (d / "tmp").mkdir(parents=True)
    shutil.copytree(os.path.join(ROOT, "configs"), d / "configs")
    for path in (d / "configs").glob("*.yaml"):
        cfg = yaml.safe_load(path.read_text())
        train, ev = cfg.setdefault("train", {}), cfg.setdefault("eval", {})
        train["steps"] = min(train.get("steps", 60), 60)
        train["log_every_steps"] = min(train.get("log_every_steps", 20), 20)
        if train.get("save_checkpoints_steps"):
            train["save_checkpoints_steps"] = 30
        if ev.get("examples"):
            ev["examples"] = 4096
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    (d / "data" / "ml-latest-small").mkdir(parents=True)
    ml_tiny.write_larger(d / "data" / "ml-latest-small")
    (d / "data" / "criteo").mkdir()
    ml_tiny.write_criteo(d / "data" / "criteo", "train.txt", 3000, "eval.txt", 1000)
    ml_tiny.write_criteo(d, "day_0.gz", 3000, "day_1.gz", 1000)
    os.symlink(sys.prefix, d / ".venv")
    return d


def _env(scratch):
    # TensorFlow's C++ warnings on (level 1): a block in whose run an op was changed after a
    # session ran it fails (_run_block).
    env = dict(os.environ, PYTHONPATH=ROOT, HOME=str(scratch), TF_CPP_MIN_LOG_LEVEL="1")
    env["PATH"] = os.path.join(sys.prefix, "bin") + os.pathsep + env["PATH"]
    env.pop("TF_CONFIG", None)
    return env


def _run_block(page, line, language, text, scratch, groups):
    """Runs one block in scratch; an AssertionError naming the page and line when it fails."""
    where = f"{page}:{line} ({language} block)"
    text = text.replace("/tmp/", f"{scratch}/tmp/")
    if language == "yaml":
        from tfps.config import load_config
        path = scratch / "block.yaml"
        path.write_text(text)
        load_config(str(path))
        return
    if language == "json":
        import json
        json.loads(text)
        return
    path = scratch / f"block_{line}.{'py' if language == 'python' else 'sh'}"
    path.write_text(text)
    argv = [sys.executable, str(path)] if language == "python" else ["bash", "-e", str(path)]
    log = scratch / f"block_{line}.log"   # a file, not a pipe: a server the block leaves running keeps it open
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, cwd=scratch, env=_env(scratch), stdin=subprocess.DEVNULL, stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)
    groups.append(proc.pid)   # its background children stay in its process group: stopped at the page's end
    try:
        proc.wait(timeout=BLOCK_SECS)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError(f"{where} ran past {BLOCK_SECS} s:\n{log.read_text()[-4000:]}") from None
    assert proc.returncode == 0, f"{where} exited {proc.returncode}:\n{log.read_text()[-4000:]}"
    mutations = [line for line in log.read_text().splitlines() if MUTATION in line]
    assert not mutations, f"{where}: TensorFlow warned that an op was changed after a session ran it:\n" + \
        "\n".join(mutations)


def _stop(groups):
    """Stops what a page's blocks left running (a server), SIGKILL after 10 s."""
    import time
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
                alive.append(pgid)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + 10
        while alive and time.monotonic() < deadline:
            alive = [g for g in alive if _group_alive(g)]
            time.sleep(0.1)
        if not alive:
            return


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.parametrize("page", [_page_param(p) for p in PAGES])
def test_every_block_of_a_page_runs_as_written(page, scratch):
    groups = []
    try:
        for line, language, text, _ in _runs(page):
            _run_block(page, line, language, text, scratch, groups)
    finally:
        _stop(groups)


@pytest.mark.estimator
@pytest.mark.parametrize("page, line", _estimator_blocks())
def test_an_estimator_block_runs_where_tensorflow_has_tf_estimator(page, line, scratch):
    (block,) = [b for b in blocks(page) if b[0] == line]
    groups = []
    try:
        _run_block(page, line, block[1], block[2], scratch, groups)
    finally:
        _stop(groups)


def test_blocks_not_run_are_few_and_each_says_why():
    marked = [(page, line, mark) for page in PAGES for line, _, _, mark in blocks(page) if mark]
    not_run = [(page, line, why) for page, line, (kind, why) in marked if kind == "not run"]
    assert all(why for _, _, why in not_run), not_run
    assert len(not_run) <= MAX_NOT_RUN, not_run
    assert all(mark == ("needs", "tf.estimator") for _, _, mark in marked if mark[0] == "needs"), marked
    assert _estimator_blocks(), "the docs show an Estimator example (TF 2.15): docs/training.md"
