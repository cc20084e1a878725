r"""``python -m trainer.worker --config JOB``: one worker of a training across several processes or pods.

Every worker of a set runs this same command with the same job file (:func:`write_worker_job`:
the dataset, the chief's model folder, the checkpoint folder and the ``TrainConfig``). What
differs between them comes from the environment:

- its index: ``LTP_WORKER_INDEX``, or ``JOB_COMPLETION_INDEX`` (set by Kubernetes in an Indexed
  Job, which a JobSet's jobs are);
- its peers: ``LTP_WORKER_HOSTS`` (``host:port,host:port``, in index order), or ``LTP_WORKERS``
  with ``LTP_WORKER_HOST_PATTERN`` (a hostname containing ``{index}``) and ``LTP_WORKER_PORT``
  (2222 by default);
- ``LTP_PEER_TIMEOUT_S`` (300 by default): how long to wait for the peers' names to resolve (pods
  start at different times) and how long a collective waits for a lost peer before it fails.

The worker builds ``TF_CONFIG`` (:func:`tf_config`, the same one the local launcher uses), waits
for its peers, then trains under ``MultiWorkerMirroredStrategy`` (``trainer.multiworker``).
Worker 0 is the chief: it writes the model folder; the others write theirs into temporary
folders they delete. Exit status: 0 done, 2 bad config, dataset or environment, 1 a failed
training.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

import yaml

from trainer import storage
from trainer.config import ConfigError, TrainConfig
from trainer.errors import TrainingError

if TYPE_CHECKING:
    from trainer.train import TrainingSummary

log = logging.getLogger(__name__)

DEFAULT_PORT = 2222
DEFAULT_PEER_TIMEOUT_S = 300.0


class WorkerEnvError(ValueError):
    """The environment does not say which worker this is or where its peers are."""


@dataclasses.dataclass(frozen=True)
class WorkerJob:
    """What every worker of a set trains (the job file's content).

    Attributes:
        dataset: the dataset folder (local or gs://).
        model_dir: the chief's model folder (the step's output).
        config: the training settings (``workers`` says how many workers there are).
        checkpoint_dir: where the chief writes checkpoints (and every worker restores from);
            ``None`` for ``<model_dir>/checkpoints``.
        started_at: when the train step started (``time.time()`` seconds), where a budget's clock
            starts for every worker; None: each worker's own process start.
    """

    dataset: str
    model_dir: str
    config: TrainConfig
    checkpoint_dir: Optional[str] = None
    started_at: Optional[float] = None

    def to_yaml(self) -> str:
        """The job file's text."""
        data = {
            "dataset": self.dataset,
            "model_dir": self.model_dir,
            "checkpoint_dir": self.checkpoint_dir,
            **({"started_at": self.started_at} if self.started_at is not None else {}),
        }
        return yaml.safe_dump({**data, "train": self.config.to_dict()}, sort_keys=False)


def write_worker_job(path: str, job: WorkerJob) -> str:
    """Writes the job file (local or gs://) every worker reads; returns ``path``."""
    storage.write_text(path, job.to_yaml())
    return path


def read_worker_job(path: str) -> WorkerJob:
    """Reads a job file written by :func:`write_worker_job`.

    Raises:
        ConfigError: the file is not a mapping, misses ``dataset`` or ``model_dir``, has unknown
            keys, or its ``train`` section is invalid.
    """
    data = yaml.safe_load(storage.read_text(path))
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a YAML mapping (dataset, model_dir, checkpoint_dir, train), got {data!r}")
    known = {"dataset", "model_dir", "checkpoint_dir", "started_at", "train"}
    unknown = sorted(set(data) - known)
    missing = sorted({"dataset", "model_dir"} - set(data))
    if unknown or missing:
        raise ConfigError(f"{path}: unknown keys {unknown} / missing keys {missing}; expected {sorted(known)}")
    return WorkerJob(
        dataset=str(data["dataset"]),
        model_dir=str(data["model_dir"]),
        config=TrainConfig.from_dict(data.get("train") or {}),
        checkpoint_dir=data.get("checkpoint_dir"),
        started_at=None if data.get("started_at") is None else float(data["started_at"]),
    )


# --------------------------------------------------------------------------- the environment


def _env_int(env: Mapping[str, str], name: str) -> Optional[int]:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise WorkerEnvError(f"{name}: expected a whole number, got {raw!r}") from None


def worker_index(environ: Optional[Mapping[str, str]] = None) -> int:
    """This worker's index: ``LTP_WORKER_INDEX``, else ``JOB_COMPLETION_INDEX``.

    Raises:
        WorkerEnvError: neither is set, or the value is not a whole number >= 0.
    """
    env = os.environ if environ is None else environ
    for name in ("LTP_WORKER_INDEX", "JOB_COMPLETION_INDEX"):
        index = _env_int(env, name)
        if index is not None:
            if index < 0:
                raise WorkerEnvError(f"{name}: expected an index >= 0, got {index}")
            return index
    raise WorkerEnvError(
        "worker index: set LTP_WORKER_INDEX (or run in an Indexed Job, which sets JOB_COMPLETION_INDEX)"
    )


def worker_hosts(environ: Optional[Mapping[str, str]] = None) -> list[str]:
    """The workers' ``host:port`` addresses in index order, from the environment.

    Raises:
        WorkerEnvError: neither ``LTP_WORKER_HOSTS`` nor ``LTP_WORKERS`` with a pattern holding
            ``{index}`` is set, or a value is malformed.
    """
    env = os.environ if environ is None else environ
    explicit = env.get("LTP_WORKER_HOSTS", "").strip()
    if explicit:
        hosts = [h.strip() for h in explicit.split(",") if h.strip()]
        bad = [h for h in hosts if not h.rpartition(":")[2].isdigit()]
        if bad:
            raise WorkerEnvError(f"LTP_WORKER_HOSTS: expected host:port items, got {bad[0]!r} in {explicit!r}")
        return hosts
    count = _env_int(env, "LTP_WORKERS")
    pattern = env.get("LTP_WORKER_HOST_PATTERN", "")
    if count is None or "{index}" not in pattern:
        raise WorkerEnvError(
            "worker peers: set LTP_WORKER_HOSTS (host:port,host:port) or LTP_WORKERS with "
            f"LTP_WORKER_HOST_PATTERN containing {{index}}; got LTP_WORKERS={env.get('LTP_WORKERS')!r}, "
            f"LTP_WORKER_HOST_PATTERN={pattern!r}"
        )
    if count < 1:
        raise WorkerEnvError(f"LTP_WORKERS: expected a whole number >= 1, got {count}")
    port = _env_int(env, "LTP_WORKER_PORT") or DEFAULT_PORT
    return [f"{pattern.replace('{index}', str(i))}:{port}" for i in range(count)]


def peer_timeout(environ: Optional[Mapping[str, str]] = None) -> float:
    """``LTP_PEER_TIMEOUT_S`` (seconds, 300 by default).

    Raises:
        WorkerEnvError: not a positive number.
    """
    env = os.environ if environ is None else environ
    raw = env.get("LTP_PEER_TIMEOUT_S", "").strip()
    try:
        value = float(raw) if raw else DEFAULT_PEER_TIMEOUT_S
    except ValueError:
        raise WorkerEnvError(f"LTP_PEER_TIMEOUT_S: expected seconds, got {raw!r}") from None
    if not value > 0:
        raise WorkerEnvError(f"LTP_PEER_TIMEOUT_S: expected seconds > 0, got {raw!r}")
    return value


def tf_config(hosts: Sequence[str], index: int) -> dict[str, Any]:
    """The ``TF_CONFIG`` of worker ``index`` of ``hosts`` (``MultiWorkerMirroredStrategy`` reads it).

    Raises:
        WorkerEnvError: no hosts, or an index outside them.
    """
    if not hosts:
        raise WorkerEnvError("TF_CONFIG: expected at least one worker address, got none")
    if not 0 <= index < len(hosts):
        raise WorkerEnvError(f"worker index: expected 0..{len(hosts) - 1} for {len(hosts)} workers, got {index}")
    return {"cluster": {"worker": list(hosts)}, "task": {"type": "worker", "index": index}}


def _resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, None)
    except OSError:
        return False
    return True


def wait_for_peers(
    hosts: Sequence[str],
    timeout_s: float,
    *,
    resolves: Callable[[str], bool] = _resolves,
    interval_s: float = 1.0,
) -> None:
    """Waits until every worker's hostname resolves (pods get their DNS names as they start).

    Raises:
        WorkerEnvError: a hostname still does not resolve after ``timeout_s`` (named in the message).
    """
    deadline = time.monotonic() + timeout_s
    pending = [h.rpartition(":")[0] for h in hosts]
    while True:
        pending = [h for h in pending if not resolves(h)]
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise WorkerEnvError(
                f"worker peers: {', '.join(pending)} did not resolve within {timeout_s:g} s "
                "(LTP_PEER_TIMEOUT_S); check that every worker started and that the hostnames follow "
                "the set's headless Service or JobSet subdomain"
            )
        time.sleep(interval_s)


# --------------------------------------------------------------------------- the training


def train_worker(
    job: WorkerJob, index: int, timeout_s: float, on_progress: Optional[Callable[..., None]] = None
) -> Optional[TrainingSummary]:
    """Trains as worker ``index`` of ``job.config.workers``; the chief writes ``job.model_dir``.

    ``on_progress`` is the training's progress (``trainer.train.train``'s), told on the chief only.

    Returns:
        The training summary on the chief; ``None`` on the other workers.

    Raises:
        TrainingError: the set's size in ``TF_CONFIG`` differs from ``job.config.workers``, or the
            training failed (the trainer's errors).
    """
    from trainer.budget.layout import process_started_at
    from trainer.multiworker import WorkerRole, apply_threads, multiworker_strategy
    from trainer.train import train

    apply_threads()
    strategy = multiworker_strategy(timeout_s)
    workers = strategy.cluster_resolver.cluster_spec().num_tasks("worker")
    if workers != job.config.workers:
        raise TrainingError(
            f"train.workers: the job says {job.config.workers} workers, TF_CONFIG lists {workers}; "
            "start the set with as many workers as the config says"
        )
    scratch = None if index == 0 else tempfile.mkdtemp(prefix=f"ltp-worker-{index}-")
    role = WorkerRole(strategy=strategy, index=index, workers=job.config.workers, scratch_dir=scratch)
    try:
        summary = train(
            job.dataset,
            job.model_dir,
            job.config,
            checkpoint_dir=job.checkpoint_dir,
            role=role,
            on_progress=on_progress,
            started_at=job.started_at if job.started_at is not None else process_started_at(),
        )
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return summary if role.chief else None


# --------------------------------------------------------------------------- the command


def _run(job_path: str, on_progress: Optional[Callable[..., None]] = None) -> int:
    from trainer.tasks import TaskError
    from trainer.tfrecords import DatasetError

    try:
        job = read_worker_job(job_path)
        index, hosts, timeout = worker_index(), worker_hosts(), peer_timeout()
        os.environ["TF_CONFIG"] = json.dumps(tf_config(hosts, index))
        wait_for_peers(hosts, timeout)
    except (ConfigError, WorkerEnvError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    log.info("worker %d of %d (%s), peers %s", index, len(hosts), hosts[index], hosts)
    try:
        summary = train_worker(job, index, timeout, on_progress)
    except (DatasetError, TaskError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except TrainingError as err:
        print(f"error: worker {index}: {err}", file=sys.stderr)
        return 1
    if summary is not None:  # the chief: the launcher reads the summary from training.json
        log.info("worker %d: training finished at step %d", index, summary.steps)
    return 0


def main(argv: Sequence[str] | None = None, on_progress: Optional[Callable[..., None]] = None) -> int:
    """Parses the command line and runs this worker (exit status: 0 done, 2 bad input, 1 failed).

    ``on_progress`` is told the training's progress on the chief (the train step's worker command
    prints progress lines with it: ``components.train.worker``).
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    parser = argparse.ArgumentParser(prog="python -m trainer.worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the worker job file (local or gs://)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return _run(args.config, on_progress)


if __name__ == "__main__":
    sys.exit(main())
