"""The checks of the validate step: what is wrong with a dataset, or has changed since a baseline.

Each problem found is a :class:`Finding` of one kind (``components.validate.policy``): a fault
(leakage across splits, one image under two labels), an anomaly (an empty or rare class, a
degenerate box, an image far from the usual size) or drift against a baseline's statistics (a new
or missing class, shifted class shares, image or box sizes, a changed test split). A finding
lists the keys (``image/source_key``) of the records it concerns, at most ``max_records`` of them,
and how many there are in all. Keys on the allowlist are left out as they are met; a finding
about records that are all allowlisted is not made.

:class:`RecordChecks` sees every record once, beside the statistics; :func:`drift_findings`
compares two :class:`~components.validate.stats.DatasetStats`.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Optional

from components.validate import policy as kinds
from components.validate.config import ValidateConfig
from components.validate.stats import IMAGES, Box, DatasetStats, RecordView, SplitStats, class_name, median
from trainer import records
from trainer.tfrecords import NO_LABEL


@dataclasses.dataclass(frozen=True)
class Finding(records.Record):
    """One problem found.

    Attributes:
        kind: what kind of problem (``leakage``, ``rare_class``...; ``policy.KINDS``).
        severity: ``error``, ``warn`` or ``ignore``, as the policy says for the kind.
        message: what was found, in a sentence or two, and what to do about it.
        split: the split it concerns; None for the whole dataset.
        records: keys of the records it concerns (at most ``max_records``), allowlisted ones left out.
        count: the records it concerns in all (0 for a finding about the dataset as a whole).
        allowed: records of it left out because their keys are allowlisted.
    """

    kind: str
    severity: str
    message: str
    split: Optional[str] = None
    records: tuple[str, ...] = ()
    count: int = 0
    allowed: int = 0


class KeyList:
    """The keys of the records a finding concerns: the first ``limit``, the total, the allowlisted.

    Args:
        allow: keys left out (counted in ``allowed``).
        limit: keys kept; the rest are only counted.
    """

    __slots__ = ("allow", "limit", "keys", "total", "allowed")

    def __init__(self, allow: Collection[str], limit: int) -> None:
        self.allow, self.limit = allow, limit
        self.keys: list[str] = []
        self.total = 0
        self.allowed = 0

    def add(self, key: str) -> None:
        """Counts one record's key (an allowlisted one only in ``allowed``)."""
        if key in self.allow:
            self.allowed += 1
            return
        self.total += 1
        if len(self.keys) < self.limit:
            self.keys.append(key)

    def merged(self, others: Iterable[KeyList]) -> KeyList:
        """A list of this one's keys followed by ``others``'."""
        out = KeyList(self.allow, self.limit)
        for part in (self, *others):
            out.keys.extend(part.keys[: max(self.limit - len(out.keys), 0)])
            out.total += part.total
            out.allowed += part.allowed
        return out


class Findings:
    """The findings of one validation, each given its severity by the policy as it is added.

    Args:
        policy: every kind's level (``policy.resolve_policy``).
        allow: record keys left out of every finding.
        limit: record keys a finding lists.
    """

    def __init__(self, policy: Mapping[str, str], allow: Collection[str], limit: int) -> None:
        self.policy, self.allow, self.limit = dict(policy), frozenset(allow), limit
        self.items: list[Finding] = []

    def keys(self) -> KeyList:
        """An empty key list with this validation's allowlist and limit."""
        return KeyList(self.allow, self.limit)

    def add(self, kind: str, message: str, split: Optional[str] = None, keys: Optional[KeyList] = None) -> None:
        """Adds a finding; one about records (``keys``) that are all allowlisted is dropped."""
        if keys is not None and keys.total == 0:
            return
        kept = tuple(keys.keys) if keys else ()
        total, allowed = (keys.total, keys.allowed) if keys else (0, 0)
        self.items.append(Finding(kind, self.policy[kind], message, split, kept, total, allowed))


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


# --------------------------------------------------------------------------------------------
# Record checks: one pass, beside the statistics
# --------------------------------------------------------------------------------------------


class RecordChecks:
    """Checks the records one at a time, and what they add up to at the end.

    Args:
        config: the thresholds.
        classes: the dataset's class names.
        findings: where the findings go (its allowlist and limit shape the key lists).
    """

    def __init__(self, config: ValidateConfig, classes: Sequence[str], findings: Findings) -> None:
        self.config, self.classes, self.findings = config, tuple(classes), findings
        self.first: dict[str, tuple[str, int, str]] = {}  # sha256 -> (split, label, key) first seen
        self.repeats: dict[str, list[tuple[str, int, str]]] = {}  # sha256 -> later occurrences
        self.class_keys: dict[tuple[str, str], KeyList] = {}  # (split, class) -> its records
        self.sizes: collections.Counter = collections.Counter()  # (height, width) -> images
        self.size_keys: dict[tuple[int, int], KeyList] = {}
        self.degenerate: dict[str, KeyList] = {}  # split -> records with a degenerate box
        self.degenerate_boxes: dict[str, collections.Counter] = {}  # split -> why -> boxes

    def add(self, view: RecordView) -> None:
        """Checks one record and remembers what the dataset-wide checks need of it."""
        seen = (view.split, view.label, view.key)
        if view.sha256 in self.first:
            self.repeats.setdefault(view.sha256, []).append(seen)
        elif view.sha256:  # a record without its image's hash cannot be compared
            self.first[view.sha256] = seen
        names = {class_name(self.classes, view.label)} if view.label != NO_LABEL else set()
        names.update(box.label for box in view.boxes or ())
        for name in names:
            self._keys(self.class_keys, (view.split, name)).add(view.key)
        size = (view.height, view.width)
        self.sizes[size] += 1
        self._keys(self.size_keys, size).add(view.key)
        reasons = [why for why in map(self._degenerate, view.boxes or ()) if why]
        if reasons:
            self._keys(self.degenerate, view.split).add(view.key)
            self.degenerate_boxes.setdefault(view.split, collections.Counter()).update(reasons)

    def _keys(self, table: dict, key: object) -> KeyList:
        found = table.get(key)
        if found is None:
            found = table[key] = self.findings.keys()
        return found

    def _degenerate(self, box: Box) -> Optional[str]:
        """Why a box is degenerate, or None."""
        floor = self.config.min_box_px
        if box.width_px < floor or box.height_px < floor:
            return f"under {floor:g} px"
        if box.share >= self.config.full_box_share:
            return "the whole image"
        return None

    def class_records(self, names: Iterable[str], splits: Iterable[str]) -> KeyList:
        """The records of some classes over some splits."""
        splits = list(splits)
        parts = [self.class_keys[(s, n)] for n in names for s in splits if (s, n) in self.class_keys]
        return self.findings.keys().merged(parts)

    def finish(self, stats: DatasetStats) -> None:
        """Adds the findings of what the records add up to: duplicates, classes, sizes, boxes."""
        self._duplicates()
        for split, split_stats in stats.splits.items():
            self._classes(split, split_stats)
        self._size_outliers()
        for split, keys in self.degenerate.items():
            reasons = ", ".join(f"{why}: {n:,}" for why, n in self.degenerate_boxes[split].most_common())
            self.findings.add(
                kinds.DEGENERATE_BOX,
                f"{_plural(keys.total, 'image')} of split {split} have degenerate boxes ({reasons}); "
                "fix or drop these annotations at the source, or allow the keys",
                split,
                keys,
            )

    def _duplicates(self) -> None:
        """Leakage (one image in two splits) and label conflicts (one image under two labels)."""
        leaked, conflicting = self.findings.keys(), self.findings.keys()
        pairs: collections.Counter = collections.Counter()
        example = {}
        for sha, later in self.repeats.items():
            seen = [self.first[sha], *later]
            splits = sorted({split for split, _, _ in seen})
            labels = {label for _, label, _ in seen if label != NO_LABEL}
            shown = any(key not in self.findings.allow for _, _, key in seen)  # named in the message
            if len(splits) > 1:
                pairs[" & ".join(splits)] += shown
                if shown:
                    example.setdefault(kinds.LEAKAGE, seen)
                for _, _, key in seen:
                    leaked.add(key)
            if len(labels) > 1:
                if shown:
                    example.setdefault(kinds.LABEL_CONFLICT, seen)
                for _, _, key in seen:
                    conflicting.add(key)
        if leaked.total:
            where = ", ".join(f"{pair}: {n:,}" for pair, n in pairs.most_common() if n)
            shown = " = ".join(f"{key} ({split})" for split, _, key in example[kinds.LEAKAGE])
            self.findings.add(
                kinds.LEAKAGE,
                f"{_plural(sum(pairs.values()), 'image')} found in more than one split ({where}), e.g. {shown}: "
                "a model scored on images it trained on looks better than it is; convert with split_by=content "
                "(copies then land in one split) or remove the copies",
                keys=leaked,
            )
        if conflicting.total:
            shown = " = ".join(
                f"{key} ({class_name(self.classes, label)})" for _, label, key in example[kinds.LABEL_CONFLICT]
            )
            self.findings.add(
                kinds.LABEL_CONFLICT,
                f"identical images carry different labels, e.g. {shown}; correct the labels at the source",
                keys=conflicting,
            )

    def _classes(self, split: str, stats: SplitStats) -> None:
        """Empty classes (none in a split that has some) and rare ones (under the minimum share)."""
        total = sum(stats.class_counts.values())
        if not total:
            return
        unit = "images" if stats.class_unit == IMAGES else "objects"
        empty = [name for name, n in stats.class_counts.items() if n == 0]
        if empty:
            self.findings.add(
                kinds.EMPTY_CLASS,
                f"split {split} has no {unit} of {_plural(len(empty), 'class')} ({', '.join(empty)}) among its "
                f"{total:,} {unit}; a model cannot learn or be scored on them there",
                split,
            )
        floor = self.config.min_class_share
        rare = {name: n / total for name, n in stats.class_counts.items() if 0 < n / total < floor}
        if rare:
            shares = ", ".join(f"{name} {share:.2%}" for name, share in sorted(rare.items(), key=lambda x: x[1]))
            self.findings.add(
                kinds.RARE_CLASS,
                f"split {split}: {_plural(len(rare), 'class')} under {floor:.0%} of its {unit} ({shares}); "
                "collect more of them, or lower min_class_share",
                split,
                self.class_records(rare, [split]),
            )

    def _size_outliers(self) -> None:
        """Images whose height or width is far from the dataset's median."""
        if not self.sizes:
            return
        factor = self.config.size_outlier_factor
        heights, widths = collections.Counter(), collections.Counter()
        for (h, w), n in self.sizes.items():
            heights[h] += n
            widths[w] += n
        mid_h, mid_w = median(heights), median(widths)
        outliers = [
            size
            for size in self.sizes
            if not (mid_h / factor <= size[0] <= mid_h * factor and mid_w / factor <= size[1] <= mid_w * factor)
        ]
        if not outliers:
            return
        keys = self.findings.keys().merged(self.size_keys[s] for s in outliers)
        sizes = ", ".join(
            f"{h}x{w} ({self.sizes[(h, w)]:,})" for h, w in sorted(outliers, key=lambda s: -self.sizes[s])[:10]
        )
        self.findings.add(
            kinds.SIZE_OUTLIER,
            f"{_plural(keys.total, 'image')} far from the median size {mid_h:g}x{mid_w:g} (a side under "
            f"1/{factor:g} or over {factor:g} times it): {sizes}; check they are the images meant, or resize them",
            keys=keys,
        )


# --------------------------------------------------------------------------------------------
# Drift: these statistics against a baseline's
# --------------------------------------------------------------------------------------------


def share_distances(current: Mapping[str, float], baseline: Mapping[str, float]) -> tuple[float, float]:
    """The L-infinity and Jensen-Shannon (base 2, in [0, 1]) distances between two class-share tables.

    Classes absent from a table have share 0 there.
    """
    names = set(current) | set(baseline)
    p = [current.get(n, 0.0) for n in names]
    q = [baseline.get(n, 0.0) for n in names]
    linf = max((abs(a - b) for a, b in zip(p, q, strict=True)), default=0.0)

    def kl(a: Sequence[float], m: Sequence[float]) -> float:
        return sum(x * math.log2(x / y) for x, y in zip(a, m, strict=True) if x > 0)

    m = [(a + b) / 2 for a, b in zip(p, q, strict=True)]
    js = math.sqrt(max(0.5 * kl(p, m) + 0.5 * kl(q, m), 0.0))
    return linf, js


def drift_findings(
    stats: DatasetStats, baseline: DatasetStats, where: str, checks: RecordChecks, findings: Findings
) -> None:
    """Adds the findings of the changes since ``baseline``.

    Args:
        stats: this dataset's statistics.
        baseline: the baseline's.
        where: how messages name the baseline (its path).
        checks: the record checks of this dataset (the records of each class).
        findings: where the findings go.
    """
    config = checks.config
    _class_changes(stats, baseline, where, checks, findings)
    for split, now in stats.splits.items():
        before = baseline.splits.get(split)
        if before is None:
            continue
        _share_shift(split, now, before, where, config, findings)
        _size_shift(split, now, before, where, config, findings)
        _box_shift(split, now, before, where, config, findings)
    _test_split(stats, baseline, where, config.test_split, findings)


def _class_changes(
    stats: DatasetStats, baseline: DatasetStats, where: str, checks: RecordChecks, findings: Findings
) -> None:
    now, before = stats.present_classes(), baseline.present_classes()
    for name in [c for c in now if c not in before]:
        findings.add(
            kinds.NEW_CLASS,
            f"class {name} has {now[name]:,} {stats.class_unit()} here and none in the baseline {where}; "
            "check it is meant to be there (a model trained on the baseline does not know it)",
            keys=checks.class_records([name], stats.splits),
        )
    for name in [c for c in before if c not in now]:
        findings.add(
            kinds.MISSING_CLASS,
            f"class {name} had {before[name]:,} {baseline.class_unit()} in the baseline {where} and has none here; "
            "check the source lost nothing",
        )


def _share_shift(
    split: str, now: SplitStats, before: SplitStats, where: str, config: ValidateConfig, findings: Findings
) -> None:
    if (
        now.class_unit != before.class_unit
        or not sum(now.class_counts.values())
        or not sum(before.class_counts.values())
    ):
        return
    linf, js = share_distances(now.class_shares, before.class_shares)
    if linf <= config.max_share_shift and js <= config.max_share_js:
        return
    names = set(now.class_shares) | set(before.class_shares)
    moved = max(names, key=lambda n: abs(now.class_shares.get(n, 0.0) - before.class_shares.get(n, 0.0)))
    findings.add(
        kinds.CLASS_SHARE_SHIFT,
        f"split {split}: class shares moved from the baseline {where} (L-inf {linf:.3f}, "
        f"max {config.max_share_shift:g}; Jensen-Shannon {js:.3f}, max {config.max_share_js:g}); most: {moved} "
        f"{before.class_shares.get(moved, 0.0):.1%} -> {now.class_shares.get(moved, 0.0):.1%}",
        split,
    )


def _percent(change: Optional[float]) -> str:
    return "n/a" if change is None else f"{change:+.0%}"


def _relative(now: Optional[float], before: Optional[float]) -> Optional[float]:
    """``now`` relative to ``before`` (+0.5: 50 % larger); None when either is missing or zero."""
    if not now or not before:
        return None
    return now / before - 1


def _size_shift(
    split: str, now: SplitStats, before: SplitStats, where: str, config: ValidateConfig, findings: Findings
) -> None:
    changes = {side: _relative(getattr(now, side).median, getattr(before, side).median) for side in ("height", "width")}
    if all(c is None or abs(c) <= config.max_size_shift for c in changes.values()):
        return
    findings.add(
        kinds.IMAGE_SIZE_SHIFT,
        f"split {split}: median image size {before.height.median:g}x{before.width.median:g} in the baseline {where}, "
        f"{now.height.median:g}x{now.width.median:g} here (height {_percent(changes['height'])}, width "
        f"{_percent(changes['width'])}; max {config.max_size_shift:.0%}); check the source and any resize",
        split,
    )


def _box_shift(
    split: str, now: SplitStats, before: SplitStats, where: str, config: ValidateConfig, findings: Findings
) -> None:
    if now.boxes is None or before.boxes is None:
        return
    a, b = now.boxes.image_share.median, before.boxes.image_share.median
    change = _relative(math.sqrt(a) if a else None, math.sqrt(b) if b else None)
    if change is None or abs(change) <= config.max_box_shift:
        return
    findings.add(
        kinds.BOX_SIZE_SHIFT,
        f"split {split}: the median box side, as a share of its image's, is {math.sqrt(b):.3f} in the baseline "
        f"{where} and {math.sqrt(a):.3f} here ({change:+.0%}; max {config.max_box_shift:.0%}); check the annotations",
        split,
    )


def _test_split(stats: DatasetStats, baseline: DatasetStats, where: str, split: str, findings: Findings) -> None:
    now, before = stats.splits.get(split), baseline.splits.get(split)
    if now is None and before is None:
        return
    if now is not None and before is not None and now.sha256_digest == before.sha256_digest:
        return
    if now is None or before is None:
        what = (
            f"the baseline {where} has a {split} split and this dataset none"
            if now is None
            else (f"this dataset has a {split} split and the baseline {where} none")
        )
    else:
        what = (
            f"its images differ from the baseline {where}'s ({before.distinct_images:,} distinct images there, "
            f"{now.distinct_images:,} here)"
        )
    findings.add(
        kinds.TEST_SPLIT_CHANGED,
        f"split {split}: {what}; scores on it are not comparable with the baseline's. Keep the test split "
        "fixed between versions (an explicit split column), or accept the change",
        split,
    )
