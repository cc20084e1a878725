"""A real GCS emulator (``gcp-storage-emulator``) on loopback for the integration tests."""

import contextlib
import os
import socket
import subprocess
import sys
import time

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_emulator(bucket: str):
    """Starts the emulator with ``bucket``, points STORAGE_EMULATOR_HOST at it, and yields its URL.

    The process-wide storage client is dropped on the way in and out, so that every client made
    inside sees the emulator and none made outside does.
    """
    from trainer import storage

    port = _free_port()
    command = [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--in-memory", "--default-bucket", bucket, "-q"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("the GCS emulator did not start")
            time.sleep(0.1)
    old = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = url = f"http://127.0.0.1:{port}"
    storage.reset_client()
    try:
        yield url
    finally:
        storage.reset_client()
        if old is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = old
        proc.terminate()
        proc.wait(timeout=10)
