"""The train step's worker command: ``python -m components.train.worker --config JOB``.

``trainer.worker`` with the step's progress lines (``components.progress``) printed by the chief,
which the local launcher relays into the step's output (``[worker 0] @@progress ...``) and a
cluster keeps in the chief pod's log.
"""

import sys
from collections.abc import Sequence
from typing import Optional

from components.progress import reporter
from trainer import worker


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs one worker of the set (exit status as ``trainer.worker``'s)."""
    return worker.main(argv, on_progress=reporter("train", "steps", every_s=0))


if __name__ == "__main__":
    sys.exit(main())
