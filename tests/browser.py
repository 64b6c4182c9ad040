"""Headless Chromium for the report tests: find or install it, open a page
and check what a reader would see.

``python tests/browser.py`` (run by ``make test`` before the tests) makes sure
there is a Chromium: an installed Chrome or Chromium on ``PATH`` is used as it
is; otherwise Debian's ``chromium`` package is installed with apt-get where
that is possible (as root, or through ``sudo`` when it needs no password);
otherwise it stops with one line saying what to install.

Chromium is driven over its DevTools protocol on a pipe
(``--remote-debugging-pipe``: JSON messages separated by NUL bytes on file
descriptors 3 and 4), so no network port and no extra package is needed.
:func:`check_page` loads a page from disk and returns what the console
reported (errors, failed loads, uncaught exceptions), every image that did
not decode, the scripts on the page, any dialog a script opened, the tables
too wide for the page, and optionally a full-page screenshot.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--mute-audio", "--hide-scrollbars", "--remote-debugging-pipe")
WIDTH = 1280
MAX_SCREENSHOT_HEIGHT = 16_000

CHECK_SCRIPT = """(async () => {
  const images = Array.from(document.images);
  const broken = [];
  for (const img of images) {
    try { await img.decode(); } catch (e) { /* checked below */ }
    if (!(img.complete && img.naturalWidth > 0)) broken.push((img.getAttribute('src') || '').slice(0, 60));
  }
  const links = Array.from(document.querySelectorAll('[src],[href]'))
    .map(e => e.getAttribute('src') || e.getAttribute('href'));
  return {
    images: images.length, broken: broken, scripts: document.scripts.length,
    external: links.filter(u => /^(https?:)?\\/\\//i.test(u)),
    wide_tables: Array.from(document.querySelectorAll('.tp-table-wrap'))
      .filter(w => w.scrollWidth > w.clientWidth + 1)
      .map(w => (w.querySelector('caption, th') || w).innerText.slice(0, 60)),
    title: document.title, height: document.documentElement.scrollHeight,
    text: document.body ? document.body.innerText : ''
  };
})()"""


class BrowserError(RuntimeError):
    """Chromium is missing, or did not answer as expected."""


@dataclass
class PageCheck:
    """What :func:`check_page` found on one page."""

    url: str
    title: str = ""
    images: int = 0
    broken_images: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    scripts: int = 0
    external_urls: list[str] = field(default_factory=list)
    wide_tables: list[str] = field(default_factory=list)
    """Tables wider than the page column (they scroll sideways): their caption or first header."""
    text: str = ""
    screenshot: Path | None = None

    @property
    def ok(self) -> bool:
        """No console error, every image decoded, no dialog, nothing loaded from the network."""
        return not (self.console_errors or self.broken_images or self.dialogs or self.external_urls)


def find_chromium() -> str | None:
    """Path of a Chromium (or Chrome) executable on ``PATH``, or ``None``."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


PACKAGE = "chromium"
WHAT_TO_INSTALL = (f"the report browser tests need Chromium or Chrome on PATH: install the Debian package "
                   f"`{PACKAGE}` (sudo apt-get install {PACKAGE}) or Google Chrome, then run make test again")


def installer() -> list[str] | None:
    """The command prefix that runs apt-get with root rights here, or ``None``:
    ``["apt-get"]`` as root, ``["sudo", "-n", "apt-get"]`` with passwordless sudo."""
    if shutil.which("apt-get") is None:
        return None
    if os.geteuid() == 0:
        return ["apt-get"]
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "-n", "apt-get"]
    return None


def ensure_chromium() -> str:
    """The path of a Chromium, installed with apt-get first if none is on ``PATH``.
    Raises ``RuntimeError`` (:data:`WHAT_TO_INSTALL`) when there is none and it cannot be installed."""
    found = find_chromium()
    if found:
        return found
    apt = installer()
    if apt is None:
        raise RuntimeError(WHAT_TO_INSTALL)
    print(f"installing {PACKAGE} for the report browser tests: {' '.join(apt)} install {PACKAGE}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for args in (["update", "-qq"], ["install", "-y", "-qq", "--no-install-recommends", PACKAGE]):
        done = subprocess.run([*apt, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise RuntimeError(f"{' '.join(apt)} {args[0]} failed ({last}); {WHAT_TO_INSTALL}")
    found = find_chromium()
    if found is None:
        raise RuntimeError(f"{PACKAGE} was installed but no Chromium is on PATH; {WHAT_TO_INSTALL}")
    return found


def main() -> int:
    try:
        ensure_chromium()
    except RuntimeError as exc:
        print(f"make test: {exc}", file=sys.stderr)
        return 1
    return 0


def check_page(path: str | Path, screenshot: str | Path | None = None, timeout_s: float = 60.0) -> PageCheck:
    """Load the HTML file at ``path`` in headless Chromium and check it;
    write a full-page PNG to ``screenshot`` when given."""
    executable = find_chromium()
    if executable is None:
        raise BrowserError("no Chromium found: install the Debian package `chromium`")
    url = Path(path).resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="trainperf-chromium-") as profile, \
            _DevTools(executable, profile, timeout_s) as devtools:
        return devtools.check(url, Path(screenshot) if screenshot else None)


class _DevTools:
    """A Chromium process and its DevTools pipe."""

    def __init__(self, executable: str, profile: str, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire_fds() -> None:  # in the child: the pipe ends Chromium expects on fd 3 and 4
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.process = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={profile}", f"--window-size={WIDTH},900", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=wire_fds, pass_fds=(3, 4))
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def __enter__(self) -> _DevTools:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.send("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_child)
        os.close(self._from_child)

    def _post(self, method: str, params: dict | None = None, session: str | None = None) -> int:
        """Send a command without waiting for its answer; return its id."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        return self._next_id

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """Send a command and wait for its answer; events that arrive meanwhile are kept."""
        sent = self._post(method, params, session)
        answer = self._wait(lambda m: m.get("id") == sent)
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error'].get('message')}")
        return answer.get("result", {})

    def _wait(self, wanted) -> dict:  # noqa: ANN001
        deadline = time.monotonic() + self.timeout_s
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                if wanted(message):
                    return message
                if "method" in message:
                    self.events.append(message)
                if message.get("method") == "Page.javascriptDialogOpening":
                    # a dialog blocks the page until answered: dismiss it, keep the event
                    self._post("Page.handleJavaScriptDialog", {"accept": False}, message.get("sessionId"))
            left = deadline - time.monotonic()
            if left <= 0 or self.process.poll() is not None:
                raise BrowserError("Chromium did not answer in time" if left <= 0 else "Chromium exited")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    raise BrowserError("Chromium closed the DevTools pipe")
                self._buffer += chunk

    def check(self, url: str, screenshot: Path | None) -> PageCheck:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": WIDTH, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session)
        self.events.clear()
        self.send("Page.navigate", {"url": url}, session)
        if not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self._wait(lambda m: m.get("method") == "Page.loadEventFired")
        found = self.send("Runtime.evaluate", {"expression": CHECK_SCRIPT, "awaitPromise": True,
                                               "returnByValue": True}, session)["result"]["value"]
        result = PageCheck(url, title=found["title"], images=found["images"], broken_images=found["broken"],
                           scripts=found["scripts"], external_urls=found["external"], text=found["text"],
                           wide_tables=found["wide_tables"])
        for event in self.events:
            self._collect(event, result)
        if screenshot is not None:
            height = min(int(found["height"]), MAX_SCREENSHOT_HEIGHT)
            shot = self.send("Page.captureScreenshot", {
                "format": "png", "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": WIDTH, "height": height, "scale": 1}}, session)
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
            result.screenshot = screenshot
        return result

    @staticmethod
    def _collect(event: dict, result: PageCheck) -> None:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            result.console_errors.append(" ".join(str(a.get("value", a.get("description", "")))
                                                  for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            result.console_errors.append(details.get("exception", {}).get("description") or details.get("text", ""))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            result.console_errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".strip())
        elif method == "Page.javascriptDialogOpening":
            result.dialogs.append(f"{params.get('type')}: {params.get('message')}")


if __name__ == "__main__":
    sys.exit(main())
