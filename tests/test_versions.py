"""tfps.runner.versions: an export is a new newest version of its base path, or a refusal."""
import os
import signal
import subprocess
import sys
import threading

import pytest

from tfps.runner import versions
from tfps.runner.versions import ExportRefused, new_version

NOW = 1_700_000_000


def _publish(base, **kwargs):
    with new_version(str(base), **kwargs) as slot:
        os.makedirs(slot.path)
        with open(os.path.join(slot.path, "saved_model.pb"), "w") as f:
            f.write(str(slot.reserved))
    return slot.version


def test_exports_running_at_once_in_one_second_get_distinct_versions(tmp_path):
    """Eight exports reserve their versions at the same clock second, all at once (each holds its
    reservation until all have one): eight distinct versions from NOW up, each published whole."""
    ready, got, errors = threading.Barrier(8), [], []

    def export():
        try:
            with new_version(str(tmp_path), now=NOW) as slot:
                ready.wait(timeout=60)
                os.makedirs(slot.path)
                open(os.path.join(slot.path, "saved_model.pb"), "w").close()
            got.append(slot.version)
        except Exception as e:   # noqa: BLE001 -- reported below
            errors.append(e)
    threads = [threading.Thread(target=export) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(got)) == 8 and min(got) >= NOW   # distinct (one published after a higher one goes above it)
    assert sorted(os.listdir(tmp_path)) == sorted(str(v) for v in got)   # no aside left
    assert sorted(versions.versions(str(tmp_path))) == sorted(got)


def test_an_export_that_finishes_after_a_later_one_is_still_the_newest(tmp_path):
    """Export A reserves a version, export B (started later) reserves the next and finishes
    first: A is published above B's, never below it; with --version given, A is refused."""
    with new_version(str(tmp_path), now=NOW) as a:
        os.makedirs(a.path)
        assert _publish(tmp_path, now=NOW) == NOW + 1    # B
    assert (a.reserved, a.version) == (NOW, NOW + 2)
    assert sorted(os.listdir(tmp_path)) == [str(NOW + 1), str(NOW + 2)]
    with pytest.raises(ExportRefused, match=str(NOW + 100)):
        with new_version(str(tmp_path), version=NOW + 50) as c:
            os.makedirs(c.path)
            assert _publish(tmp_path, version=NOW + 100) == NOW + 100
    assert sorted(map(int, os.listdir(tmp_path))) == [NOW + 1, NOW + 2, NOW + 100]


def test_a_new_export_is_above_every_version_there(tmp_path):
    assert _publish(tmp_path, now=NOW) == NOW
    assert _publish(tmp_path, now=NOW - 50) == NOW + 1     # a clock that went back: still the newest
    assert _publish(tmp_path, now=NOW + 10) == NOW + 10
    assert _publish(tmp_path, version=NOW + 100) == NOW + 100


def test_an_export_below_a_higher_version_is_refused_naming_it(tmp_path):
    os.makedirs(tmp_path / "9999999999")
    with pytest.raises(ExportRefused, match="9999999999"):
        _publish(tmp_path, now=NOW)
    with pytest.raises(ExportRefused, match="--version"):
        _publish(tmp_path / "never", version=-1)   # refused before anything is made
    assert not os.path.exists(tmp_path / "never")
    for v in (5, 9999999999):
        with pytest.raises(ExportRefused, match="9999999999"):
            _publish(tmp_path, version=v)
    assert sorted(os.listdir(tmp_path)) == ["9999999999"]   # nothing written
    assert _publish(tmp_path, version=10**10) == 10**10


def test_a_version_is_named_as_its_directory_is(tmp_path):
    """A version directory with leading zeros (TF Serving reads it as its number): the refusal
    names the directory that is there."""
    os.makedirs(tmp_path / "000099999999999")
    with pytest.raises(ExportRefused) as refused:
        _publish(tmp_path, now=NOW)
    assert str(tmp_path / "000099999999999") in str(refused.value)


def test_an_export_path_that_cannot_be_written_is_refused(tmp_path):
    """A file at the export path, a file on its way, a directory without write permission (a
    read-only file system alike): ExportRefused naming it, nothing written."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(ExportRefused, match="not a directory"):
        _publish(tmp_path / "file")
    with pytest.raises(ExportRefused, match="Not a directory"):
        _publish(tmp_path / "file" / "sub")
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o500)
    try:
        if os.access(locked, os.W_OK):   # root writes anyway: a read-only bind mount is what refuses root
            subprocess.run(["mount", "--bind", "-o", "ro", str(locked), str(locked)], check=True)
            try:
                with pytest.raises(ExportRefused, match="Read-only file system"):
                    _publish(locked, now=NOW)
            finally:
                subprocess.run(["umount", str(locked)], check=True)
        else:
            with pytest.raises(ExportRefused, match="Permission denied"):
                _publish(locked, now=NOW)
    finally:
        os.chmod(locked, 0o700)
    assert os.listdir(locked) == []


def test_a_failed_export_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with new_version(str(tmp_path), now=NOW) as slot:
            os.makedirs(slot.path)
            raise RuntimeError("the export failed")
    assert os.listdir(tmp_path) == []
    # Into a base path that was not there: the directories it made go too, those there before stay.
    with pytest.raises(RuntimeError):
        with new_version(str(tmp_path / "a" / "b" / "models"), now=NOW) as slot:
            os.makedirs(slot.path)
            raise RuntimeError("the export failed")
    assert os.listdir(tmp_path) == []
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "keep").write_text("")
    with pytest.raises(RuntimeError):
        with new_version(str(tmp_path / "a" / "b"), now=NOW):
            raise RuntimeError("the export failed")
    assert os.listdir(tmp_path / "a") == ["keep"]


def test_the_aside_directory_of_a_killed_export_is_removed_and_a_running_ones_kept(tmp_path):
    """One export is killed (SIGKILL) while it writes, another is still running: the next export
    removes the first's aside directory, keeps the second's, and numbers itself above the second's."""
    code = ("import os, sys; from tfps.runner.versions import new_version\n"
            "with new_version(sys.argv[1], now=int(sys.argv[2])) as slot:\n"
            "    os.makedirs(slot.path); print(slot.reserved, flush=True); sys.stdin.read()\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(NOW)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    numbers = [int(p.stdout.readline()) for p in procs]
    assert sorted(numbers) == [NOW, NOW + 1]
    (killed, running), killed_number = procs, numbers[0]
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    asides = {name for name in os.listdir(tmp_path) if name.startswith(".tfps-export-")}
    assert len(asides) == 2
    running_number = numbers[1]
    new = _publish(tmp_path, now=NOW)
    assert new == running_number + 1   # above the running export's (the killed one's number is free again)
    left = {name for name in os.listdir(tmp_path) if name.startswith(".tfps-export-")}
    assert left == asides - {f".tfps-export-{killed_number}"}, (left, killed_number)
    running.stdin.close()
    assert running.wait(timeout=60) == 0   # it finishes after the newer one: published above it
    assert sorted(map(int, os.listdir(tmp_path))) == [new, new + 1]
