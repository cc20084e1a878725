"""Sampled live traffic (components/serving/traffic.py): the sampler, the summaries, the shards."""

from __future__ import annotations

import base64
import io
import json
import os
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from PIL import Image

from components.serving.traffic import (
    Exchange,
    Sampler,
    TrafficConfig,
    TrafficLog,
    prune_shards,
    read_window,
    request_images,
    summarize_answer,
    summarize_image,
)
from trainer.config import ConfigError


def _png(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


@pytest.mark.parametrize("rate", [0.02, 0.1, 0.5, 1.0, 0.0])
def test_the_sampler_keeps_an_exact_share_of_any_run_of_requests(rate):
    sampler = Sampler(rate)
    taken = [sampler.take() for _ in range(10_000)]
    assert sum(taken) == int(10_000 * rate)
    # Any later run of 1,000 requests keeps its share too, give or take one.
    assert abs(sum(taken[3_217:4_217]) - 1_000 * rate) <= 1


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [("sample_rate", 1.5, "must be in [0, 1]"), ("sample_rate", -0.1, "must be in [0, 1]"), ("keep", "all", "summary")],
)
def test_a_bad_rate_or_keep_is_one_line_naming_it(field, value, words):
    with pytest.raises(ConfigError) as err:
        TrafficConfig(**{field: value})
    assert field in str(err.value) and words in str(err.value) and "\n" not in str(err.value)


def test_an_image_summary_has_its_size_channels_brightness_and_contrast():
    pixels = np.zeros((20, 30, 3), np.uint8)
    pixels[:, 15:] = 255
    summary = summarize_image(_png(pixels))
    assert summary == {"decoded": True, "width": 30, "height": 20, "channels": 3, "brightness": 0.5,
                       "contrast": 0.5}  # fmt: skip
    assert summarize_image(b"\x89PNG\r\n\x1a\n truncated") == {"decoded": False}
    hashed = summarize_image(_png(pixels), keep="hash")["hash"]
    assert len(hashed) == 16 and hashed == summarize_image(_png(pixels), keep="image")["hash"]


def test_an_answer_summary_has_the_class_score_margin_and_boxes():
    assert summarize_answer({"probabilities": [0.1, 0.7, 0.2], "classes": 1}) == {
        "class": 1, "score": 0.7, "margin": 0.5, "empty": False}  # fmt: skip
    boxes = summarize_answer({"detection_scores": [0.9, 0.6, 0.2], "detection_classes": [3.0, 1.0, 2.0]}, 0.5)
    assert boxes == {"class": 3, "score": 0.9, "margin": 0.3, "boxes": 2, "empty": False}
    assert summarize_answer({"detection_scores": [0.3], "detection_classes": [1.0]}, 0.5)["empty"] is True
    assert summarize_answer(None) == {"empty": True, "class": None}


def test_the_images_of_row_and_columnar_requests_are_found():
    data = b"abc"
    b64 = base64.b64encode(data).decode()
    assert request_images({"instances": [{"b64": b64}, {"image_bytes": {"b64": b64}}]}) == [data, data]
    assert request_images({"inputs": {"image_bytes": [{"b64": b64}]}}) == [data]
    assert request_images({"instances": [{"b64": "not base64!"}]}) == [None]


def _exchange(pixels: np.ndarray, when: float) -> Exchange:
    body = {"instances": [{"b64": base64.b64encode(_png(pixels)).decode()}]}
    answer = {"predictions": [{"probabilities": [0.2, 0.8], "classes": 1}]}
    return Exchange("classifier", 3, 200, 4.5, body, answer, time=when)


def test_the_log_writes_whole_shards_off_the_answering_thread_and_a_reader_finds_them(tmp_path):
    config = TrafficConfig(sample_rate=0.5, shard_records=4)
    now = time.time()
    pixels = np.full((8, 8), 128, np.uint8)
    with TrafficLog(str(tmp_path), config) as traffic:
        queued = [traffic.offer(lambda i=i: _exchange(pixels, now + i)) for i in range(20)]
    assert sum(queued) == 10 and traffic.written == 10 and traffic.dropped == 0
    names = sorted(os.listdir(tmp_path / "classifier"))
    assert len(names) == 3 and all(n.endswith(".jsonl") for n in names)  # 4 + 4 + 2
    window = read_window(str(tmp_path / "classifier"), now, now + 100)
    assert len(window.samples) == 10 and window.skipped == () and window.missing == ()
    line = window.samples[0]
    assert line["image"]["brightness"] == pytest.approx(128 / 255, abs=1e-4) and line["answer"]["class"] == 1
    assert line["version"] == 3 and line["latency_ms"] == 4.5 and "b64" not in line["image"]
    assert len(read_window(str(tmp_path / "classifier"), now + 4.5, now + 100).samples) == 8  # requests 5, 7, ..., 19


def test_a_full_buffer_drops_and_counts_rather_than_waiting(tmp_path):
    traffic = TrafficLog(str(tmp_path), TrafficConfig(sample_rate=1.0, buffer=3))  # not started: nothing drains
    pixels = np.zeros((4, 4), np.uint8)
    results = [traffic.offer(lambda: _exchange(pixels, time.time())) for _ in range(5)]
    assert results == [True, True, True, False, False] and traffic.dropped == 2


def test_a_corrupt_shard_is_named_and_skipped_and_a_missing_one_is_reported(tmp_path):
    now = time.time()
    with TrafficLog(str(tmp_path), TrafficConfig(sample_rate=1.0, shard_records=2)) as traffic:
        for i in range(6):
            traffic.offer(lambda i=i: _exchange(np.zeros((4, 4), np.uint8), now + i))
    first, middle, last = sorted(os.listdir(tmp_path / "classifier"))
    os.remove(tmp_path / "classifier" / middle)  # the collector was killed: this shard never came
    with open(tmp_path / "classifier" / last, "r+") as f:
        text = f.read()
        f.seek(0)
        f.write(text[: len(text) // 2 - 10])  # a shard cut short by hand (the log itself never writes one)
        f.truncate()
    (tmp_path / "classifier" / ".x.jsonl.tmp-1234").write_text("half")  # a temporary name is never read
    window = read_window(str(tmp_path / "classifier"), now - 1, now + 100)
    assert len(window.samples) == 2 and window.shards == 1
    assert len(window.skipped) == 1 and window.skipped[0].startswith(last) and "truncated" in window.skipped[0]
    assert window.missing == (f"{traffic.writer}: 1",)


def test_keep_image_keeps_a_capped_set_and_old_shards_are_pruned(tmp_path):
    now = time.time()
    config = TrafficConfig(sample_rate=1.0, keep="image", image_cap=2, shard_records=10)
    with TrafficLog(str(tmp_path), config) as traffic:
        for i in range(5):
            traffic.offer(lambda i=i: _exchange(np.zeros((4, 4), np.uint8), now + i))
    lines = [json.loads(x) for x in open(tmp_path / "classifier" / os.listdir(tmp_path / "classifier")[0])]
    assert sum("b64" in line["image"] for line in lines) == 2 and all("hash" in line["image"] for line in lines)
    assert prune_shards(str(tmp_path / "classifier"), 30, now=now + 29 * 86400) == []
    assert (
        len(prune_shards(str(tmp_path / "classifier"), 30, now=now + 31 * 86400)) == 1
        and os.listdir(tmp_path / "classifier") == []
    )


def test_the_collector_pairs_kserve_s_logged_events_and_keeps_only_the_sampled_ones(tmp_path):
    import threading

    from components.serving.collector import CollectorServer
    from components.serving.traffic import read_window

    pixels = np.full((6, 6), 200, np.uint8)
    request = json.dumps({"instances": [{"b64": base64.b64encode(_png(pixels)).decode()}]}).encode()
    response = json.dumps({"predictions": [{"probabilities": [0.9, 0.1], "classes": 0}]}).encode()

    def post(url, event_id, kind, body):
        headers = {"ce-id": event_id, "ce-type": f"org.kubeflow.serving.inference.{kind}",
                   "ce-inferenceservicename": "classifier", "Content-Type": "application/json"}  # fmt: skip
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as err:
            return err.code

    with TrafficLog(str(tmp_path), TrafficConfig(sample_rate=0.5)) as traffic:
        server = CollectorServer(("127.0.0.1", 0), traffic)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        for i in range(10):
            assert post(server.url, f"id-{i}", "request", request) == 202
        for i in reversed(range(10)):  # responses may come in any order
            assert post(server.url, f"id-{i}", "response", response) == 202
        assert post(server.url, "", "request", request) == 400  # not a CloudEvent: refused, one line
        server.shutdown()
        server.server_close()
    lines = read_window(str(tmp_path / "classifier"), 0, time.time() + 1).samples
    assert len(lines) == 5 and traffic.sampled == 5 and traffic.dropped == 0
    assert all(line["answer"]["class"] == 0 and line["image"]["brightness"] > 0.78 for line in lines)
