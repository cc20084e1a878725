"""Scoring many images with an exported model, fast: the core of batch prediction.

Three stages overlap, each on its own threads:

1. **Reading**: a thread pool reads the files' bytes ahead of the rest
   (:func:`trainer.storage.read_bytes`: local paths, and ``gs://`` through google-cloud-storage,
   never TensorFlow's own ``gs://`` reader).
2. **Decoding**: a producer thread groups the bytes into chunks of ``batch_size`` and decodes each
   chunk with one call of a compiled function: the task's per-image preprocessing
   (:attr:`PredictionInput.preprocess`, the operations ``serving_default`` runs in its graph, so
   the predictions equal its) mapped over the chunk, several images at once.
3. **Scoring**: the calling thread feeds each decoded chunk to the export's tensor signature and
   the task turns the outputs into one JSON-ready record per image
   (:meth:`Prediction.records`, the task's batch-prediction facet), while the next chunks are read and decoded.

The stages are threads rather than a ``tf.data`` pipeline because, measured on a small detector on
two cores, ``tf.data`` costs about 70 ms each time a pipeline starts (building its iterator and
filling it) and per image about a tenth of a millisecond more than the same decoding in one
function call (``from_generator`` and its per-element runtime): together a tenth to a half of the
rate a shard must reach. The stages here start in milliseconds and add next to nothing per image.

A chunk with an image that cannot be decoded fails as a whole, as ``serving_default``'s batch
would; only then are its images decoded one at a time, those that decode scored as a smaller
batch and the others listed with the decoder's message. An image that cannot be read is listed
as well and never decoded. The reasons start with ``cannot read:`` or ``cannot decode:``; the
rest of the input is scored.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import gc
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from typing import Any, Optional

import numpy as np

from trainer import storage
from trainer.tasks.base import Prediction, PredictionInput, Task, prediction_of

# Images read ahead per read thread: enough to keep the decoding busy while a slow object store
# answers, few enough that a shard's memory stays small (at least two chunks are read ahead).
READ_AHEAD_PER_THREAD = 4
# Decoded chunks waiting for the model: one being scored, one ready, one being decoded.
DECODED_AHEAD = 2
# Images of one chunk decoded at once (map_fn's parallel_iterations; serving_default's graph uses 10).
_PARALLEL_DECODES = 16
# What an eager op's error message wraps around the decoder's own.
_OP_NOISE = re.compile(r"\{\{function_node [^}]*\}\}|\[Op:[^\]]*\].*$", re.DOTALL)
# ``(index, bytes or None, why not)``: one input image as the reading stage hands it on.
_Item = tuple[int, Optional[bytes], Optional[str]]


class BatchPredictError(ValueError):
    """Scoring cannot run as asked; the message says what was wrong and what to do."""


@dataclasses.dataclass(frozen=True)
class ScoredImages:
    """What one call scored.

    Attributes:
        records: ``(index into the input, the task's record)`` for every image scored, by index.
        failures: ``(index, reason)`` for every image that was not scored, by index; the reason
            starts with ``cannot read:`` or ``cannot decode:``.
        seconds: wall time from the first image read to the last record made (the model's loading
            left out).
        images_per_sec: images scored per second of ``seconds``.
    """

    records: list[tuple[int, dict[str, Any]]]
    failures: list[tuple[int, str]]
    seconds: float
    images_per_sec: float


class Predictor:
    """An export loaded for batch prediction, its decoding compiled: load once, score many times.

    Args:
        prediction_input: what the task's :meth:`Prediction.load` returned.
    """

    def __init__(self, prediction_input: PredictionInput) -> None:
        import tensorflow as tf

        self.input = prediction_input
        preprocess = prediction_input.preprocess
        # One image's preprocessing, for a chunk that failed, image by image.
        self.decode_one = tf.function(preprocess, input_signature=[tf.TensorSpec([], tf.string)])
        image_spec, meta_spec = self.decode_one.get_concrete_function().structured_outputs
        specs = (tf.TensorSpec(image_spec.shape, tf.float32), tf.TensorSpec(meta_spec.shape, tf.float32))

        def decode_chunk(data: Any) -> tuple[Any, Any]:
            return tf.map_fn(preprocess, data, fn_output_signature=specs, parallel_iterations=_PARALLEL_DECODES)

        # Traced here, so that no scoring pays for it.
        self.decode_chunk = tf.function(decode_chunk).get_concrete_function(tf.TensorSpec([None], tf.string))

    def decode(self, indices: list[int], data: list[bytes]) -> tuple[Optional[tuple[list[int], Any, Any]], list]:
        """A chunk decoded: ``((indices, images, meta) or None when none decodes, [(index, reason)])``."""
        import tensorflow as tf

        try:
            images, meta = self.decode_chunk(tf.constant(data, dtype=tf.string))
            return (indices, images, meta.numpy()), []
        except tf.errors.OpError:
            pass  # an image of the chunk cannot be decoded: find which, and keep the others
        good, failures = [], []
        for index, encoded in zip(indices, data, strict=True):
            try:
                good.append((index, *self.decode_one(tf.constant(encoded, dtype=tf.string))))
            except tf.errors.OpError:
                failures.append((index, self.decode_error(encoded)))
        if not good:
            return None, failures
        images = tf.stack([g[1] for g in good])
        return ([g[0] for g in good], images, np.stack([g[2].numpy() for g in good])), failures

    def decode_error(self, data: bytes) -> str:
        """Why an image cannot be decoded: its preprocessing run eagerly, for the decoder's own message."""
        import tensorflow as tf

        try:
            self.input.preprocess(tf.constant(data, dtype=tf.string))
        except tf.errors.OpError as err:
            message = _OP_NOISE.sub("", err.message or "").strip() or type(err).__name__
            return f"cannot decode: {message.splitlines()[0]}"
        return "cannot decode: it fails only inside a compiled function"

    def score(
        self, facet: Prediction, indices: list[int], images: Any, meta: Any, settings: dict[str, Any]
    ) -> list[tuple[int, dict[str, Any]]]:
        """The records of one decoded chunk, as the task's facet makes them."""
        outputs = self.input.function(**{self.input.input_name: images})
        batch = facet.records(
            {k: v.numpy() for k, v in outputs.items()}, meta, class_names=self.input.class_names, **settings
        )
        return list(zip(indices, batch, strict=True))


def _read_all(uris: Sequence[str], read_bytes: Callable[[str], bytes], threads: int, ahead: int) -> Iterator[_Item]:
    """Each URI's bytes (or why not) in order, read by ``threads`` threads up to ``ahead`` images ahead."""

    def read(index: int) -> _Item:
        try:
            return index, read_bytes(uris[index]), None
        except Exception as err:  # any storage error makes one failure, not a failed shard
            return index, None, f"{type(err).__name__}: {err}"

    with concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="batch-predict-read") as pool:
        pending: collections.deque[concurrent.futures.Future] = collections.deque()
        try:
            for index in range(len(uris)):
                pending.append(pool.submit(read, index))
                if len(pending) >= ahead:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:  # an abandoned scoring reads no further
                future.cancel()


def _given(images: Iterable[Any]) -> Iterator[_Item]:
    """Encoded images given in memory, as the reading stage hands them on."""
    for index, data in enumerate(images):
        if isinstance(data, (bytes, bytearray, memoryview)):
            yield index, bytes(data), None
        else:
            yield index, None, f"expected encoded image bytes, got {type(data).__name__}"


class _Producer(threading.Thread):
    """The decoding stage: chunks of read images, decoded, onto ``out`` (None last)."""

    def __init__(self, predictor: Predictor, items: Iterator[_Item], chunk: int) -> None:
        super().__init__(name="batch-predict-decode", daemon=True)
        self.predictor, self.items, self.chunk = predictor, items, chunk
        self.out: queue.Queue = queue.Queue(maxsize=DECODED_AHEAD)
        self.failures: list[tuple[int, str]] = []
        self.error: Optional[BaseException] = None
        self.stop = threading.Event()

    def run(self) -> None:
        """Decodes chunk after chunk until the input ends, the scorer stops, or an error (kept in ``error``)."""
        try:
            with contextlib.closing(self.items):
                for indices, data in self._chunks():
                    decoded, failures = self.predictor.decode(indices, data)
                    self.failures.extend(failures)
                    if decoded is not None and not self._put(decoded):
                        return
        except BaseException as err:  # handed to the scoring thread, which raises it
            self.error = err
        finally:
            self._put(None)

    def _chunks(self) -> Iterator[tuple[list[int], list[bytes]]]:
        indices: list[int] = []
        data: list[bytes] = []
        for index, encoded, reason in self.items:
            if encoded is None:
                self.failures.append((index, f"cannot read: {reason}"))
                continue
            indices.append(index)
            data.append(encoded)
            if len(indices) == self.chunk:
                yield indices, data
                indices, data = [], []
        if indices:
            yield indices, data

    def _put(self, item: Any) -> bool:
        """Waits for room on ``out``; False once the scorer has stopped."""
        while not self.stop.is_set():
            try:
                self.out.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False


@contextlib.contextmanager
def _young_collections_only() -> Iterator[Callable[[], None]]:
    """Python's garbage collector without its full collections, for the length of a scoring.

    A full collection walks every object of the process, a few hundred thousand once TensorFlow
    is imported (about 0.3 s here), and the records a scoring keeps (small dicts and lists, many
    per image) set one off every thousand images or so: a sixth of a small detector's time.
    Automatic collection is off inside; the function given collects the young generations (the
    last batch's objects, and any reference cycles among them), to be called after each batch.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield lambda: gc.collect(1)
    finally:
        if enabled:
            gc.enable()


def _run(
    predictor: Predictor,
    facet: Prediction,
    items: Iterator[_Item],
    total: Optional[int],
    *,
    batch_size: int,
    settings: dict[str, Any],
    on_batch: Optional[Callable[..., None]],
) -> ScoredImages:
    """Scores what ``items`` gives, the decoding on its own thread; see the module docstring."""
    records: list[tuple[int, dict[str, Any]]] = []
    start = time.perf_counter()
    producer = _Producer(predictor, items, batch_size)
    producer.start()
    try:
        with _young_collections_only() as collect:
            while (decoded := producer.out.get()) is not None:
                records.extend(predictor.score(facet, *decoded, settings))
                collect()
                if on_batch is not None:
                    on_batch(len(records) + len(producer.failures), total)
    finally:
        producer.stop.set()
        producer.join()
    if producer.error is not None:
        raise BatchPredictError(f"reading or decoding the images broke down: {producer.error!r}") from producer.error
    seconds = time.perf_counter() - start
    if on_batch is not None:
        on_batch(len(records) + len(producer.failures), total)
    return ScoredImages(
        records=sorted(records, key=lambda r: r[0]),
        failures=sorted(producer.failures),
        seconds=seconds,
        images_per_sec=len(records) / seconds if seconds > 0 else 0.0,
    )


def _check(task: Task, batch_size: int, score_threshold: float, top_k: int, read_threads: int = 1) -> dict[str, Any]:
    """Refuses settings that cannot work, before the model is loaded; returns the records' settings."""
    if batch_size < 1 or top_k < 1 or read_threads < 1:
        raise BatchPredictError(
            f"batch_size, top_k and read_threads must be at least 1, got {batch_size}, {top_k} and {read_threads}"
        )
    if not 0.0 <= score_threshold <= 1.0:
        raise BatchPredictError(f"score_threshold must be in [0, 1], got {score_threshold}")
    prediction_of(task)
    return {"score_threshold": float(score_threshold), "top_k": int(top_k)}


def load_predictor(saved_model_dir: str | Predictor, task: Task) -> Predictor:
    """An export loaded for batch prediction by its task's facet (:meth:`Prediction.load`); a
    :class:`Predictor` given is returned as it is.

    Raises:
        TaskError: the folder is not the task's export, or the task does not do batch prediction.
    """
    if isinstance(saved_model_dir, Predictor):
        return saved_model_dir
    return Predictor(prediction_of(task).load(saved_model_dir))


def score_images(
    saved_model_dir: str | Predictor,
    task: Task,
    uris: Sequence[str],
    *,
    batch_size: int = 64,
    score_threshold: float,
    top_k: int,
    read_bytes: Callable[[str], bytes] = storage.read_bytes,
    read_threads: int = 8,
    on_batch: Optional[Callable[..., None]] = None,
) -> ScoredImages:
    """Scores image files with an export; an unreadable or undecodable file is a failure, not an error.

    Args:
        saved_model_dir: the export's folder, or a :class:`Predictor` (:func:`load_predictor`)
            to load a model once for several calls.
        task: the task the model was trained for.
        uris: the image files, local paths or ``gs://`` URIs; records and failures index into it.
        batch_size: images per call of the tensor signature.
        score_threshold: a prediction scoring less is left out of the records.
        top_k: the most classes or boxes a record keeps.
        read_bytes: reads one file (tests pass a fake).
        read_threads: files read at once.
        on_batch: ``on_batch(done, total)`` after each batch: images scored or failed so far, and
            ``len(uris)``; called last with ``(len(uris), len(uris))``.

    Returns:
        The records by index, the failures by index, the wall time and the rate.

    Raises:
        BatchPredictError: settings that cannot work, or the reading or decoding broke down as a
            whole (a failing file is a failure, not an error).
        TaskError: the folder is not the task's export, or the task does not do batch prediction.
    """
    settings = _check(task, batch_size, score_threshold, top_k, read_threads)
    predictor = load_predictor(saved_model_dir, task)
    ahead = max(read_threads * READ_AHEAD_PER_THREAD, 2 * batch_size)
    items = _read_all(uris, read_bytes, read_threads, ahead)
    facet = prediction_of(task)
    return _run(predictor, facet, items, len(uris), batch_size=batch_size, settings=settings, on_batch=on_batch)


def score_encoded(
    saved_model_dir: str | Predictor,
    task: Task,
    images: Iterable[bytes],
    *,
    batch_size: int = 64,
    score_threshold: float,
    top_k: int,
    on_batch: Optional[Callable[..., None]] = None,
) -> ScoredImages:
    """Scores encoded images given in memory or streamed (a converted dataset's records, say).

    The iterable is consumed once, on the decoding thread, as the scoring asks for images; only
    the chunks in flight are held. Indices are positions in it; an item that is not bytes is a
    failure. Arguments, returns and errors as :func:`score_images`, whose ``on_batch`` total here
    is ``len(images)`` where it has one, else None.
    """
    settings = _check(task, batch_size, score_threshold, top_k)
    predictor = load_predictor(saved_model_dir, task)
    total = len(images) if isinstance(images, Sized) else None
    facet = prediction_of(task)
    return _run(predictor, facet, _given(images), total, batch_size=batch_size, settings=settings, on_batch=on_batch)


def record_features(serialized: bytes) -> dict[str, list[Any]]:
    """A converted dataset's record (one ``tf.train.Example``) as feature name -> its values.

    What a converted dataset's images are scored from: ``image/encoded``, and the features the
    task's :meth:`Prediction.truth` reads its label from.
    """
    import tensorflow as tf

    example = tf.train.Example.FromString(serialized)
    out: dict[str, list[Any]] = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        out[name] = list(getattr(feature, kind).value) if kind else []
    return out
