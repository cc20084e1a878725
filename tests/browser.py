"""A page opened in real headless Chromium (Debian's ``chromium``), driven over its DevTools protocol.

No browser is downloaded: ``make browser`` installs Debian's package. The page is loaded from a
``file://`` URL; everything the page asks the network for, every console message and every
uncaught exception is recorded, and a screenshot can be saved. The protocol client is
``websocket-client`` (a plain WebSocket; the messages are DevTools' JSON commands and events).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional

CHROMIUM_NAMES = ("chromium", "chromium-browser")


def chromium_path() -> Optional[str]:
    """The Chromium executable on PATH, or None."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    """Headless Chromium with one page, as a context manager.

    Attributes:
        console: console messages (``type``, ``text``) and uncaught exceptions (type ``exception``).
        requests: every URL the page requested (``file:`` and ``data:`` included).
    """

    def __init__(self, width: int = 1200, height: int = 900, timeout_s: float = 30.0) -> None:
        self.width, self.height, self.timeout_s = width, height, timeout_s
        self.console: list[dict[str, str]] = []
        self.requests: list[str] = []
        self._id = 0
        self._proc: Optional[subprocess.Popen] = None
        self._profile: Optional[str] = None
        self._ws = None

    def __enter__(self) -> Browser:
        import websocket

        exe = chromium_path()
        if exe is None:
            raise RuntimeError("chromium is not installed: run 'make browser' (Debian package chromium)")
        self._profile = tempfile.mkdtemp(prefix="chromium-profile-")
        port = _free_port()
        args = [
            exe,
            "--headless",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-dev-shm-usage",
            f"--user-data-dir={self._profile}",
            f"--remote-debugging-port={port}",
            "--remote-allow-origins=*",
            f"--window-size={self.width},{self.height}",
            "about:blank",
        ]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
        self._proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + self.timeout_s
        target = None
        while target is None:
            if self._proc.poll() is not None:
                raise RuntimeError(f"chromium exited with status {self._proc.returncode} at start")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                    pages = [t for t in json.loads(r.read()) if t.get("type") == "page"]
                target = pages[0] if pages else None
            except OSError:
                target = None
            if target is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"chromium's DevTools endpoint on port {port} did not answer")
                time.sleep(0.2)
        self._ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=self.timeout_s)
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(f"{domain}.enable")
        # The page's size, whatever the headless window's: a screenshot is of this viewport.
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=self.width,
            height=self.height,
            deviceScaleFactor=1,
            mobile=False,
        )
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._ws is not None:
            self._ws.close()
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        if self._profile:
            shutil.rmtree(self._profile, ignore_errors=True)

    def _event(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.console.append({"type": params.get("type", ""), "text": text})
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.console.append(
                {"type": "exception", "text": details.get("text", "") + str(details.get("exception", ""))}
            )
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            self.console.append({"type": entry.get("level", ""), "text": entry.get("text", "")})
        elif method == "Network.requestWillBeSent":
            self.requests.append(params.get("request", {}).get("url", ""))

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Sends one DevTools command and returns its result (events meanwhile are recorded)."""
        self._id += 1
        self._ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._event(message)

    def wait_for(self, method: str, timeout_s: Optional[float] = None) -> dict[str, Any]:
        """Waits for one event of ``method`` (others are recorded) and returns its params."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while time.monotonic() < deadline:
            message = json.loads(self._ws.recv())
            self._event(message)
            if message.get("method") == method:
                return message.get("params", {})
        raise TimeoutError(f"no {method} within {timeout_s or self.timeout_s} s")

    def open(self, path: Path) -> None:
        """Loads a local file and waits until it has loaded (and a moment more for late errors)."""
        self.call("Page.navigate", url=path.resolve().as_uri())
        self.wait_for("Page.loadEventFired")
        self.evaluate("new Promise(r => setTimeout(r, 300))")  # let late console errors arrive

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails'].get('text')}")
        return result.get("result", {}).get("value")

    def screenshot(self, path: Path, full_page: bool = False, scale: float = 1.0) -> Path:
        """Saves a PNG of the viewport (or the whole page) to ``path``."""
        height = self.evaluate("document.documentElement.scrollHeight") if full_page else self.height
        params: dict[str, Any] = {
            "format": "png",
            "clip": {"x": 0, "y": 0, "width": self.width, "height": height, "scale": scale},
            "captureBeyondViewport": full_page,
        }
        data = self.call("Page.captureScreenshot", **params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
