import base64
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from components.serving.checks import http_json
from tests.promote_models import digits, export_tiny_model, png_bytes

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def base_path(tmp_path_factory):
    base = tmp_path_factory.mktemp("models") / "clf"
    export_tiny_model(str(base / "1"), steps=40)
    export_tiny_model(str(base / "2"), steps=40, seed=1)
    (base / "3" / "variables").mkdir(parents=True)  # an unfinished copy: not servable, ignored
    return base


@pytest.fixture(scope="module")
def server(base_path):
    from components.serving.server import ModelServer

    with ModelServer(str(base_path), "clf", max_batch_size=8, max_request_bytes=200_000) as srv:
        yield srv


def b64(data):
    return {"b64": base64.b64encode(data).decode()}


def test_status_serves_the_newest_complete_version(server):
    status, body = http_json("GET", f"{server.url}/v1/models/clf")
    assert status == 200
    assert body == {
        "model_version_status": [
            {"version": "2", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
        ]
    }
    assert http_json("GET", f"{server.url}/v1/models/clf/versions/2")[0] == 200
    status, body = http_json("GET", f"{server.url}/v1/models/clf/versions/1")
    assert status == 404 and "Specific(clf, 1)" in body["error"]


def test_metadata_describes_both_signatures(server):
    status, body = http_json("GET", f"{server.url}/v1/models/clf/metadata")
    assert status == 200 and body["model_spec"] == {"name": "clf", "signature_name": "", "version": "2"}
    sigs = body["metadata"]["signature_def"]["signature_def"]
    assert sigs["serving_default"]["inputs"]["image_bytes"]["dtype"] == "DT_STRING"
    assert [d["size"] for d in sigs["serving_tensors"]["inputs"]["images"]["tensor_shape"]["dim"]] == [
        "-1",
        "8",
        "8",
        "1",
    ]
    assert [d["size"] for d in sigs["serving_default"]["outputs"]["probabilities"]["tensor_shape"]["dim"]] == [
        "-1",
        "10",
    ]


def test_row_columnar_and_tensor_requests_agree(server):
    images, _ = digits()
    url = f"{server.url}/v1/models/clf:predict"
    status, rows = http_json("POST", url, {"instances": [b64(png_bytes(im)) for im in images[:3]]})
    assert status == 200 and len(rows["predictions"]) == 3
    status, named = http_json("POST", url, {"instances": [{"image_bytes": b64(png_bytes(images[0]))}]})
    # Same answer; the last float digits may differ with the batch size (oneDNN picks kernels by shape).
    assert status == 200 and named["predictions"][0]["classes"] == rows["predictions"][0]["classes"]
    assert named["predictions"][0]["probabilities"] == pytest.approx(rows["predictions"][0]["probabilities"], abs=1e-6)
    status, cols = http_json("POST", url, {"inputs": {"image_bytes": [b64(png_bytes(im)) for im in images[:3]]}})
    assert status == 200 and cols["outputs"]["classes"] == [p["classes"] for p in rows["predictions"]]
    tensors = (images[:3, :, :, None] / 255.0).tolist()
    status, tens = http_json(
        "POST",
        f"{server.url}/v1/models/clf/versions/2:predict",
        {"signature_name": "serving_tensors", "instances": tensors},
    )
    assert status == 200
    for a, b in zip(tens["predictions"], rows["predictions"], strict=True):
        assert a["classes"] == b["classes"]
        assert max(abs(x - y) for x, y in zip(a["probabilities"], b["probabilities"], strict=True)) < 1e-5


def test_answers_carry_each_float32_in_its_shortest_digits(server, base_path):
    import numpy as np
    import tensorflow as tf

    images, _ = digits()
    encoded = [png_bytes(im) for im in images[:3]]
    status, rows = http_json("POST", f"{server.url}/v1/models/clf:predict", {"instances": [b64(e) for e in encoded]})
    assert status == 200
    got = [p["probabilities"] for p in rows["predictions"]]
    fn = tf.saved_model.load(str(base_path / "2")).signatures["serving_default"]
    want = fn(image_bytes=tf.constant(encoded))["probabilities"].numpy()
    # The same float32 values as in process, each written with float32's shortest digits (not as
    # a 17-digit float64), so it parses back to itself.
    assert np.array_equal(np.asarray(got, dtype=np.float32), want)
    assert all(float(str(np.float32(v))) == v for row in got for v in row)


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{nope", 400, "JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (b"[" * 100_000, 400, "JSON"),
        ({"instances": [b64(b"x")], "inputs": [b64(b"x")]}, 400, "exactly one"),
        ({"instances": []}, 400, "empty"),
        ({"instances": [{"b64": "%%%"}]}, 400, "base64"),
        ({"instances": [b64(b"not an image")]}, 400, "rejected the input"),
        ({"instances": [3]}, 400, "DT_STRING"),
        ({"signature_name": "nope", "instances": [b64(b"x")]}, 400, "not found"),
        ({"signature_name": "serving_tensors", "instances": [[[0.0]]]}, 400, "shape"),
        ({"signature_name": "serving_tensors", "instances": [[[["a"]]]]}, 400, "numbers"),
        ({"signature_name": "serving_tensors", "instances": [[[0.0] * 8] * 8, [[0.0] * 8]]}, 400, "numbers"),
        ({"instances": [b64(b"x")] * 9}, 400, "max batch size"),
        ({"instances": [{"wrong": 1}]}, 400, "expected exactly the inputs"),
        ({"instances": [b64(b"x")], "extra": 1}, 400, "unknown request keys"),
    ],
)
def test_bad_requests_get_400_with_a_message(server, body, status, needle):
    got, answer = http_json("POST", f"{server.url}/v1/models/clf:predict", body)
    assert got == status and needle in answer["error"]


def test_unknown_models_paths_and_oversized_bodies(server):
    assert http_json("GET", f"{server.url}/v1/models/other")[0] == 404
    assert http_json("POST", f"{server.url}/v1/models/other:predict", {"instances": [b64(b"x")]})[0] == 404
    assert http_json("GET", f"{server.url}/v2/whatever")[0] == 404
    assert http_json("POST", f"{server.url}/v1/models/clf/versions/x:predict", {"instances": []})[0] == 404
    status, body = http_json("POST", f"{server.url}/v1/models/clf:predict", {"instances": [b64(b"x" * 300_000)]})
    assert status == 413 and "exceeds" in body["error"]
    # A raw socket that lies about its length and hangs up must not hurt the server either.
    host, port = server.url[len("http://") :].split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /v1/models/clf:predict HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
    assert http_json("GET", f"{server.url}/v1/models/clf")[0] == 200


def test_concurrent_requests(server):
    images, _ = digits()
    body = {"instances": [b64(png_bytes(images[0]))]}
    results = []

    def client():
        for _ in range(10):
            results.append(http_json("POST", f"{server.url}/v1/models/clf:predict", body)[0])

    threads = [threading.Thread(target=client) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 60


def test_plain_saved_model_folder_and_pinned_version(base_path):
    from components.serving.server import ModelServer

    with ModelServer(str(base_path / "1"), "plain") as srv:
        assert srv.served_version == 1
        assert http_json("GET", f"{srv.url}/v1/models/plain/versions/1")[0] == 200
    with ModelServer(str(base_path), "clf", version=1) as srv:
        assert srv.served_version == 1
    with pytest.raises(FileNotFoundError, match="no SavedModel"):
        ModelServer(str(base_path / "3"), "clf").start()


def test_command_line(base_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "components.serving.server",
            "--model-base-path",
            str(base_path),
            "--model-name",
            "clf",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # blocks until the server says it is up (or exits)
        assert f"serving clf version 2 at http://127.0.0.1:{port}" in line, line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models/clf", timeout=10) as r:
            assert json.load(r)["model_version_status"][0]["state"] == "AVAILABLE"
    finally:
        proc.terminate()
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    assert proc.returncode == 0


def test_keep_alive_connection_survives_errors(server):
    import http.client

    host, port = server.url[len("http://") :].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    for path, body, status in [
        ("/v1/models/other:predict", b'{"instances": []}', 404),  # body must still be consumed
        ("/nowhere", b"{}", 404),
        ("/v1/models/clf:predict", b"{bad", 400),
        ("/v1/models/clf:predict", json.dumps({"instances": [b64(png_bytes(digits()[0][0]))]}).encode(), 200),
    ]:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        answer = json.loads(response.read())
        assert response.status == status, answer
        assert ("predictions" if status == 200 else "error") in answer
    # Answers go out without Nagle's delay: on a reused connection each one otherwise waited for
    # the client's delayed ACK of the headers (about 40 ms on Linux).
    with server._lock:
        accepted = list(server._connections)
    assert accepted and all(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for c in accepted)
    conn.close()


def test_several_models_side_by_side_by_name(base_path):
    from components.serving.server import ModelServer

    image = png_bytes(digits()[0][0])
    with ModelServer([("a", str(base_path)), ("b", str(base_path / "1"))]) as srv:
        assert srv.served_versions == {"a": 2, "b": 1}
        for name, version in (("a", "2"), ("b", "1")):
            status, body = http_json("GET", f"{srv.url}/v1/models/{name}")
            assert status == 200 and body["model_version_status"][0]["version"] == version
            status, body = http_json("POST", f"{srv.url}/v1/models/{name}:predict", {"instances": [b64(image)]})
            assert status == 200 and len(body["predictions"][0]["probabilities"]) == 10
        assert http_json("GET", f"{srv.url}/v1/models/b/metadata")[1]["model_spec"]["name"] == "b"
        status, body = http_json("GET", f"{srv.url}/v1/models/c")
        assert (
            status == 404
            and body["error"] == "Servable not found for request: Latest(c); this server serves ['a', 'b']"
        )
        with pytest.raises(RuntimeError, match="serves 2 models: read served_versions"):
            _ = srv.served_version


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (([("a", "x"), ("a", "y")],), {}, "'a' is given twice"),
        (([],), {}, "no model to serve"),
        (([("a", "x")], "a"), {}, "with \\(name, base path\\) pairs, name each pair"),
        (("x",), {}, "model_name is required"),
        (([("a/b", "x")],), {}, "without '/' or ':'"),
        (([("a", "x"), ("b", "y")],), {"version": 1}, "version pins the one model"),
    ],
)
def test_bad_model_lists_are_refused(args, kwargs, message):
    from components.serving.server import ModelServer

    with pytest.raises(ValueError, match=message):
        ModelServer(*args, **kwargs)


def test_command_line_serves_several_models(base_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "components.serving.server", "--port", str(port)]
    command += ["--model", f"clf={base_path}", "--model", f"first={base_path / '1'}"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert f"serving clf version 2, first version 1 at http://127.0.0.1:{port}" in line, line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models/first", timeout=10) as r:
            assert json.load(r)["model_version_status"][0]["version"] == "1"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    bad = subprocess.run(
        [sys.executable, "-m", "components.serving.server", "--model", "clf"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "expected NAME=PATH" in bad.stderr
    both = subprocess.run(
        [sys.executable, "-m", "components.serving.server", "--model", "a=x", "--model-name", "b"],
        capture_output=True,
        text=True,
    )
    assert both.returncode == 2 and "not both" in both.stderr
