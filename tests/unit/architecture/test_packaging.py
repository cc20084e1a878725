"""Packaging: every imported module is declared, the built-in sources work from the image's
dependencies, and every entry point sets TensorFlow's load-time environment itself."""

import ast
import functools
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("trainer", "components", "pipelines")
# What the Dockerfile installs: the base dependencies plus one of these extras (VARIANT).
CONTAINER_EXTRAS = ("cpu", "gpu", "tpu", "tpu-vm")
TENSORFLOW_BUILDS = {"tensorflow", "tensorflow-cpu", "tensorflow-tpu"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(req: str) -> str:
    return _norm(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req).group(1))


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _imports() -> dict[str, set[str]]:
    """Absolute imports of the three packages: dotted module name -> files importing it."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    # "from google.cloud import storage": the name may be a module (namespace packages)
                    names = [f"{node.module}.{a.name}" for a in node.names]
                for name in names:
                    if name.split(".")[0] not in sys.stdlib_module_names | set(PACKAGES):
                        found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


@functools.cache
def _packages_distributions() -> dict:
    return importlib.metadata.packages_distributions()


@functools.cache
def _files(dist: str) -> tuple[str, ...]:
    return tuple(str(f) for f in importlib.metadata.distribution(dist).files or [])


@functools.cache
def _distribution_of(module: str) -> str:
    """The installed distribution that provides ``module`` (namespace packages such as google.*
    are shared by several: the one holding the module's own folder or file)."""
    top = module.split(".")[0]
    candidates = _packages_distributions().get(top, [])
    if len(candidates) == 1:
        return _norm(candidates[0])
    parts = module.split(".")
    for depth in range(len(parts), 1, -1):
        prefix = "/".join(parts[:depth])
        owners = {
            _norm(dist)
            for dist in candidates
            if any(f.startswith(prefix + "/") or f == prefix + ".py" for f in _files(dist))
        }
        if len(owners) == 1:
            return owners.pop()
    # the package itself ("import kfp"): whoever installs its __init__.py
    owners = {_norm(dist) for dist in candidates if f"{top}/__init__.py" in _files(dist)}
    if len(owners) == 1:
        return owners.pop()
    raise AssertionError(f"cannot tell which distribution provides {module} (candidates {candidates})")


# What an extra leaves out on purpose, with the reason (pyproject.toml says it too).
LEFT_OUT = {
    # keras-hub's tensorflow-text requires the `tensorflow` wheel: a second TensorFlow next to
    # tensorflow-tpu. The Dockerfile installs keras-hub there with --no-deps, after the extra.
    "tpu-vm": {"keras-hub": "installed with --no-deps by the Dockerfile"},
}


def test_every_imported_module_is_declared():
    project = _project()
    base = {_requirement_name(r) for r in project["dependencies"]}
    extras = project["optional-dependencies"]
    for extra in CONTAINER_EXTRAS:
        declared = base | {_requirement_name(r) for r in extras[extra]}
        missing = {}
        for module, files in _imports().items():
            dist = _distribution_of(module)
            if dist in TENSORFLOW_BUILDS:  # each extra names its own TensorFlow build
                ok = bool(declared & TENSORFLOW_BUILDS)
            else:
                ok = dist in declared
            if not ok and dist not in LEFT_OUT.get(extra, {}):
                missing[module] = (dist, sorted(files)[0])
        assert not missing, (
            f"imported but not declared for the [{extra}] image: "
            + "; ".join(f"{m} (distribution {d}, imported in {f})" for m, (d, f) in sorted(missing.items()))
            + ". Add the distribution to [project] dependencies, or to the container extras if it needs TensorFlow."
        )


def test_the_scan_sees_what_it_checks():
    """The audit above would pass vacuously if the scan found nothing."""
    imports = _imports()
    assert {"google_crc32c", "urllib3", "kfp", "numpy", "yaml"} <= {m.split(".")[0] for m in imports}
    assert _distribution_of("google.cloud.storage") == "google-cloud-storage"
    assert _distribution_of("google.api_core.exceptions") == "google-api-core"
    assert _distribution_of("PIL.Image") == "pillow"


def test_no_runtime_module_needs_the_dev_extra():
    """scikit-learn (dev only) is imported by no runtime module: the digits data ships in the package."""
    assert not [m for m in _imports() if m.split(".")[0] == "sklearn"]
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "digits.npz" in package_data["components.image_input"]
    assert (ROOT / "components" / "image_input" / "digits.npz").is_file()


def test_the_tpu_vm_image_gets_keras_hub_without_tensorflow_text():
    """keras-hub's pin is the other images'; its dependencies but tensorflow-text are in the extra."""
    project = _project()
    extras = project["optional-dependencies"]
    pin = next(r for r in extras["cpu"] if _requirement_name(r) == "keras-hub")
    assert f"pip install $PIP_ARGS --no-deps {pin}" in (ROOT / "Dockerfile").read_text()
    declared = {_requirement_name(r) for r in [*project["dependencies"], *extras["tpu-vm"]]}
    assert "tensorflow-text" not in declared and not declared & {"tensorflow", "tensorflow-cpu"}
    wanted = {_requirement_name(r) for r in importlib.metadata.requires("keras-hub") or [] if "extra ==" not in r}
    assert wanted - declared == {"tensorflow-text"}


def test_the_dockerfile_installs_the_declared_extras_and_sets_onednn():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ENV .*\bTF_ENABLE_ONEDNN_OPTS=1\b", text, re.M)
    assert 'pip install $PIP_ARGS -e ".[$VARIANT]"' in text and 'pip install $PIP_ARGS -e ".[tpu-vm]"' in text
    assert not re.search(r"pip install[^\n]*(scikit-learn|sklearn)", text)


def _run(code: str, env_changes: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL")}
    env.update(env_changes, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_digits_source_works_without_scikit_learn(tmp_path):
    """What the image has: no scikit-learn. The built-in source still converts (and no download)."""
    code = f"""
import sys
sys.modules["sklearn"] = None  # importing it now raises ImportError, as in the image
from components.convert.convert import convert
from components.convert.config import ConvertConfig
m = convert(ConvertConfig(source="digits", limit_per_split=20, workers=1), {str(tmp_path / "ds")!r}, log=lambda s: None)
print(m["source"]["fingerprint"], {{k: v["count"] for k, v in m["splits"].items()}})
"""
    proc = _run(code, {})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "{'train': 20, 'validation': 20, 'test': 20}" in proc.stdout


def test_shipped_digits_are_scikit_learns():
    """The shipped arrays and fingerprint are what the source read from scikit-learn before."""
    np = pytest.importorskip("numpy")
    datasets = pytest.importorskip("sklearn.datasets")
    import hashlib

    import sklearn

    from components.image_input import sources

    images, labels = sources.digits.digits_file()[:2]
    d = datasets.load_digits()
    np.testing.assert_array_equal(images, np.rint(d.images * (255.0 / 16.0)).astype(np.uint8))
    np.testing.assert_array_equal(labels, d.target.astype(np.int64))
    assert images.dtype == np.uint8 and labels.dtype == np.int64
    _, _, version = sources.digits.digits_file()
    if version == sklearn.__version__:
        digest = hashlib.sha256(images.tobytes()).hexdigest()
        want = sources.fingerprint(["sklearn-digits", sklearn.__version__, digest])
        assert sources.open_source("digits").fingerprint == want


# --------------------------------------------------------------------------------------------
# TensorFlow's load-time environment
# --------------------------------------------------------------------------------------------


def test_importing_the_packages_sets_nothing_and_the_helper_sets_it():
    code = """
import os
import components.serving.server, components.convert.component, trainer, trainer.config, trainer.runtime
print("import:", os.environ.get("TF_ENABLE_ONEDNN_OPTS"), os.environ.get("TF_CPP_MIN_LOG_LEVEL"))
print("helper:", trainer.runtime.configure_tensorflow_env())
"""
    proc = _run(code, {})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "import: None None" in proc.stdout
    assert "helper: {'TF_ENABLE_ONEDNN_OPTS': '1', 'TF_CPP_MIN_LOG_LEVEL': '1'}" in proc.stdout


def test_a_value_the_user_set_wins():
    code = "import trainer.runtime; print(trainer.runtime.configure_tensorflow_env())"
    proc = _run(code, {"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "{'TF_ENABLE_ONEDNN_OPTS': '0', 'TF_CPP_MIN_LOG_LEVEL': '1'}" in proc.stdout


def _first_statements(fn: ast.FunctionDef) -> list[str]:
    body = fn.body[1:] if isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) else fn.body
    return [ast.unparse(s) for s in body[:2]]


def test_every_component_body_sets_the_environment_first():
    """A component body is shipped alone and runs in a fresh process: it must set the variables
    before anything it imports can import TensorFlow."""
    want = ["from trainer.runtime import configure_tensorflow_env", "configure_tensorflow_env()"]
    bodies = 0
    for path in sorted((ROOT / "components").glob("*/component.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and any(
                ast.unparse(d).startswith("project_component") for d in node.decorator_list
            ):
                bodies += 1
                assert _first_statements(node) == want, f"{path.name}:{node.name} must start with {want}"
    assert bodies >= 10


def _handed_over(node: ast.AST) -> list[str]:
    """Files whose ``main`` this code imports (``from trainer.__main__ import main as run``)."""
    return [
        n.module.replace(".", "/") + ".py"
        for n in ast.walk(node)
        if isinstance(n, ast.ImportFrom) and n.module and any(a.name == "main" for a in n.names)
    ]


def test_every_command_line_sets_the_environment():
    """Each CLI's main() calls configure_tensorflow_env() (python -m components.<step>, trainer, the server).

    A command line that hands over to another one's ``main`` (``python -m components.train`` to
    ``trainer.__main__``) is covered by that one's check.
    """
    checked = {"trainer/__main__.py", "components/serving/server.py"}
    mains = sorted((ROOT / "components").rglob("__main__.py")) + [ROOT / p for p in sorted(checked)]
    checked |= {str(p.relative_to(ROOT)) for p in mains}
    for path in mains:
        rel = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text())
        main = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"), None)
        sets = main is not None and any(
            isinstance(n, ast.Call) and ast.unparse(n.func).endswith("configure_tensorflow_env") for n in ast.walk(main)
        )
        handed = _handed_over(main if main is not None else tree)
        assert sets or (handed and all(h in checked for h in handed)), (
            f"{rel}: main() must call trainer.runtime.configure_tensorflow_env() before anything imports "
            f"TensorFlow (or hand over to a checked command line's main; it imports main from {handed or 'nowhere'})"
        )


ONEDNN_ON = "oneDNN custom operations are on"


@pytest.fixture(scope="module")
def tiny_saved_model(tmp_path_factory):
    import tensorflow as tf

    class Doubler(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def serve(self, x):
            return {"y": 2.0 * x}

    base = tmp_path_factory.mktemp("onednn") / "m"
    module = Doubler()
    tf.saved_model.save(module, str(base / "1"), signatures={"serving_default": module.serve})
    return base


def _server_stderr(base: Path, env_changes: dict) -> str:
    """Starts ``python -m components.serving.server`` until it serves; returns what TensorFlow logged."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("TF_ENABLE_ONEDNN_OPTS",)}
    # Level 0 makes TensorFlow say at import whether oneDNN is on (a user's value wins over the helper's 1).
    env.update(env_changes, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="0")
    cmd = [sys.executable, "-m", "components.serving.server", "--model-base-path", str(base), "--model-name", "m"]
    proc = subprocess.Popen(
        [*cmd, "--port", str(port)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()  # blocks until the server is up (or has exited)
        assert f"serving m version 1 at http://127.0.0.1:{port}" in line, line
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    return err


@pytest.mark.slow
def test_the_model_server_command_line_turns_onednn_on(tiny_saved_model):
    assert ONEDNN_ON in _server_stderr(tiny_saved_model, {})


@pytest.mark.slow
def test_the_model_server_command_line_keeps_the_users_value(tiny_saved_model):
    assert ONEDNN_ON not in _server_stderr(tiny_saved_model, {"TF_ENABLE_ONEDNN_OPTS": "0"})
