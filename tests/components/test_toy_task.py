"""A third task from outside trainer/ (tests/toy_task.py), registered by ``LTP_TASK_MODULES``.

Its run through the steps under kfp.local is tests/pipelines/test_toy_task_local.py.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.tasks import TASK_MODULES_ENV

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_a_subprocess_sees_the_task_only_when_the_registry_is_looked_up():
    code = (
        "import sys\n"
        "import trainer.config, trainer.tasks\n"
        "assert 'tests.toy_task' not in sys.modules  # importing is not looking up\n"
        "from trainer.tasks import get_task, task_names\n"
        "print(task_names(), get_task('brightness', {'exact_start': False}).options.exact_start)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), TASK_MODULES_ENV: "tests.toy_task"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['brightness',", "'classification',", "'detection']", "False"]
