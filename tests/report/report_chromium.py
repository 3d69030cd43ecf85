"""A small Chrome DevTools Protocol client over --remote-debugging-pipe, for the browser tests.

Chromium reads commands on fd 3 and writes replies and events on fd 4, one JSON message per NUL-terminated
record; no WebSocket client and no extra package is needed.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

# Networking off: no background services, no DNS (every host resolves to nothing), no QUIC.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--metrics-recording-only",
    "--mute-audio",
    "--hide-scrollbars",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--remote-debugging-pipe",
)


def find_chromium() -> str | None:
    """Return the Chromium binary to drive: $INTERPRET_CHROMIUM, /usr/bin/chromium, or `chromium` on PATH."""
    for candidate in (os.environ.get("INTERPRET_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


class CDPError(RuntimeError):
    """A DevTools command failed or timed out."""


class Chromium:
    """A headless Chromium with a fresh profile, driven over the DevTools pipe. Use as a context manager."""

    def __init__(self, binary: str, profile: Path, timeout: float = 20.0) -> None:
        self.timeout = timeout
        self.events: list[dict[str, Any]] = []
        self._next_id = 0
        self._buffer = b""
        profile.mkdir(parents=True, exist_ok=True)
        # The child must find its ends at exactly fd 3 and 4; park them above 4 first so dup2 cannot clobber.
        child_in, self._to_child = os.pipe()
        self._from_child, child_out = os.pipe()
        child_in_hi = fcntl.fcntl(child_in, fcntl.F_DUPFD_CLOEXEC, 10)
        child_out_hi = fcntl.fcntl(child_out, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(child_in)
        os.close(child_out)

        def attach_pipe() -> None:  # runs in the child between fork and exec
            os.dup2(child_in_hi, 3)
            os.dup2(child_out_hi, 4)

        self._log = open(profile / "chromium.log", "wb")
        self.process = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=attach_pipe,
            close_fds=False,
        )
        os.close(child_in_hi)
        os.close(child_out_hi)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the browser (politely, then by force) and the pipes."""
        try:
            if self.process.poll() is None:
                self.call("Browser.close", timeout=5)
        except (CDPError, OSError):
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float | None = None) -> dict[str, Any]:
        """Return the result of one DevTools command (events that arrive meanwhile go to `events`)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            reply = self._read(deadline, f"{method} reply")
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise CDPError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, session: str | None = None, timeout: float | None = None) -> dict[str, Any]:
        """Return the params of the first event `method` (of `session`) not yet consumed."""
        deadline = time.monotonic() + (timeout or self.timeout)
        seen = 0
        while True:
            for event in self.events[seen:]:
                if event.get("method") == method and event.get("sessionId") == session and not event.get("_used"):
                    event["_used"] = True
                    return event.get("params", {})
            seen = len(self.events)
            self.events.append(self._read(deadline, method))

    def open_page(self, width: int = 1280, height: int = 900) -> Page:
        """Return a new page (tab) with Page, Runtime, Log and Network events on."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Log", "Network"):
            page.call(f"{domain}.enable")
        page.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        return page

    def _read(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError(f"timed out waiting for {waiting_for}")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    raise CDPError(f"Chromium closed the pipe while we waited for {waiting_for}")
                self._buffer += chunk
        record, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(record)


class Page:
    """One tab, addressed by its DevTools session."""

    def __init__(self, browser: Chromium, session: str) -> None:
        self.browser = browser
        self.session = session

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> dict[str, Any]:
        """Return the result of a command sent to this tab."""
        return self.browser.call(method, params, self.session, timeout)

    def navigate(self, url: str) -> None:
        """Open `url` and wait for its load event."""
        self.call("Page.navigate", {"url": url})
        self.browser.wait_for("Page.loadEventFired", self.session)

    def evaluate(self, expression: str) -> Any:
        """Return the value of a JavaScript expression (promises awaited); a thrown error raises CDPError."""
        reply = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in reply:
            raise CDPError(f"{expression[:60]!r} threw {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait_until(self, expression: str, timeout: float = 10.0) -> Any:
        """Return the expression's value once it is truthy, polling every 50 ms."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.05)
        raise CDPError(f"{expression!r} stayed false for {timeout} s")

    def attach_frames(self) -> None:
        """Attach to every out-of-process frame the page opens next (a sandboxed iframe is one), each held
        before its first script until `frame` takes it."""
        self.call("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True})

    def frame(self) -> Page:
        """Return the next frame attached (`attach_frames`) as a Page, its Runtime, Log and Network events on
        before it runs."""
        attached = self.browser.wait_for("Target.attachedToTarget", self.session)
        frame = Page(self.browser, attached["sessionId"])
        for domain in ("Runtime", "Log", "Network"):
            frame.call(f"{domain}.enable")
        frame.call("Runtime.runIfWaitingForDebugger")
        return frame

    def screenshot(self, path: Path) -> Path:
        """Return `path` after saving a PNG of the whole page there."""
        metrics = self.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        width, height = int(size["width"]), min(int(size["height"]), 12000)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": max(width, 1280), "height": height, "deviceScaleFactor": 1, "mobile": False})
        shot = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, timeout=60)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def errors(self) -> list[str]:
        """Return every console error, uncaught exception and error log entry (CSP violations included)."""
        found = []
        for event in self.browser.events:
            if event.get("sessionId") != self.session:
                continue
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(f"exception: {params['exceptionDetails']}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                args = [arg.get("value", arg.get("description")) for arg in params.get("args", [])]
                found.append(f"console.{params['type']}: {args}")
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
        return found

    def requests(self) -> list[str]:
        """Return the URL of every request the page made (the document itself included)."""
        return [
            event["params"]["request"]["url"]
            for event in self.browser.events
            if event.get("sessionId") == self.session and event.get("method") == "Network.requestWillBeSent"
        ]
