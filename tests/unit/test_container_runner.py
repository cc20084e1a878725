"""The container runner's own parts without an engine: the exit code read before removal, the
environment and mounts it passes, the image it insists on; and the variants' resolution check."""

from types import SimpleNamespace

import pytest

from pipelines.tools import container, resolve


class _Container:
    def __init__(self, code):
        self.code, self.removed = code, False

    def logs(self, stream, follow):
        yield b"step output\n"

    def wait(self):
        return {"StatusCode": self.code}

    def remove(self, force):
        self.removed = True


class _Client:
    def __init__(self, code, tags=()):
        self.made, self.code, self.tags = [], code, tags
        self.containers = SimpleNamespace(run=self._run)
        self.images = SimpleNamespace(list=lambda: [SimpleNamespace(tags=list(self.tags))])

    def _run(self, **kwargs):
        self.made.append(kwargs)
        return _Container(self.code)


@pytest.mark.parametrize("code", [0, 1])
def test_the_exit_code_is_read_before_the_container_goes(code, capsys):
    client = _Client(code)
    assert container.run_container(client, "img:1", ["sh"], {}, auto_remove=True, user="1000") == code
    (made,) = client.made
    assert "auto_remove" not in made and made["user"] == "1000" and made["detach"] is True
    assert "step output" in capsys.readouterr().out


def test_what_a_step_in_a_container_gets(tmp_path):
    env = container.passed_environment({"LTP_EXTENSIONS": "my_tasks", "TF_CPP_MIN_LOG_LEVEL": "1", "HOME": "/root"})
    assert env == {"LTP_EXTENSIONS": "my_tasks", "TF_CPP_MIN_LOG_LEVEL": "1"}
    root, outside = tmp_path / "root", tmp_path / "photos"
    (root / "data").mkdir(parents=True)
    outside.mkdir()
    mounts = container.data_mounts([str(outside), str(root / "data"), "fashion-mnist", "gs://b/x"], str(root))
    assert [(m["Source"], m["Target"], m["ReadOnly"]) for m in mounts] == [(str(outside), str(outside), True)]


def test_a_missing_image_is_named_with_the_way_to_build_it():
    with pytest.raises(container.ContainerError, match="make images VARIANTS=cpu"):
        container.check_image(_Client(0, tags=["other:1"]), "ghcr.io/x/y:0.1.0")
    container.check_image(_Client(0, tags=["ghcr.io/x/y:0.1.0"]), "ghcr.io/x/y:0.1.0")


def _report(*pairs):
    return {"install": [{"metadata": {"name": n, "version": v}} for n, v in pairs]}


def test_a_variant_resolves_to_one_tensorflow_and_what_it_needs():
    line = resolve.summary("tpu-vm", _report(("tensorflow_tpu", "2.20.0"), ("libtpu", "0.0.52"), ("keras", "3.15")))
    assert line == "tpu-vm: 3 distributions resolve; tensorflow-tpu 2.20.0, libtpu 0.0.52"
    with pytest.raises(ValueError, match="no libtpu"):
        resolve.summary("tpu-vm", _report(("tensorflow-tpu", "2.20.0")))
    with pytest.raises(ValueError, match="2 TensorFlow distributions"):
        resolve.summary("cpu", _report(("tensorflow", "2.21.0"), ("tensorflow-cpu", "2.21.0")))
