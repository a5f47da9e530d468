"""Screenshot of the demo page after a run, taken with headless Chromium (writes docs/demo.png).

    .venv/bin/python docs/screenshot.py [--target smollm2-135m] [--drafter DIR] [--out docs/demo.png]
        [--prompt-lookup] [--threads 1]

Starts the demo (`dlite_hf.demo.build_demo`) on a free port of 127.0.0.1, opens it in headless Chromium, clicks
Run, waits until the comparison line appears (all columns done), and saves a full-page PNG. Chromium's own
`--screenshot` flag cannot click, so the browser is driven over the DevTools protocol on a pipe
(`--remote-debugging-pipe`: JSON messages separated by NUL bytes on file descriptors 3 and 4), which needs no
extra Python package. Install Chromium on Debian with `apt-get install -y chromium`; set `CHROMIUM=/path` to use
another build. `capture()` is also used by tests/test_demo.py.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
HEADLESS_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
# JavaScript conditions on the page (gradio element ids set in dlite_hf.demo.build_demo)
_READY_JS = "!!document.querySelector('#run-button')"
_VERDICT_JS = "(document.querySelector('#verdict') || {}).innerText || ''"
_FINISHED_MARKERS = ("Identical", "differ", "Stopped", "Sampling", "Only the target", "failed", "⚠")


def find_chromium() -> str | None:
    """Path of a Chromium/Chrome executable: ``$CHROMIUM`` or the first of CHROMIUM_NAMES on PATH."""
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else shutil.which(explicit)
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class DevToolsPipe:
    """A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe``."""

    def __init__(self, chromium: str, window: tuple[int, int] = (1400, 1000)):
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        self._profile = tempfile.mkdtemp(prefix="dlite-chromium-")
        flags = [*HEADLESS_FLAGS, f"--user-data-dir={self._profile}", f"--window-size={window[0]},{window[1]}"]
        # bash moves the two pipe ends onto fds 3 (commands in) and 4 (replies out), then becomes Chromium
        script = f'exec "$0" "$@" 3<&{to_child_r} 4>&{from_child_w} {to_child_r}<&- {from_child_w}>&-'
        self.process = subprocess.Popen(
            ["bash", "-c", script, chromium, *flags, "--remote-debugging-pipe", "about:blank"],
            pass_fds=(to_child_r, from_child_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next_id = 0

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Chromium did not answer in time.")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if not ready:
                continue
            data = os.read(self._from_child, 1 << 20)
            if not data:
                raise RuntimeError(f"Chromium closed the DevTools pipe (exit code {self.process.poll()}).")
            self._buffer += data
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30) -> dict:
        """Send one command and return its result (events received meanwhile are dropped)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"DevTools {method} failed: {reply['error']}")
                return reply.get("result", {})

    def evaluate(self, expression: str, session: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)
        return result.get("result", {}).get("value")

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)


def capture(
    url: str,
    out: str | Path,
    *,
    chromium: str | None = None,
    window: tuple[int, int] = (1400, 1000),
    timeout_s: float = 900,
    prompt_lookup: bool = False,
) -> dict[str, Any]:
    """Open ``url``, tick prompt lookup if asked, click Run, wait for the verdict, save a full-page PNG to ``out``.

    Returns ``{"path", "verdict", "seconds"}``. Raises ``TimeoutError`` if the run does not finish in time.
    """
    chromium = chromium or find_chromium()
    if chromium is None:
        raise FileNotFoundError("No Chromium found: apt-get install -y chromium, or set CHROMIUM=/path/to/chrome.")
    started = time.monotonic()
    browser = DevToolsPipe(chromium, window)
    try:
        target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        metrics = {"width": window[0], "height": window[1], "deviceScaleFactor": 1, "mobile": False}
        browser.call("Emulation.setDeviceMetricsOverride", metrics, session)
        browser.call("Page.navigate", {"url": url}, session)
        _wait_for(browser, session, _READY_JS, lambda ok: bool(ok), started + 120, "the page to load")
        if prompt_lookup:
            browser.evaluate("document.querySelector('#lookup-checkbox input').click()", session)
        time.sleep(0.5)  # let the page settle (fonts, layout) before clicking
        browser.evaluate("document.querySelector('#run-button').click()", session)
        verdict = _wait_for(
            browser,
            session,
            _VERDICT_JS,
            lambda text: any(m in (text or "") for m in _FINISHED_MARKERS),
            started + timeout_s,
            "the run to finish",
        )
        time.sleep(1.0)  # the last streamed update and layout
        height = browser.evaluate("Math.ceil(document.documentElement.scrollHeight)", session) or window[1]
        metrics["height"] = max(window[1], int(height))
        browser.call("Emulation.setDeviceMetricsOverride", metrics, session)
        time.sleep(0.5)
        shot = browser.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session)
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
    finally:
        browser.close()
    return {"path": str(path), "verdict": verdict, "seconds": round(time.monotonic() - started, 1)}


def _wait_for(browser: DevToolsPipe, session: str, expression: str, done, deadline: float, what: str) -> Any:
    while True:
        value = browser.evaluate(expression, session)
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"Timed out waiting for {what} (last value: {value!r}).")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--drafter", default=None, help="drafter folder (default: the shipped one)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "demo.png"))
    parser.add_argument("--prompt-lookup", action="store_true", help="also run the prompt-lookup column")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    import torch

    from dlite_hf.demo import build_demo

    torch.set_num_threads(args.threads)
    demo = build_demo(args.target, args.drafter, warm_up=True)
    demo.queue(default_concurrency_limit=1)
    _, url, _ = demo.launch(server_name="127.0.0.1", server_port=None, prevent_thread_lock=True, quiet=True)
    try:
        result = capture(url, args.out, prompt_lookup=args.prompt_lookup)
    finally:
        demo.close()
    print(json.dumps(result, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
