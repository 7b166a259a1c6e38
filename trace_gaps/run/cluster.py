"""The Dask cluster a command runs on: a local one for --jobs, or the scheduler given with
--scheduler, checked to answer as one within one deadline.

dask.distributed bounds only the TCP connect with its timeout: a server that accepts the
connection and then stays silent (any TCP service, a load balancer, a stopped scheduler
process) holds Dask's handshake read forever, and one that answers with other bytes (an
HTTP server) makes it read a frame length of exabytes. Before a Client is made, the
scheduler is asked who it is, with the connection, the handshake and the first answer
under one deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from trace_gaps.errors import TraceGapsError, env_seconds
from trace_gaps.streams import say, silence_stderr

SCHEDULER_TIMEOUT_S = 10.0
# A scheduler no worker joins takes tasks and never runs them: wait this long for one.
WORKERS_TIMEOUT_S = 30.0
WORKERS_TIMEOUT_ENV = "TRACE_GAPS_WORKERS_TIMEOUT_S"
CONNECT_SHARE = 0.8  # of the deadline, for the TCP connection (retried by Dask meanwhile)


@contextmanager
def dask_client(jobs: int | None, scheduler: str | None) -> Iterator[Any]:
    """A dask.distributed Client for --scheduler, else for --jobs (a local cluster); None
    without either."""
    if jobs is None and scheduler is None:
        yield None
        return
    try:
        import dask
        from dask.distributed import Client
    except ImportError:
        raise TraceGapsError(
            "--jobs and --scheduler run on Dask, which is not installed: "
            "pip install 'trace-gaps[dask]'."
        ) from None
    if scheduler is not None:
        # Dask's own timeout would not cover a server that accepts and stays silent.
        check_scheduler(scheduler, timeout_s=SCHEDULER_TIMEOUT_S)
        try:
            client = Client(scheduler, timeout=SCHEDULER_TIMEOUT_S)  # type: ignore[no-untyped-call]
        except OSError as error:
            raise TraceGapsError(
                f"cannot reach the Dask scheduler at {scheduler}: {error}. Check the address."
            ) from None
        with client:
            wait_for_a_worker(client, scheduler)
            yield client
        return
    # The workers' scratch space (dask-scratch-space with its lock files) in a folder of
    # this run, removed with it: Dask's default, $TMPDIR/dask-scratch-space, outlives it.
    said = False
    try:
        with contextlib.ExitStack() as stack:
            try:
                scratch = stack.enter_context(
                    tempfile.TemporaryDirectory(
                        prefix="trace-gaps-dask-", ignore_cleanup_errors=True
                    )
                )
                stack.enter_context(dask.config.set({"temporary-directory": scratch}))
                cluster = stack.enter_context(_local_cluster(jobs, scratch))
                yield stack.enter_context(Client(cluster))  # type: ignore[no-untyped-call]
            except KeyboardInterrupt:
                said = _say_interrupted()
                raise
    except KeyboardInterrupt:  # one that came as the cluster closed
        if not said:
            _say_interrupted()
        raise


def _say_interrupted() -> bool:
    """Say the interrupt now, before the cluster closes, and let nothing more reach stderr:
    what Dask prints as it is torn down midway (its atexit hook closing a cluster that had
    not started, a nanny's errors) is no news."""
    say("error: interrupted")
    silence_stderr()
    return True


def _local_cluster(jobs: int | None, scratch: str) -> Any:
    """A local cluster of `jobs` worker processes whose stderr is /dev/null: a Ctrl-C at the
    terminal reaches every process of its group, and each worker printed the traceback of
    its KeyboardInterrupt (or its logs) before this process said `error: interrupted`. A
    task's exception still comes back to this process, which says it; this process's own
    Dask logs below ERROR (a worker killed as the cluster closes) are not shown either."""
    from dask.distributed import LocalCluster

    quiet_dask_logs()
    # The workers are spawned while descriptor 2 is /dev/null; they keep it.
    with contextlib.suppress(ValueError, OSError):
        sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        return LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=jobs,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            local_directory=scratch,
        )
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def quiet_dask_logs() -> None:
    """Let only this process's Dask errors reach stderr, and not those of its scratch space:
    a signal as the cluster starts removes the run's scratch folder (its TemporaryDirectory)
    before the scheduler removes its own part of it, and Dask logged that it could not."""
    import logging

    logging.getLogger("distributed").setLevel(logging.ERROR)
    logging.getLogger("distributed.diskutils").setLevel(logging.CRITICAL)


def wait_for_a_worker(client: Any, address: str) -> None:
    """Raise TraceGapsError, naming the address, unless a worker has joined the scheduler
    within workers_timeout_s()."""
    timeout_s = workers_timeout_s()
    try:
        client.wait_for_workers(1, timeout=timeout_s)
    except TimeoutError:  # distributed's WorkerStartTimeoutError is one
        raise TraceGapsError(
            f"the Dask scheduler at {address} has no workers: none joined within "
            f"{timeout_s:g} s. Start one (dask worker {address}), or set "
            f"{WORKERS_TIMEOUT_ENV} to wait longer."
        ) from None


def workers_timeout_s() -> float:
    """How long to wait for a worker on --scheduler: WORKERS_TIMEOUT_ENV, else
    WORKERS_TIMEOUT_S."""
    return env_seconds(WORKERS_TIMEOUT_ENV, WORKERS_TIMEOUT_S)


def check_scheduler(address: str, *, timeout_s: float = SCHEDULER_TIMEOUT_S) -> None:
    """Raise TraceGapsError, naming the address, unless a Dask scheduler answers there
    within timeout_s (connection, handshake and first answer together)."""
    shown = repr(address) if not address.strip() else address
    try:
        identity = asyncio.run(asyncio.wait_for(_identity(address, timeout_s), timeout_s))
    except TimeoutError:
        raise TraceGapsError(
            f"the Dask scheduler at {shown} did not answer within {timeout_s:g} s: something "
            "accepts connections there but does not speak Dask. Check the address "
            "(tcp://HOST:PORT of a dask scheduler)."
        ) from None
    except ValueError as error:  # Dask's parsing of the address: no port, unknown scheme
        raise TraceGapsError(
            f"--scheduler {shown} is not a Dask scheduler address ({error}); give tcp://HOST:PORT."
        ) from None
    except OSError as error:  # refused, unreachable, closed midway (CommClosedError)
        raise TraceGapsError(
            f"cannot reach the Dask scheduler at {shown}: {error}. Check the address."
        ) from None
    except Exception as error:  # noqa: BLE001 - whatever another server's bytes raise in Dask
        raise TraceGapsError(
            f"the server at {shown} does not answer as a Dask scheduler "
            f"({type(error).__name__}). Check the address."
        ) from None
    if not isinstance(identity, dict) or identity.get("type") != "Scheduler":
        raise TraceGapsError(
            f"the server at {shown} is not a Dask scheduler (it answered as "
            f"{_kind(identity)}). Check the address."
        )


async def _identity(address: str, timeout_s: float) -> Any:
    from distributed.comm.core import connect

    # Dask's own timeout covers the TCP connect only, and gives up (OSError) before the
    # deadline: a timeout of the deadline itself is a connection that stayed silent.
    comm = await connect(address, timeout=CONNECT_SHARE * timeout_s)  # type: ignore[no-untyped-call]
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


def _kind(identity: object) -> str:
    if isinstance(identity, dict):
        return repr(str(identity.get("type", "something else")))[:40]
    return type(identity).__name__
