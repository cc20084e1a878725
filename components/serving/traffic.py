"""Sampled live traffic: which requests a stage keeps, what is kept of them, and where (docs/observability.md).

A stage keeps a share of its ``:predict`` request/answer pairs (``TrafficConfig.sample_rate``), as
summaries, never the images themselves unless it asks (``keep``):

- :class:`Sampler` picks the requests: deterministic and exact, the ``n``-th request is kept when
  ``floor((n + 1) * rate) > floor(n * rate)``, so any run of ``N`` consecutive requests keeps
  ``floor(N * rate)`` or one more (a hash of the request would be exact only on average).
- :func:`summarize_image` and :func:`summarize_answer` turn one image and its answer into a few
  numbers: size, channels, brightness, contrast, the decode outcome (and an average hash with
  ``keep: hash``); the predicted class, its score, the margin to the next, the boxes over the
  threshold. :func:`summarize_exchange` does both for a whole request body and its answer.
- :class:`TrafficLog` takes the raw exchange on the answering thread (a bounded queue: when full
  the exchange is dropped and counted, the answer never waits), summarizes it in a process of its
  own (at a lower priority), and writes JSONL shards atomically under ``<root>/<stage>/traffic/<model>/``: a shard is
  there whole or not at all, and its name carries the writer and a sequence number, so a reader
  sees a shard that is missing (:func:`read_window`).

Standard library, NumPy and Pillow; no TensorFlow.
"""

from __future__ import annotations

import base64
import binascii
import calendar
import dataclasses
import io
import json
import logging
import math
import multiprocessing
import os
import queue
import re
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar, Optional

import numpy as np
from PIL import Image, UnidentifiedImageError

from trainer import storage
from trainer.configbase import ConfigBase

log = logging.getLogger(__name__)

KEEPS = ("summary", "hash", "image")
# Each stage's default share of sampled requests: all of demo's few, a small safe share of prod's.
DEFAULT_RATES = {"demo": 1.0, "staging": 0.1, "prod": 0.02}
TRAFFIC_DIR = "traffic"
SHARD_PATTERN = re.compile(r"^(?P<start>\d{8}T\d{6}Z)-(?P<writer>[0-9a-f]{8})-(?P<seq>\d{6})\.jsonl$")
_STAT_SIDE = 64  # images are reduced to at most this side before their brightness and contrast are taken


@dataclasses.dataclass(frozen=True)
class TrafficConfig(ConfigBase):
    """How a stage samples its live traffic (docs/observability.md).

    Attributes:
        sample_rate: the share of ``:predict`` requests kept, in [0, 1] (0: off).
        keep: what is kept of a sampled image: ``summary`` (numbers only), ``hash`` (and an average
            hash) or ``image`` (and, for at most ``image_cap`` images a shard, the image itself).
        buffer: the most exchanges waiting to be summarized; more are dropped and counted.
        shard_records: summaries per shard (a shard is also written on :meth:`TrafficLog.flush`).
        box_threshold: the score from which a box counts as found.
        image_cap: the most images kept a shard with ``keep: image``.
        retention_days: how long shards are kept (``prune_shards``); 0 keeps them.
    """

    _section: ClassVar[str] = "traffic."

    sample_rate: float = 0.02
    keep: str = "summary"
    buffer: int = 1024
    shard_records: int = 500
    box_threshold: float = 0.5
    image_cap: int = 20
    retention_days: int = 30

    def validate(self) -> None:
        if not 0 <= self.sample_rate <= 1:
            self._fail("sample_rate", f"must be in [0, 1] (0.02 keeps 2% of the requests), got {self.sample_rate}")
        if self.keep not in KEEPS:
            self._fail("keep", f"must be one of {list(KEEPS)}, got {self.keep!r}")
        for name in ("buffer", "shard_records"):
            if getattr(self, name) < 1:
                self._fail(name, f"must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.box_threshold <= 1:
            self._fail("box_threshold", f"must be in [0, 1], got {self.box_threshold}")
        if self.image_cap < 0 or self.retention_days < 0:
            self._fail(
                "image_cap", f"image_cap and retention_days must be >= 0, got {self.image_cap}, {self.retention_days}"
            )


class Sampler:
    """Keeps exactly ``floor(N * rate)`` (or one more) of any ``N`` consecutive requests; thread-safe.

    The rate is taken as a fraction with a denominator of at most 10,000 (0.02 is 1/50).
    """

    def __init__(self, rate: float):
        if not 0 <= rate <= 1:
            raise ValueError(f"sample rate must be in [0, 1], got {rate}")
        self.rate = Fraction(rate).limit_denominator(10_000)
        self._seen = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Whether the next request is kept."""
        with self._lock:
            n, self._seen = self._seen, self._seen + 1
        num, den = self.rate.numerator, self.rate.denominator
        return (n + 1) * num // den > n * num // den

    @property
    def seen(self) -> int:
        """Requests asked about so far."""
        return self._seen


def average_hash(gray: Image.Image) -> str:
    """A 64-bit average hash of a grayscale image, as 16 hex digits."""
    small = np.asarray(gray.resize((8, 8), Image.Resampling.BILINEAR), dtype=np.float32)
    bits = (small > small.mean()).flatten()
    return f"{int(''.join('1' if b else '0' for b in bits), 2):016x}"


def summarize_image(data: bytes, keep: str = "summary") -> dict[str, Any]:
    """Size, channels, brightness and contrast (in [0, 1]) of encoded image bytes, and whether they decode.

    An image that does not decode is ``{"decoded": False}``.
    """
    try:
        image = Image.open(io.BytesIO(data))
        width, height = image.size
        channels = len(image.getbands())
        image.draft("L", (_STAT_SIDE, _STAT_SIDE))  # JPEG: decode at a reduced scale
        gray = image.convert("L")
        gray.thumbnail((_STAT_SIDE, _STAT_SIDE))
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        return {"decoded": False}
    pixels = np.asarray(gray, dtype=np.float32) / 255.0
    summary = {
        "decoded": True,
        "width": width,
        "height": height,
        "channels": channels,
        "brightness": round(float(pixels.mean()), 5),
        "contrast": round(float(pixels.std()), 5),
    }
    if keep in ("hash", "image"):
        summary["hash"] = average_hash(gray)
    return summary


def _top_two(values: Sequence[float]) -> tuple[int, float, float]:
    """The index of the highest value, the value, and its margin over the second."""
    array = np.asarray(values, dtype=np.float64).ravel()
    if array.size == 0:
        return -1, math.nan, math.nan
    order = np.argsort(array)[::-1]
    second = array[order[1]] if array.size > 1 else 0.0
    return int(order[0]), float(array[order[0]]), float(array[order[0]] - second)


def summarize_answer(prediction: Optional[Mapping[str, Any]], box_threshold: float = 0.5) -> dict[str, Any]:
    """The predicted class, its score, the margin to the next, and boxes over the threshold.

    ``prediction`` is one image's outputs (None: the request failed). A class-probability answer
    (``probabilities``) names the most likely class; a box answer (``detection_scores``, sorted) the
    best box's class, and ``empty`` is true when no box reaches ``box_threshold``.
    """
    if prediction is None:
        return {"empty": True, "class": None}
    if "probabilities" in prediction:
        index, score, margin = _top_two(prediction["probabilities"])
        return {"class": index, "score": round(score, 5), "margin": round(margin, 5), "empty": index < 0}
    if "detection_scores" in prediction:
        scores = np.asarray(prediction["detection_scores"], dtype=np.float64).ravel()
        boxes = int((scores >= box_threshold).sum())
        classes = np.asarray(prediction.get("detection_classes", []), dtype=np.float64).ravel()
        top = float(scores[0]) if scores.size else math.nan
        margin = float(scores[0] - scores[1]) if scores.size > 1 else top
        found = int(classes[0]) if boxes and classes.size else None
        return {"class": found, "score": round(top, 5), "margin": round(margin, 5), "boxes": boxes, "empty": boxes == 0}
    return {"empty": True, "class": None}


def request_images(body: Any) -> list[Optional[bytes]]:
    """The encoded images of a ``:predict`` body (JSON, or its raw bytes), one per instance (None: not base64)."""
    if isinstance(body, (bytes, str)):
        try:
            body = json.loads(body)
        except (ValueError, RecursionError):
            return []
    if not isinstance(body, Mapping):
        return []
    rows = body.get("instances")
    if rows is None:
        columns = body.get("inputs")
        rows = next(iter(columns.values()), []) if isinstance(columns, Mapping) else columns
    if not isinstance(rows, list):
        return []
    return [_b64_of(row) for row in rows]


def _b64_of(row: Any) -> Optional[bytes]:
    if isinstance(row, Mapping) and "b64" not in row and len(row) == 1:
        row = next(iter(row.values()))
    if isinstance(row, Mapping) and isinstance(row.get("b64"), str):
        try:
            return base64.b64decode(row["b64"], validate=True)
        except (binascii.Error, ValueError):
            return None
    return None


def answer_rows(answer: Any) -> list[Optional[Mapping[str, Any]]]:
    """One outputs mapping per image of a ``:predict`` answer (JSON, or its bytes as sent; an error answer: none)."""
    if isinstance(answer, (bytes, str)):
        try:
            answer = json.loads(answer)
        except (ValueError, RecursionError):
            return []
    if not isinstance(answer, Mapping) or "error" in answer:
        return []
    rows = answer.get("predictions")
    if isinstance(rows, list):
        return [r if isinstance(r, Mapping) else {"probabilities": r} for r in rows]
    outputs = answer.get("outputs")
    if isinstance(outputs, Mapping):
        size = len(next(iter(outputs.values()), []))
        return [{k: v[i] for k, v in outputs.items()} for i in range(size)]
    return []


@dataclasses.dataclass(frozen=True)
class Exchange:
    """One sampled request and its answer, as the server had them (summarized later, off its path).

    ``body`` and ``answer`` are best passed as the bytes that went over the wire: handing bytes to
    the summarizing process costs the server a copy, where a parsed answer would be pickled.
    """

    model: str
    version: Optional[int]
    status: int
    latency_ms: float
    body: Any
    answer: Any
    time: float = dataclasses.field(default_factory=time.time)


def summarize_exchange(exchange: Exchange, config: TrafficConfig) -> list[dict[str, Any]]:
    """One summary line per image of a sampled exchange (see the module docstring)."""
    images = request_images(exchange.body)
    answers = answer_rows(exchange.answer)
    lines = []
    for i, data in enumerate(images):
        image = summarize_image(data, config.keep) if data is not None else {"decoded": False}
        answer = summarize_answer(answers[i] if i < len(answers) else None, config.box_threshold)
        line = {
            "time": round(exchange.time, 3),
            "model": exchange.model,
            "version": exchange.version,
            "status": exchange.status,
            "latency_ms": round(exchange.latency_ms, 3),
            "image": image,
            "answer": answer,
        }
        lines.append(line)
    return lines


def traffic_dir(root: str, stage: str, model: Optional[str] = None) -> str:
    """Where a stage's sampled traffic is kept: ``<root>/<stage>/traffic[/<model>]``."""
    return storage.join(root, stage, TRAFFIC_DIR, *([model] if model else []))


def _stamp(seconds: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(seconds))


class _ShardWriter:
    """Summarizes exchanges and writes each model's summaries as whole shards (in the log's own process)."""

    def __init__(self, folder: str, config: TrafficConfig, writer: str):
        self.folder, self.config, self.writer = folder, config, writer
        self.pending: dict[str, list[dict[str, Any]]] = {}  # model -> summaries not yet written
        self.seq: dict[str, int] = {}  # model -> the next shard's number
        self.images = 0
        self.written = 0

    def take(self, exchange: Exchange) -> None:
        lines = summarize_exchange(exchange, self.config)
        if self.config.keep == "image":
            for line, data in zip(lines, request_images(exchange.body), strict=False):
                if data is not None and self.images < self.config.image_cap:
                    line["image"]["b64"] = base64.b64encode(data).decode()
                    self.images += 1
        pending = self.pending.setdefault(exchange.model, [])
        pending += lines
        if len(pending) >= self.config.shard_records:
            self.write(exchange.model)

    def write(self, model: str) -> None:
        pending = self.pending.pop(model, [])
        if not pending:
            return
        seq = self.seq.get(model, 0)
        name = f"{_stamp(pending[0]['time'])}-{self.writer}-{seq:06d}.jsonl"
        data = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in pending)
        storage.write_text(storage.join(self.folder, model, name), data)  # whole or not at all
        self.written += len(pending)
        self.seq[model] = seq + 1
        self.images = 0

    def write_all(self) -> None:
        for model in list(self.pending):
            self.write(model)


def _log_process(inbox: Any, folder: str, config: TrafficConfig, writer: str, written: Any, flushed: Any) -> None:
    """The traffic log's process: summarize what arrives, write shards, until told to stop (None)."""
    os.nice(19)  # the answers come first: on a busy machine the summaries wait, in the bounded buffer
    for model in storage.list_dirs(folder):  # the retention, applied as the log starts
        prune_shards(storage.join(folder, model), config.retention_days)
    shards = _ShardWriter(folder, config, writer)
    while True:
        item = inbox.get()
        try:
            if item is None or item == "flush":
                shards.write_all()
            else:
                for exchange in item:  # a chunk of exchanges (TrafficLog hands them over in chunks)
                    shards.take(exchange)
        except Exception:  # one bad exchange must not stop the log; it is reported
            log.exception("traffic log: an exchange could not be summarized or written")
        written.value = shards.written
        if item == "flush":
            flushed.set()
        if item is None:
            return


CHUNK = 64
"""Sampled exchanges handed to the summarizing process at once."""
HANDOVER_S = 1.0
"""The longest a sampled exchange waits in the server's process for its chunk to fill."""


class TrafficLog:
    """A bounded buffer of sampled exchanges, summarized and written as shards by a process of its own.

    The answering threads only take a turn in the sampler and put a sampled exchange in the
    buffer without waiting (a full buffer drops it and counts it). The summaries are made in
    another process: in a thread they would hold the server's interpreter lock, and every
    answer would wait its turn (measured: +38% on the p50 at 100% sampling, 2 cores).

    Use as a context manager, or call :meth:`start` and :meth:`close` (which writes what is left).

    Args:
        folder: the stage's traffic folder (``<root>/<stage>/traffic``); each model's shards go to
            ``<folder>/<model>/`` (:func:`traffic_dir`).
        config: the rate, what is kept, the buffer and shard sizes.
    """

    def __init__(self, folder: str, config: TrafficConfig):
        self.folder = folder
        self.config = config
        self.sampler = Sampler(config.sample_rate)
        self.writer = uuid.uuid4().hex[:8]
        self.dropped = 0
        self.sampled = 0
        self._context = multiprocessing.get_context("spawn")  # never fork a process that holds TensorFlow
        # Exchanges wait in this process's list and go over in chunks: one hand-over per CHUNK
        # sampled requests (or per HANDOVER_S), not a pickle, a pipe write and a wake-up each.
        self._chunk: list[Exchange] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._queue = self._context.Queue(maxsize=max(1, config.buffer // CHUNK))
        self._written = self._context.Value("q", 0)
        self._flushed = self._context.Event()
        self._process: Optional[Any] = None

    @property
    def written(self) -> int:
        """Summaries written to shards so far."""
        return int(self._written.value)

    def offer(self, exchange_factory: Any) -> bool:
        """Takes its turn in the sampler; when sampled, queues ``exchange_factory()`` without waiting.

        ``exchange_factory`` builds the :class:`Exchange` only for a sampled request. Returns
        whether the exchange was queued (False: not sampled, or dropped on a full buffer).
        """
        if not self.sampler.take():
            return False
        self.sampled += 1
        return self.put(exchange_factory())

    def put(self, exchange: Exchange) -> bool:
        """Queues an exchange already sampled, without waiting; False: dropped (the buffer is full)."""
        with self._lock:
            if len(self._chunk) >= self.config.buffer:
                self.dropped += 1
                return False
            self._chunk.append(exchange)
            full = len(self._chunk) >= CHUNK
        if full:
            self._hand_over()
        return True

    def _hand_over(self) -> None:
        """Sends the waiting exchanges to the summarizing process as one chunk (a full queue drops them)."""
        with self._lock:
            chunk, self._chunk = self._chunk, []
        if not chunk:
            return
        try:
            self._queue.put_nowait(chunk)
        except queue.Full:
            with self._lock:
                self.dropped += len(chunk)

    def _hand_over_now_and_then(self) -> None:
        while not self._stop.wait(HANDOVER_S):
            self._hand_over()

    def start(self) -> TrafficLog:
        """Starts the summarizing process."""
        if self._process is None:
            args = (self._queue, self.folder, self.config, self.writer, self._written, self._flushed)
            self._process = self._context.Process(target=_log_process, args=args, name="traffic-log", daemon=True)
            self._process.start()
            self._stop.clear()
            threading.Thread(target=self._hand_over_now_and_then, name="traffic-handover", daemon=True).start()
        return self

    def flush(self, timeout_s: float = 60.0) -> None:
        """Writes what was queued so far as shards, and returns once they are written."""
        if self._process is None:
            return
        self._hand_over()
        self._flushed.clear()
        self._queue.put("flush")
        self._flushed.wait(timeout_s)

    def close(self, timeout_s: float = 60.0) -> None:
        """Summarizes what is queued, writes the last shards and stops the process."""
        if self._process is None:
            return
        self._stop.set()
        self._hand_over()
        self._queue.put(None)
        self._process.join(timeout_s)
        self._process = None

    def __enter__(self) -> TrafficLog:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclasses.dataclass(frozen=True)
class Window:
    """The summaries of a window, and what could not be read.

    Attributes:
        samples: the summary lines whose time is in the window.
        skipped: ``name: why`` of each shard that is corrupt or truncated (counted and skipped).
        missing: ``writer: sequence numbers`` of shards missing between a writer's shards.
        shards: the shards read.
    """

    samples: tuple[Mapping[str, Any], ...]
    skipped: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    shards: int = 0


def _read_shard(path: str) -> list[dict[str, Any]]:
    """A shard's lines; raises ValueError naming the line that is not a summary."""
    lines = []
    for number, text in enumerate(storage.read_text(path).splitlines(), 1):
        try:
            line = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"line {number} is not JSON ({err.msg}): truncated or corrupt") from None
        if not isinstance(line, dict) or not isinstance(line.get("image"), dict) or "time" not in line:
            raise ValueError(f"line {number} is not a traffic summary")
        lines.append(line)
    return lines


def _shard_start(match: re.Match) -> float:
    """When a shard's first summary was made (seconds since the epoch, from its name)."""
    return float(calendar.timegm(time.strptime(match["start"], "%Y%m%dT%H%M%SZ")))


def _gaps(sequences: Mapping[str, list[int]]) -> list[str]:
    out = []
    for writer, numbers in sorted(sequences.items()):
        absent = sorted(set(range(min(numbers), max(numbers) + 1)) - set(numbers))
        if absent:
            out.append(f"{writer}: {', '.join(str(n) for n in absent)}")
    return out


def read_window(folder: str, start: float, end: float) -> Window:
    """The summaries under ``folder`` whose time is in ``[start, end)`` (seconds since the epoch).

    Shards that cannot be read are named in ``skipped``; a writer's missing sequence numbers
    (a shard lost, or deleted) in ``missing``. Files that are not shards (temporary names) are
    ignored.
    """
    samples, skipped, sequences, shards = [], [], {}, 0
    for info in storage.list_info(folder, recursive=False):
        name = info.path
        match = SHARD_PATTERN.match(name)
        if match is None:
            continue
        sequences.setdefault(match["writer"], []).append(int(match["seq"]))
        if _shard_start(match) >= end:
            continue  # begins after the window
        try:
            lines = _read_shard(storage.join(folder, name))
        except (ValueError, UnicodeDecodeError) as err:
            skipped.append(f"{name}: {err}")
            continue
        shards += 1
        samples += [line for line in lines if start <= float(line["time"]) < end]
    return Window(tuple(samples), tuple(skipped), tuple(_gaps(sequences)), shards)


def prune_shards(folder: str, retention_days: int, now: Optional[float] = None) -> list[str]:
    """Deletes the shards older than ``retention_days`` (0: none); returns their names."""
    if retention_days <= 0:
        return []
    limit = (time.time() if now is None else now) - retention_days * 86400
    removed = []
    for info in storage.list_info(folder, recursive=False):
        match = SHARD_PATTERN.match(info.path)
        if match and _shard_start(match) < limit:
            storage.delete(storage.join(folder, info.path))
            removed.append(info.path)
    return removed


def summaries_of(
    images: Iterable[bytes], answers: Iterable[Optional[Mapping[str, Any]]], config: TrafficConfig
) -> list[dict[str, Any]]:
    """Summary lines of images and their answers outside a server (the evaluation's reference)."""
    return [
        {"image": summarize_image(data, config.keep), "answer": summarize_answer(answer, config.box_threshold)}
        for data, answer in zip(images, answers, strict=True)
    ]
