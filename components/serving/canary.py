"""A traffic split of one served model between a canary version and the version below it.

As a canary rollout does: ``percent`` of the model's unpinned requests reach the canary, the rest
the newest complete version below it, in a fixed interleaving (10%: every tenth request).
"""

from __future__ import annotations

import dataclasses

from components.serving.model import find_versions


@dataclasses.dataclass(frozen=True)
class Split:
    """A traffic split of one model between its canary version and the newest version below it.

    Attributes:
        model_name: the model split.
        version: the canary version.
        percent: the canary's share of the model's unpinned requests, 0 to 100.
    """

    model_name: str
    version: int
    percent: int

    def __post_init__(self) -> None:
        if not 0 <= self.percent <= 100:
            raise ValueError(f"a split's percent must be in 0..100, got {self.percent}")

    def to_canary(self, request_number: int) -> bool:
        """Whether request number ``request_number`` (0, 1, ...) goes to the canary: the canary's
        share of the first n requests is always within one request of ``percent``.
        """
        return (request_number + 1) * self.percent // 100 > request_number * self.percent // 100


def stable_version(model_base_path: str, canary_version: int) -> int:
    """The newest complete version below ``canary_version``: the one a split keeps serving.

    Raises:
        FileNotFoundError: there is none (a split needs an earlier version).
    """
    earlier = [v for v in find_versions(model_base_path) if v < canary_version]
    if not earlier:
        raise FileNotFoundError(
            f"a split of version {canary_version} needs an earlier complete version under {model_base_path}; "
            f"complete versions there: {find_versions(model_base_path)}"
        )
    return earlier[-1]
