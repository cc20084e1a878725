"""Running a pipeline's steps in the project image under kfp.local (``make run RUNNER=container``).

kfp.local's ``DockerRunner`` starts each step's container as a cluster would: the compiled
component's command (``python3 -m kfp.dsl.executor_main`` on the step's source) with its executor
input, here as user 1000 with the pipeline root bind-mounted at its own path. It talks to the
Docker API: Docker's daemon, or Podman's (``podman system service``), which :func:`engine` starts
for the run where no daemon answers. What kfp 2.17.3 leaves to its caller, done here:

- the image must exist under the exact name the compiled components give (``components.images``),
  or kfp pulls it; :func:`check_image` fails first, naming ``make images``;
- kfp runs the container with ``auto_remove`` and takes a container gone before ``wait()`` for a
  success (and Podman answers that inspect with a 500, not docker-py's 404):
  :func:`run_container` replaces its runner, keeps the container until its exit code is read, then
  removes it, so a failing step fails;
- a local data folder outside the pipeline root is bind-mounted read-only at its own path
  (``mounts``; the runner refuses ``volumes``), and the pipeline root is made writable for
  user 1000;
- ``LTP_EXTENSIONS`` and the ``TF_*`` settings of this process are passed in.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

USER = "1000"
PASSED_ENV = ("LTP_EXTENSIONS",)
PASSED_PREFIXES = ("TF_",)


class ContainerError(RuntimeError):
    """No engine answers, or the image is missing; the message says what to do."""


def passed_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of this process a step in a container gets too."""
    return {k: v for k, v in environ.items() if k in PASSED_ENV or k.startswith(PASSED_PREFIXES)}


def data_mounts(paths: Sequence[str], pipeline_root: str) -> list[Any]:
    """Read-only bind mounts of the local paths outside the pipeline root (a ``DATA`` folder or file)."""
    import docker

    mounts = []
    root = os.path.realpath(pipeline_root)
    for path in paths:
        if not path or "://" in path or not os.path.exists(path):
            continue  # a built-in source, gs://, or a name the step resolves itself
        real = os.path.realpath(path)
        if real == root or real.startswith(root + os.sep):
            continue
        mounts.append(docker.types.Mount(target=real, source=real, type="bind", read_only=True))
    return mounts


def _answers(argv: Sequence[str]) -> bool:
    return shutil.which(argv[0]) is not None and subprocess.run(list(argv), capture_output=True).returncode == 0


@contextlib.contextmanager
def engine(environ: Mapping[str, str] = os.environ) -> Iterator[str]:
    """The Docker API socket for the run (``DOCKER_HOST``): the one set, Docker's, or a Podman service.

    Podman's service is started for the run and stopped after it.

    Raises:
        ContainerError: neither engine answers.
    """
    if environ.get("DOCKER_HOST"):
        yield environ["DOCKER_HOST"]
        return
    if _answers(["docker", "info"]):
        yield ""
        return
    if not _answers(["podman", "info"]):
        raise ContainerError(
            "RUNNER=container needs a container engine: neither 'docker info' nor 'podman info' answers; "
            "start Docker, or install Podman (apt-get install podman runc)"
        )
    folder = tempfile.mkdtemp(prefix="ltp-podman-")
    socket = f"unix://{folder}/podman.sock"
    service = subprocess.Popen(["podman", "system", "service", "--time=0", socket], stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if os.path.exists(f"{folder}/podman.sock"):
                break
            time.sleep(0.1)
        yield socket
    finally:
        service.terminate()
        service.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


def check_image(client: Any, image: str) -> None:
    """Refuses to go on without the image under its exact name (kfp would try to pull it).

    Raises:
        ContainerError: the engine has no image of that name.
    """
    tags = {tag for found in client.images.list() for tag in found.tags}
    wanted = image if ":" in image.rsplit("/", 1)[-1] else f"{image}:latest"
    if wanted not in tags:
        raise ContainerError(
            f"no image {wanted!r} in the container engine: build it with 'make images VARIANTS=cpu' "
            "(the name the compiled components give; see components/images.py), or tag yours so"
        )


def run_container(client: Any, image: str, command: list[str], volumes: dict[str, Any], **run_args: Any) -> int:
    """Runs one step's container to its end and returns its exit code (kfp's runner, without auto-remove)."""
    run_args.pop("auto_remove", None)
    container = client.containers.run(
        image=image, command=command, detach=True, stdout=True, stderr=True, volumes=volumes, **run_args
    )
    try:
        for line in container.logs(stream=True, follow=True):
            print(line.decode(errors="replace"), end="")
        return int(container.wait()["StatusCode"])
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)


def runner(pipeline_root: str, data: Sequence[str] = (), environ: Mapping[str, str] = os.environ) -> Any:
    """kfp.local's ``DockerRunner`` for the project image, with :func:`run_container` in kfp's place.

    Args:
        pipeline_root: the run's pipeline root (made writable for the image's user 1000).
        data: local paths a step reads outside the pipeline root (mounted read-only).
        environ: where ``LTP_EXTENSIONS`` and ``TF_*`` come from.
    """
    import docker
    from kfp import local
    from kfp.local import docker_task_handler

    from components.images import PROJECT_IMAGE

    check_image(docker.from_env(), PROJECT_IMAGE)
    docker_task_handler.run_docker_container = run_container  # kfp 2.17.3: see the module docstring
    os.chmod(pipeline_root, 0o777)  # user 1000 writes the steps' outputs there
    args: dict[str, Any] = {"user": USER, "environment": passed_environment(environ)}
    mounts = data_mounts(data, pipeline_root)
    if mounts:
        args["mounts"] = mounts
    return local.DockerRunner(**args)
