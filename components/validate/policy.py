"""The kinds of findings the validate step reports, and the policy that gives each its severity.

A policy maps a kind to ``error`` (the step fails), ``warn`` (reported, the step passes) or
``ignore`` (recorded in ``validation.json`` only). :data:`DEFAULT_POLICY` holds every kind's
default; a run's ``validation_policy`` overrides some of them, and a kind or level it does not
know is a :class:`PolicyError` naming the valid ones.
"""

from __future__ import annotations

from collections.abc import Mapping

ERROR, WARN, IGNORE = "error", "warn", "ignore"
LEVELS = (ERROR, WARN, IGNORE)

# Faults of the dataset itself: training on it would mislead.
LEAKAGE = "leakage"
LABEL_CONFLICT = "label_conflict"
# Anomalies: worth a look, not wrong by themselves.
EMPTY_CLASS = "empty_class"
RARE_CLASS = "rare_class"
DEGENERATE_BOX = "degenerate_box"
SIZE_OUTLIER = "size_outlier"
# Drift against a baseline's statistics.
NEW_CLASS = "new_class"
MISSING_CLASS = "missing_class"
CLASS_SHARE_SHIFT = "class_share_shift"
IMAGE_SIZE_SHIFT = "image_size_shift"
BOX_SIZE_SHIFT = "box_size_shift"
TEST_SPLIT_CHANGED = "test_split_changed"
BASELINE_UNREADABLE = "baseline_unreadable"
# Opt-in (every image decoded): the same photo re-encoded, resized or lightly edited in two splits.
NEAR_DUPLICATE = "near_duplicate"

FAULTS = (LEAKAGE, LABEL_CONFLICT)
ANOMALIES = (EMPTY_CLASS, RARE_CLASS, DEGENERATE_BOX, SIZE_OUTLIER)
DRIFT = (NEW_CLASS, MISSING_CLASS, CLASS_SHARE_SHIFT, IMAGE_SIZE_SHIFT, BOX_SIZE_SHIFT, TEST_SPLIT_CHANGED)
KINDS = (*FAULTS, *ANOMALIES, *DRIFT, BASELINE_UNREADABLE, NEAR_DUPLICATE)

DEFAULT_POLICY: Mapping[str, str] = {
    **{kind: ERROR for kind in FAULTS},
    **{kind: WARN for kind in ANOMALIES},
    **{kind: WARN for kind in DRIFT},
    BASELINE_UNREADABLE: WARN,
    NEAR_DUPLICATE: WARN,
}


class PolicyError(ValueError):
    """A policy names a kind or a level that does not exist; the message lists the valid ones."""


def check_policy(policy: Mapping[str, str]) -> None:
    """Checks a policy's kinds and levels.

    Raises:
        PolicyError: an unknown kind or level (the first one), naming the valid ones.
    """
    for kind, level in policy.items():
        if kind not in KINDS:
            raise PolicyError(f"unknown kind {kind!r}; valid kinds: {', '.join(KINDS)}")
        if level not in LEVELS:
            raise PolicyError(f"{kind}: unknown level {level!r}; expected one of {', '.join(LEVELS)}")


def resolve_policy(overrides: Mapping[str, str]) -> dict[str, str]:
    """Every kind's level: the defaults with ``overrides`` on top.

    Raises:
        PolicyError: ``overrides`` names an unknown kind or level.
    """
    check_policy(overrides)
    return {**DEFAULT_POLICY, **overrides}
