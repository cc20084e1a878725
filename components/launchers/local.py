"""The ``local`` launcher: the workers as processes on this machine, talking over loopback.

Each worker gets free loopback ports for the whole set (``LTP_WORKER_HOSTS``, the ``TF_CONFIG``
of ``trainer.worker.tf_config``), its index and a share of the cores
(``intra_op_parallelism_threads = max(1, cores // workers)``, through ``LTP_INTRA_OP_THREADS``).
It applies a JobSet's failure policy itself: when a worker fails, every worker is stopped and the
whole set started again (it resumes from the chief's last checkpoint), up to ``max_restarts``
times. A worker that fails on bad input (exit status 2: config, dataset, environment) is not
restarted: the same input would fail again. Nothing it started outlives :meth:`LocalLauncher.run`,
also when the step gets SIGTERM.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from typing import IO, Optional

from components.launchers.base import DEFAULT_MAX_RESTARTS, Launcher, LaunchError, WorkerSet
from trainer.worker import tf_config

log = logging.getLogger(__name__)

EXIT_BAD_INPUT = 2  # the worker's status for bad config, dataset or environment (trainer.worker)
_TAIL_LINES = 20


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on loopback now (the OS picks them)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def worker_env(
    hosts: list[str], index: int, threads: int, base: Mapping[str, str], scratch: Optional[str] = None
) -> dict[str, str]:
    """The environment of local worker ``index``: its index, its peers, its ``TF_CONFIG``, its threads.

    ``scratch`` becomes its ``TMPDIR``: the launcher deletes it, so even a killed worker's
    temporary folders go.
    """
    return {
        **base,
        **({"TMPDIR": scratch} if scratch else {}),
        "LTP_WORKER_INDEX": str(index),
        "LTP_WORKER_HOSTS": ",".join(hosts),
        "TF_CONFIG": json.dumps(tf_config(hosts, index)),
        "LTP_INTRA_OP_THREADS": str(threads),
    }


class _Worker:
    """One running worker process, its output relayed to stderr with its index, the last lines kept."""

    def __init__(self, index: int, argv: tuple[str, ...], env: Mapping[str, str]) -> None:
        self.index = index
        self.tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        # A session of its own: the worker and anything it starts are one process group to stop.
        self.proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.relay = threading.Thread(target=self._relay, args=(self.proc.stdout,), daemon=True)
        self.relay.start()

    def _relay(self, stream: IO[str]) -> None:
        for line in stream:
            self.tail.append(line.rstrip())
            sys.stderr.write(f"[worker {self.index}] {line}")

    def stop(self, grace_s: float) -> None:
        """Stops the worker's process group: SIGTERM, then SIGKILL after ``grace_s``."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.relay.join(timeout=5)

    def cause(self) -> str:
        """The worker's exit and its last error line (or last line), for a message."""
        errors = [line for line in self.tail if line.startswith("error:") or "Error" in line]
        last = (errors or list(self.tail) or ["(no output)"])[-1]
        return f"worker {self.index} exited with status {self.proc.returncode}: {last}"


class _Terminated(Exception):
    """The launcher's process got SIGTERM."""


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turns SIGTERM into :class:`_Terminated` while the set runs (main thread only; elsewhere no change)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise _Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class LocalLauncher(Launcher):
    """Runs a :class:`WorkerSet` as local processes with a JobSet's restart-all policy.

    Args:
        max_restarts: how many times the whole set is started again after a worker failed.
        cores: the cores the workers share; ``None`` for this machine's (``os.cpu_count()``).
        poll_s: how often the workers' states are looked at.
        grace_s: how long a stopped worker has to exit before it is killed.
    """

    name = "local"

    def __init__(
        self,
        max_restarts: int = DEFAULT_MAX_RESTARTS,
        cores: Optional[int] = None,
        poll_s: float = 0.2,
        grace_s: float = 5.0,
    ) -> None:
        self.max_restarts = max_restarts
        self.cores = cores or os.cpu_count() or 1
        self.poll_s = poll_s
        self.grace_s = grace_s
        self.starts = 0  # sets started by the last run (1 + restarts)

    def run(self, workers: WorkerSet) -> None:
        """Runs the set until every worker succeeded, restarting all of them after a failure.

        Raises:
            LaunchError: a worker failed on bad input, failed again after ``max_restarts``
                restarts, or the launcher got SIGTERM (every worker is stopped first).
        """
        self.starts = 0
        scratch = tempfile.mkdtemp(prefix="ltp-workers-")
        try:
            with _sigterm_raises():
                self._run_set(workers, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _run_set(self, workers: WorkerSet, scratch: str) -> None:
        cause = ""
        for attempt in range(self.max_restarts + 1):
            self.starts += 1
            failed = self._run_once(workers, scratch)
            if failed is None:
                return
            cause = failed.cause()
            if failed.proc.returncode == EXIT_BAD_INPUT:
                raise LaunchError(f"{cause}; not restarted: the same input would fail again")
            if attempt < self.max_restarts:
                log.warning(
                    "%s; restarting all %d workers (%d of %d)", cause, workers.workers, attempt + 1, self.max_restarts
                )
        raise LaunchError(f"{cause}; the set failed after {self.max_restarts} restarts")

    def _run_once(self, workers: WorkerSet, scratch: str) -> Optional[_Worker]:
        """Starts every worker and waits; returns the first that failed (all stopped), or None."""
        hosts = [f"127.0.0.1:{port}" for port in free_ports(workers.workers)]
        threads = max(1, self.cores // workers.workers)
        log.info("starting %d local workers on %s (%d threads each)", workers.workers, ",".join(hosts), threads)
        started: list[_Worker] = []
        try:
            for index in range(workers.workers):
                started.append(_Worker(index, workers.argv, worker_env(hosts, index, threads, os.environ, scratch)))
            return self._wait(started)
        except _Terminated:
            raise LaunchError(
                f"stopped by SIGTERM; the {workers.workers} workers were stopped (their checkpoints in "
                f"{workers.model_dir} remain: the same step resumes from them)"
            ) from None
        finally:
            for worker in started:
                worker.stop(self.grace_s)

    def _wait(self, started: list[_Worker]) -> Optional[_Worker]:
        running = list(started)
        while running:
            for worker in list(running):
                status = worker.proc.poll()
                if status is None:
                    continue
                if status != 0:
                    return worker
                log.info("worker %d finished", worker.index)
                running.remove(worker)
            time.sleep(self.poll_s)
        return None
