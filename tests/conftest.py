"""Settings shared by every test: quiet TensorFlow, CPU only, no network; and the order of the modules.

``make test`` runs the suite on two workers (pytest-xdist, one module per worker at a time, in
the order below): the slowest modules go first so that both workers finish together, and the
module that builds the shared tiny detector (tests/detection_fixtures.py) comes before the others
that read it, so no worker waits for it. A module that takes over about 15 s (``make test`` prints
the slowest tests) belongs in ``SLOWEST_FIRST``.
"""

import logging
import os
import tempfile

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# Precisions measured on this machine (trainer/budget/calibrate.py) would change what a test's training
# chooses: the suite keeps its own, per run.
os.environ.setdefault("LTP_PRECISION_CACHE", os.path.join(tempfile.mkdtemp(prefix="ltp-precision-"), "precision.json"))

# Seconds each took on 2 cores (an AMD EPYC with AVX512-BF16, the suite run alone), slowest first.
SLOWEST_FIRST = (
    "tests/components/test_detection_flow.py",  # 58 s; builds the shared tiny detector
    "tests/pipelines/test_end_to_end_local.py",  # 59 s
    "tests/unit/train/test_multiworker_train.py",  # 60 s
    "tests/pipelines/test_toy_task_local.py",  # 62 s
    "tests/pipelines/test_search_pipeline.py",  # 59 s
    "tests/pipelines/test_sweep_pipeline.py",  # 57 s
    "tests/pipelines/test_retrain_pipeline.py",  # 54 s; a real retraining on new data, under kfp.local
    "tests/unit/train/test_train_budget.py",  # 29 s; a budgeted training, killed and resumed
    "tests/components/test_promote_flow.py",  # 33 s
    "tests/unit/export/test_export_run.py",  # 53 s; the classifier's and the shared detector's formats
    "tests/components/test_promote_contract.py",  # 19 s
    "tests/unit/test_presets.py",  # 21 s with the shared detector
    "tests/components/test_notebook_step.py",  # 26 s
    "tests/pipelines/test_monitor_pipeline.py",  # 26 s
    "tests/pipelines/test_promote_pipelines.py",  # 25 s
    "tests/unit/architecture/test_source_seam.py",  # 25 s; a process converts and batch-predicts the toy source kind
    "tests/unit/test_classification_fit.py",  # 22 s
    "tests/pipelines/test_gpu_vs_tpu_pipeline.py",  # 21 s
    "tests/integration/test_model_server.py",  # 21 s
    "tests/components/test_step_clis_by_task.py",  # 20 s
    "tests/pipelines/test_notebook_pipeline.py",  # 19 s
    "tests/unit/architecture/test_packaging.py",  # 18 s
    "tests/components/test_promote_cli.py",  # 18 s
    "tests/components/test_search_trials.py",  # 15 s
    "tests/components/test_evaluate_cli.py",  # 15 s
    "tests/unit/train/test_train.py",  # 15 s
)


def pytest_collection_modifyitems(config, items):
    """Runs the modules of ``SLOWEST_FIRST`` first, in its order; the rest keep theirs."""
    rank = {path: i for i, path in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.fixture(autouse=True)
def _root_logging_as_it_was():
    """Root logging's handlers and level put back after each test.

    A command's ``main()`` run in-process calls ``logging.basicConfig``, which binds a handler to
    the test's captured stderr; pytest closes that stream after the test, and every later test in
    the same worker that logs then printed ``--- Logging error ---`` into its own stderr.
    """
    root = logging.getLogger()
    before, level = set(root.handlers), root.level
    yield
    for handler in list(root.handlers):  # pytest's own capturing handlers come and go with each phase
        if handler not in before and not type(handler).__module__.startswith("_pytest"):
            root.removeHandler(handler)
    root.setLevel(level)
