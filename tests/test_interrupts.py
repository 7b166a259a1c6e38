"""A stopping signal (SIGTERM, SIGHUP) ends a run within seconds, whenever it comes, and
leaves no partial output (issue 45): even where its SystemExit lands inside a queue's code,
and even where the clean-up then hangs."""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES, THOROUGH
from tests.test_inflate import inflate
from trace_gaps.interrupts import STOP_GRACE_S

SAMPLE = SAMPLE_TRACES / "spec_eager.sqlite"
STOPPED = 128 + signal.SIGTERM
# A signal before Python has started trace-gaps ends it by Python's default: killed by the
# signal (the shell's $? is 143 all the same).
KILLED = -signal.SIGTERM


def run_script(script: str, cwd: Path, *args: object) -> tuple[subprocess.Popen[bytes], float]:
    """Run a Python script in a process of its own; wait (at most STOP_GRACE_S + 10 s, then
    kill it) and return it with the seconds it took."""
    child = subprocess.Popen(
        [sys.executable, "-P", "-c", textwrap.dedent(script), *map(str, args)],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    started = time.monotonic()
    try:
        child.wait(timeout=STOP_GRACE_S + 10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    return child, time.monotonic() - started


def test_a_signal_landing_inside_the_read_ahead_queue_still_ends_the_run(tmp_path):
    # The SystemExit of a SIGTERM can land inside Queue.get, after its lock was taken: the
    # read-ahead thread then waits on that lock forever, and a clean-up that joins it too.
    export = Path(shutil.copy(SAMPLE, tmp_path / "r.sqlite"))
    script = """
        import os, signal, sys, time
        from trace_gaps.nsys import read, read_ahead

        read.CHUNK_ROWS = 1_000  # many chunks: the read-ahead thread is still reading
        landed = []

        def signal_inside_the_queue(self):
            if not landed:
                landed.append(True)
                self._made.mutex.acquire()  # as the SystemExit landing in Queue.get leaves it
                time.sleep(0.5)  # the read-ahead thread now waits on it
                os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(60)

        read_ahead.ReadAhead.__next__ = signal_inside_the_queue
        sys.argv = ["trace-gaps", *sys.argv[1:]]
        from trace_gaps.__main__ import main
        main()
    """
    child, took_s = run_script(script, tmp_path, "analyze", export, "-q", "-o", "out.md")
    assert child.returncode == STOPPED, (took_s, child.stderr.read().decode())  # type: ignore[union-attr]
    assert took_s < 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.sqlite"]


def test_a_clean_up_that_hangs_is_ended_by_the_last_resort(tmp_path):
    script = """
        import os, signal, sys, threading
        from pathlib import Path
        from trace_gaps import interrupts

        interrupts.STOP_GRACE_S = 1.0
        interrupts.stop_cleanly_on_signals()
        partial = Path("partial.tmp")
        partial.write_text("half")
        with interrupts.last_resort(partial.unlink):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                threading.Event().wait(60)
            finally:
                threading.Event().wait()  # a clean-up that never ends
    """
    child, took_s = run_script(script, tmp_path)
    assert child.returncode == STOPPED, child.stderr.read().decode()  # type: ignore[union-attr]
    assert 1 <= took_s < 4
    assert list(tmp_path.iterdir()) == []


def test_a_stop_whose_objects_take_long_to_free_still_exits_with_the_signals_code(tmp_path):
    # CI saw `report` end with -14 (SIGALRM) once: after the exit functions Python resets its
    # signal handlers, then frees its objects; freeing a large analysis on a loaded machine
    # outlasted STOP_GRACE_S, and the last resort's alarm met the default handler.
    script = """
        import os, signal, time
        from trace_gaps import interrupts

        interrupts.STOP_GRACE_S = 0.3
        interrupts.stop_cleanly_on_signals()

        class SlowToFree:
            def __del__(self):
                time.sleep(1.0)

        kept = SlowToFree()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    """
    child, took_s = run_script(script, tmp_path)
    assert child.returncode == STOPPED, child.stderr.read().decode()  # type: ignore[union-attr]
    assert took_s < 3.0  # not the object's 1 s teardown after the alarm: it is skipped


def test_a_destructor_failing_on_the_way_out_of_a_stop_prints_nothing(tmp_path):
    # CI saw "Exception ignored in: <function Cursor.__del__ ...> Traceback ... Underflow in
    # closing this AdbcStatement" after a SIGTERM: a reader's cursor freed after its connection
    # was closed on the way out.
    script = """
        import os, signal, time
        from trace_gaps import interrupts

        interrupts.stop_cleanly_on_signals()

        class ClosesTwice:
            def __del__(self):
                raise RuntimeError("Underflow in closing this statement")

        def reading():
            cursor = ClosesTwice()
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)

        reading()
    """
    child, _ = run_script(script, tmp_path)
    stderr = child.stderr.read().decode()  # type: ignore[union-attr]
    assert child.returncode == STOPPED, stderr
    assert stderr == ""


# A run takes about 2 s (analyze) and 4 s (report, its pictures drawn) on two cores: the
# delays cover every stage, from reading the export to writing the outputs.
TRIALS = 40 if THOROUGH else 4


@pytest.fixture(scope="module")
def inflated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample ten times over (98k kernels, 231k CUDA API calls): several chunks of each
    table, so the read-ahead threads run while the signal comes."""
    big = tmp_path_factory.mktemp("inflated") / "big.sqlite"
    inflate(SAMPLE, big, 10)
    return big


@pytest.mark.parametrize(
    ("command", "output", "longest_s"), [("analyze", "out.md", 2.0), ("report", "bundle", 4.0)]
)
def test_sigterm_at_any_time_ends_the_run_within_seconds(
    command, output, longest_s, inflated, tmp_path
):
    delays = random.Random(45).sample(range(1, 100), TRIALS)
    for at, percent in enumerate(sorted(delays)):
        folder = tmp_path / str(at)
        folder.mkdir()
        delay_s = 0.1 + longest_s * percent / 100
        child = subprocess.Popen(
            [sys.executable, "-m", "trace_gaps", command, str(inflated), "-q", "-o", output],
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(delay_s)
        child.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        try:
            _, stderr = child.communicate(timeout=STOP_GRACE_S + 10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            pytest.fail(f"{command}: SIGTERM {delay_s:.2f} s in, still running after 15 s")
        took_s = time.monotonic() - sent
        assert child.returncode in (STOPPED, KILLED, 0), (delay_s, stderr.decode())
        assert b"Traceback" not in stderr, stderr.decode()
        assert took_s < STOP_GRACE_S + 5, (delay_s, took_s)
        # The output whole, or none: no temporary file, no staging folder.
        left = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
        assert not [name for name in left if name.endswith(".tmp")], left
        assert left == [] or (
            f"{output}/report.html" in left if command == "report" else left == [output]
        )


def test_dask_failing_to_remove_its_scratch_after_a_signal_says_nothing():
    # A SIGTERM as the local cluster starts removed the run's scratch folder before the
    # scheduler's own clean-up, which logged "distributed.diskutils - ERROR - Failed to
    # remove ..." on stderr (1 in 3 runs of 4 exports, --jobs 2, SIGTERM at 1.5 s).
    import logging

    pytest.importorskip("distributed")
    from trace_gaps.run.cluster import quiet_dask_logs

    quiet_dask_logs()
    assert not logging.getLogger("distributed.diskutils").isEnabledFor(logging.ERROR)
    assert logging.getLogger("distributed.scheduler").isEnabledFor(logging.ERROR)


@pytest.mark.parametrize(("stop", "code"), [(SystemExit(143), 143), (KeyboardInterrupt(), 130)])
def test_a_stop_while_a_class_is_made_ends_quietly(monkeypatch, capsys, stop, code):
    # CI's thorough run: a SIGTERM while a module loaded, inside a dataclass field's
    # __set_name__, reached the user as "RuntimeError: Error calling __set_name__" and a
    # traceback (Python 3.11 wraps what __set_name__ raises).
    import trace_gaps.cli
    import trace_gaps.interrupts
    from trace_gaps.__main__ import main

    def app() -> None:
        try:
            raise stop
        except BaseException as error:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from error

    monkeypatch.setattr(trace_gaps.interrupts, "stop_cleanly_on_signals", lambda: None)
    monkeypatch.setattr(trace_gaps.cli, "app", app)
    with pytest.raises(SystemExit) as ended:
        main()
    assert ended.value.code == code
    assert capsys.readouterr().err in ("", "error: interrupted\n")


def test_an_error_not_raised_from_a_stop_is_not_taken_for_one(monkeypatch):
    import trace_gaps.cli
    import trace_gaps.interrupts
    from trace_gaps.__main__ import main

    def app() -> None:
        try:
            raise ValueError("a bug")
        except ValueError as error:
            raise RuntimeError("wrapped") from error

    monkeypatch.setattr(trace_gaps.interrupts, "stop_cleanly_on_signals", lambda: None)
    monkeypatch.setattr(trace_gaps.cli, "app", app)
    with pytest.raises(RuntimeError, match="wrapped"):
        main()
