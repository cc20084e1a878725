"""Training across workers, without TensorFlow: the worker's environment, TF_CONFIG, the job file,
the launcher registry and the local launcher's restart and teardown (with stand-in workers)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from components.launchers import (
    LaunchError,
    WorkerSet,
    choose_launcher,
    get_launcher,
    launcher_names,
)
from components.launchers.local import LocalLauncher, free_ports, worker_env
from trainer.config import ConfigError, TrainConfig
from trainer.worker import (
    WorkerEnvError,
    WorkerJob,
    peer_timeout,
    read_worker_job,
    tf_config,
    wait_for_peers,
    worker_hosts,
    worker_index,
    write_worker_job,
)


@pytest.mark.parametrize("value", [0, -1, 1.5, "two", True])
def test_workers_must_be_a_whole_number_of_one_or_more(value):
    with pytest.raises(ConfigError, match="train.workers"):
        TrainConfig.from_dict({"workers": value})


def test_workers_and_launcher_are_read():
    config = TrainConfig.from_dict({"workers": 2.0, "launcher": "local"})  # kfp hands over 2.0
    assert (config.workers, config.launcher) == (2, "local")
    with pytest.raises(ConfigError, match="launcher"):
        TrainConfig.from_dict({"launcher": "tfjob"})


def test_tf_config_lists_the_workers_and_the_task():
    hosts = ["a:2222", "b:2222"]
    assert tf_config(hosts, 1) == {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": 1}}
    with pytest.raises(WorkerEnvError, match="expected 0..1"):
        tf_config(hosts, 2)


def test_the_index_comes_from_the_launcher_or_the_indexed_job():
    assert worker_index({"LTP_WORKER_INDEX": "1", "JOB_COMPLETION_INDEX": "3"}) == 1
    assert worker_index({"JOB_COMPLETION_INDEX": "3"}) == 3
    with pytest.raises(WorkerEnvError, match="LTP_WORKER_INDEX"):
        worker_index({})
    with pytest.raises(WorkerEnvError, match="whole number"):
        worker_index({"LTP_WORKER_INDEX": "x"})


def test_the_peers_come_from_a_list_or_a_pattern():
    assert worker_hosts({"LTP_WORKER_HOSTS": "h0:1, h1:2"}) == ["h0:1", "h1:2"]
    env = {"LTP_WORKERS": "3", "LTP_WORKER_HOST_PATTERN": "train-w-0-{index}.train"}
    assert worker_hosts(env) == [f"train-w-0-{i}.train:2222" for i in range(3)]
    assert worker_hosts({**env, "LTP_WORKER_PORT": "7000"})[2] == "train-w-0-2.train:7000"
    with pytest.raises(WorkerEnvError, match="host:port"):
        worker_hosts({"LTP_WORKER_HOSTS": "h0,h1:2"})
    with pytest.raises(WorkerEnvError, match="LTP_WORKER_HOST_PATTERN"):
        worker_hosts({"LTP_WORKERS": "2", "LTP_WORKER_HOST_PATTERN": "no-index"})


def test_peer_timeout_defaults_and_is_checked():
    assert peer_timeout({}) == 300
    assert peer_timeout({"LTP_PEER_TIMEOUT_S": "2.5"}) == 2.5
    with pytest.raises(WorkerEnvError, match="LTP_PEER_TIMEOUT_S"):
        peer_timeout({"LTP_PEER_TIMEOUT_S": "0"})


def test_waiting_for_peers_names_the_host_that_never_resolved():
    seen = []

    def resolves(host):
        seen.append(host)
        return host != "w-1.train"

    with pytest.raises(WorkerEnvError, match=r"w-1\.train did not resolve within 0.05 s"):
        wait_for_peers(["w-0.train:2222", "w-1.train:2222"], 0.05, resolves=resolves, interval_s=0.01)
    assert seen.count("w-0.train") == 1  # a resolved peer is not asked again
    wait_for_peers(["localhost:2222"], 1)  # the real resolver


def test_the_job_file_round_trips(tmp_path):
    job = WorkerJob("gs://b/ds", "/out/model", TrainConfig(workers=2, epochs=1), "gs://b/model/checkpoints")
    assert read_worker_job(write_worker_job(str(tmp_path / "job.yaml"), job)) == job
    (tmp_path / "bad.yaml").write_text("dataset: d\nextra: 1\n")
    with pytest.raises(ConfigError, match=r"unknown keys \['extra'\] / missing keys \['model_dir'\]"):
        read_worker_job(str(tmp_path / "bad.yaml"))


def test_launcher_registry_and_the_auto_choice():
    assert launcher_names() == ["auto", "job", "jobset", "local"]
    assert isinstance(get_launcher("local"), LocalLauncher)
    with pytest.raises(LaunchError, match="expected one of .*local"):
        get_launcher("nope")
    assert choose_launcher("auto", {}) == "local"
    # In a cluster ``auto`` stays ``auto``: its launcher asks the API whether JobSet is served.
    assert choose_launcher("auto", {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == "auto"
    assert choose_launcher("job", {}) == "job"


def test_a_worker_set_has_two_or_more_workers():
    with pytest.raises(ValueError, match=">= 2"):
        WorkerSet(workers=1, config_path="c", model_dir="m", argv=("x",))


def test_local_workers_get_loopback_peers_and_a_share_of_the_cores():
    ports = free_ports(3)
    assert len(set(ports)) == 3
    hosts = [f"127.0.0.1:{p}" for p in ports]
    env = worker_env(hosts, 2, 4, {"PATH": "/bin"})
    assert env["LTP_WORKER_INDEX"] == "2" and env["LTP_INTRA_OP_THREADS"] == "4" and env["PATH"] == "/bin"
    assert worker_hosts(env) == hosts


# A stand-in worker: records its pid, fails as told on its first start, otherwise succeeds.
FAKE_WORKER = textwrap.dedent(
    """
    import os, sys, time, pathlib
    out = pathlib.Path(sys.argv[1]); mode = sys.argv[2]
    index = os.environ["LTP_WORKER_INDEX"]
    (out / f"pid-{index}-{os.getpid()}").write_text(os.environ["LTP_WORKER_HOSTS"])
    first = not (out / f"started-{index}").exists()
    (out / f"started-{index}").write_text("")
    if index == "1" and (mode == "die-always" or mode == "die-once" and first):
        os.kill(os.getpid(), 9)
    if mode == "bad-input" and index == "1":
        print("error: train.model: no such model"); sys.exit(2)
    if mode == "hang":
        time.sleep(120)
    time.sleep(0.3 if index == "0" else 0.0)
    """
)


def _set(tmp_path, mode, workers=2):
    argv = (sys.executable, "-c", FAKE_WORKER, str(tmp_path), mode)
    return WorkerSet(workers=workers, config_path="unused", model_dir=str(tmp_path), argv=argv)


def _pids(tmp_path):
    return [int(p.name.split("-")[2]) for p in tmp_path.glob("pid-*")]


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_killed_worker_restarts_the_whole_set(tmp_path):
    launcher = LocalLauncher(max_restarts=2, poll_s=0.05, grace_s=2)
    launcher.run(_set(tmp_path, "die-once"))
    assert launcher.starts == 2
    assert len(_pids(tmp_path)) == 4  # both workers started twice, the survivor too
    assert not any(_alive(pid) for pid in _pids(tmp_path))


def test_a_set_that_keeps_failing_stops_after_max_restarts(tmp_path):
    launcher = LocalLauncher(max_restarts=1, poll_s=0.05, grace_s=2)
    with pytest.raises(LaunchError, match=r"worker 1 exited with status -9.*after 1 restarts"):
        launcher.run(_set(tmp_path, "die-always"))
    assert launcher.starts == 2
    assert not any(_alive(pid) for pid in _pids(tmp_path))


def test_bad_input_is_not_restarted_and_its_error_is_named(tmp_path):
    launcher = LocalLauncher(max_restarts=3, poll_s=0.05, grace_s=2)
    with pytest.raises(LaunchError, match=r"worker 1 exited with status 2: error: train.model: no such model"):
        launcher.run(_set(tmp_path, "bad-input"))
    assert launcher.starts == 1
    assert not any(_alive(pid) for pid in _pids(tmp_path))


LAUNCH = textwrap.dedent(
    """
    import sys
    from components.launchers import WorkerSet
    from components.launchers.local import LocalLauncher
    argv = (sys.executable, "-c", sys.argv[2], sys.argv[1], "hang")
    LocalLauncher(grace_s=2).run(WorkerSet(workers=2, config_path="x", model_dir=sys.argv[1], argv=argv))
    """
)


def test_sigterm_to_the_step_leaves_no_worker_behind(tmp_path):
    step = subprocess.Popen(
        [sys.executable, "-c", LAUNCH, str(tmp_path), FAKE_WORKER],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    deadline = time.monotonic() + 60
    while len(_pids(tmp_path)) < 2:
        assert step.poll() is None and time.monotonic() < deadline, step.stdout.read()
        time.sleep(0.05)
    step.send_signal(signal.SIGTERM)
    output, _ = step.communicate(timeout=30)
    assert step.returncode != 0
    assert "stopped by SIGTERM" in output
    assert not any(_alive(pid) for pid in _pids(tmp_path))


def test_a_worker_whose_peers_never_resolve_fails_clearly(tmp_path):
    job = write_worker_job(str(tmp_path / "job.yaml"), WorkerJob(str(tmp_path), str(tmp_path / "m"), TrainConfig()))
    env = {
        **os.environ,
        "PYTHONPATH": os.getcwd(),
        "LTP_WORKER_INDEX": "0",
        "LTP_WORKER_HOSTS": "localhost:2222,ltp-missing-worker.invalid:2222",
        "LTP_PEER_TIMEOUT_S": "0.5",
    }
    out = subprocess.run(
        [sys.executable, "-m", "trainer.worker", "--config", job], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert "ltp-missing-worker.invalid did not resolve within 0.5 s" in out.stderr


def test_the_one_process_trainer_refuses_several_workers(tmp_path):
    from trainer.train import TrainingError, train

    with pytest.raises(TrainingError, match="2 workers are started by the train step's launcher"):
        train(str(tmp_path), str(tmp_path / "m"), TrainConfig(workers=2))
