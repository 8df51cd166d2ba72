"""Headless Chromium for tests, driven through the Chrome DevTools Protocol (CDP).

    with Browser(offline=True) as b:
        b.open(Path("report.html").as_uri(), wait_for="document.querySelector('svg')")
        assert b.evaluate("document.title") == "..."
        b.screenshot(tmp_path / "page.png")
        assert b.console_errors == [] and all(u.startswith("file:") for u in b.requests)

The browser is Debian's `chromium` package (.ci/browser-setup.sh installs it), started with
`--headless=new --no-sandbox` (tests run as root, where the sandbox refuses to start). No
Playwright or Puppeteer: they download browsers of their own, which CI cannot.

Transport: `--remote-debugging-pipe` (the protocol's JSON messages, each ended by a NUL byte,
read by the browser from fd 3 and written to fd 4) rather than a WebSocket on a TCP port.
The reason is `offline=True`: there the browser runs under `unshare --net`, in a network
namespace of its own whose only interface is a loopback that is down, so no page can reach
anything, not even this machine's 127.0.0.1. A debugging port opened in that namespace could
not be reached from the test either; inherited pipes cross namespaces. One transport for both
modes keeps one code path, and there is no port to discover (DevToolsActivePort) or race for.
`offline=False` (a browser in this machine's network, e.g. for a dashboard on 127.0.0.1) uses
the same pipe.

Cleanup: chromium runs under `unshare --pid --fork --kill-child`, as the init of a PID namespace
of its own. Not a process group: chromium double-forks its crash handlers into sessions of their
own, out of any group (and `--disable-crashpad-for-testing`, which would stop that, crashes its
network service). Leaving the `with` block SIGKILLs unshare's group; chromium, the namespace's
init, dies with it and the kernel kills everything else in the namespace; the harness waits until
the namespace is empty, or raises. Needs root (as the tests run in CI). Chromium's own stderr
(noisy) goes to `chromium.log` in the browser's temporary directory; errors quote its last lines.
Only the package's `chromium` wrapper and util-linux's `unshare` are needed: no Python packages.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

#: Flags for a quiet, deterministic, self-contained headless browser.
FLAGS = (
    "--headless=new",
    "--no-sandbox",  # as root the sandbox will not start; the pages are our own files
    "--remote-debugging-pipe",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-gpu",
    "--disable-dev-shm-usage",  # /dev/shm is small in containers
    "--disable-background-networking",  # no update/safe-browsing requests of its own
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-breakpad",
    "--metrics-recording-only",
    "--mute-audio",
    "--hide-scrollbars",
    "--window-size=1280,900",
)


class BrowserError(AssertionError):
    """The browser did not start, a protocol call failed, or a page did what a test forbade.
    An AssertionError so that pytest shows it as a test failure with its message."""


def chromium() -> str:
    """The chromium executable, or BrowserError saying how to install it (tests never skip)."""
    path = shutil.which("chromium")
    if path is None:
        raise BrowserError("`chromium` is not installed: run .ci/browser-setup.sh (as root)")
    return path


class Browser:
    """One headless Chromium with one page, for the length of a `with` block.

    `offline=True` also gives it a network namespace of its own: every network request of the
    page fails (net::ERR_INTERNET_DISCONNECTED), 127.0.0.1 included. Filled as the page runs:
      - `console_errors`: one line per console.error / console.assert failure, per browser log
        entry of level error (e.g. "Failed to load resource"), and per uncaught exception.
      - `requests`: the URL of every request the page sent (Network.requestWillBeSent), in order.
    Reading them first takes in the events the browser has sent so far; after the `with` block
    they keep what had arrived when it ended.
    """

    def __init__(self, offline: bool = True, timeout: float = 20.0) -> None:
        self.offline = offline
        self.timeout = timeout
        self._console_errors: list[str] = []
        self._requests: list[str] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._next_id = 0
        self._buffer = b""
        self._session: str | None = None
        self._load_events = 0
        self._pid_ns: str | None = None

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Browser:
        if shutil.which("unshare") is None:
            raise BrowserError("`unshare` (util-linux) is missing: the browser harness needs it")
        executable = chromium()
        self._tmp = tempfile.TemporaryDirectory(prefix="vcli-browser-")
        tmp = Path(self._tmp.name)
        # A PID namespace of its own (chromium is its init) so that nothing of it can outlive it;
        # a network namespace too when offline. --kill-child: if unshare dies, so does chromium.
        namespaces = ["--pid", "--fork", "--kill-child"] + (["--net"] if self.offline else [])
        argv = ["unshare", *namespaces, "--", executable, *FLAGS, f"--user-data-dir={tmp / 'profile'}", "about:blank"]
        # The browser reads commands from its fd 3 and writes replies and events to its fd 4.
        # The pipe ends go in as the shell's stdin and stdout, which it moves to 3 and 4 before
        # exec'ing unshare (which passes them on); stdin then reads /dev/null, stdout joins the log.
        # (No preexec_fn: it is unsafe in a process with threads.)
        cmd_read, self._cmd_write = os.pipe()
        self._reply_read, reply_write = os.pipe()
        argv = ["sh", "-c", 'exec "$@" 3<&0 4>&1 </dev/null >&2', "sh", *argv]
        self._log_path = tmp / "chromium.log"
        env = dict(os.environ, HOME=str(tmp))  # no dot-directories of ours in the real home
        try:
            with open(self._log_path, "wb") as log:
                self._proc = subprocess.Popen(argv, stdin=cmd_read, stdout=reply_write, stderr=log, env=env,
                                              start_new_session=True)
        finally:
            os.close(cmd_read)
            os.close(reply_write)
        try:
            self._pid_ns = self._browser_pid_namespace()
            self._attach_page()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _browser_pid_namespace(self) -> str:
        """The PID namespace unshare made (its forked child's), e.g. 'pid:[4026532871]'."""
        assert self._proc is not None
        deadline = time.monotonic() + self.timeout
        own = os.readlink(f"/proc/{self._proc.pid}/ns/pid")
        while time.monotonic() < deadline:
            for pid, (_, ppid) in _processes().items():
                if ppid == self._proc.pid:
                    try:
                        ns = os.readlink(f"/proc/{pid}/ns/pid")
                    except OSError:
                        continue
                    if ns != own:
                        return ns
            if self._proc.poll() is not None:
                break
            time.sleep(0.02)
        raise BrowserError(f"unshare did not start chromium in a new PID namespace{self._log_tail()}")

    def _attach_page(self) -> None:
        targets = self._call("Target.getTargets")["targetInfos"]
        pages = [t for t in targets if t["type"] == "page"]
        target_id = pages[0]["targetId"] if pages else self._call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self._call("Target.attachToTarget", targetId=target_id, flatten=True)["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self._call(f"{domain}.enable")

    def __exit__(self, *exc: object) -> None:
        try:
            if self._session is not None:
                self._take_in_events()
        except BrowserError:
            pass  # a browser that died mid-test: what it sent before is kept, the kill goes on
        try:
            if self._proc is not None:
                self._kill_all()
        finally:
            for fd in (self._cmd_write, self._reply_read):
                try:
                    os.close(fd)
                except OSError:
                    pass
            if self._tmp is not None:
                self._tmp.cleanup()
                self._tmp = None

    def _kill_all(self) -> None:
        """SIGKILL unshare's process group and with it chromium, the init of the browser's PID
        namespace, whose death makes the kernel kill every other process in that namespace (also
        those that left the group, like the crash handlers chromium double-forks into sessions of
        their own). Reaps unshare and waits (5 s) until the namespace is empty, or raises."""
        assert self._proc is not None
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._proc.wait(timeout=10)
        if self._pid_ns is None:  # it never got as far as making the namespace
            return
        deadline = time.monotonic() + 5
        while (left := _in_pid_namespace(self._pid_ns)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if left:
            raise BrowserError(f"browser processes still alive after SIGKILL: {left}")

    # ------------------------------------------------------------------ page API
    def open(self, url: str, wait_for: str | None = None, timeout: float | None = None) -> None:
        """Navigate to `url` and wait for its load event, then (if given) until the JavaScript
        expression `wait_for` is truthy. BrowserError if navigation fails or time runs out."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        loads = self._load_events
        result = self._call("Page.navigate", url=url)
        if result.get("errorText"):
            raise BrowserError(f"navigation to {url} failed: {result['errorText']}")
        while self._load_events == loads:
            self._pump(deadline, f"the load event of {url}")
        if wait_for is not None:
            while not self.evaluate(f"Boolean({wait_for})"):
                if time.monotonic() > deadline:
                    raise BrowserError(f"{wait_for!r} still false {timeout:.0f} s after opening {url}")
                time.sleep(0.05)

    def evaluate(self, js: str) -> Any:
        """The value of the JavaScript expression `js` in the page (JSON-like; promises are
        awaited). BrowserError with the page's message if it throws."""
        result = self._call("Runtime.evaluate", expression=js, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{js!r} threw: {_describe_exception(result['exceptionDetails'])}")
        return result["result"].get("value")

    def screenshot(self, path: Path | str) -> Path:
        """A PNG of the whole page (beyond the viewport), written to `path`; returns `path`."""
        size = self._call("Page.getLayoutMetrics")["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self._call("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)["data"]
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path

    def pids(self) -> list[int]:
        """The browser's live processes: everything in its PID namespace (as this machine sees them)."""
        assert self._pid_ns is not None, "only inside the with block"
        return _in_pid_namespace(self._pid_ns)

    @property
    def console_errors(self) -> list[str]:
        self._take_in_events()
        return list(self._console_errors)

    @property
    def requests(self) -> list[str]:
        self._take_in_events()
        return list(self._requests)

    def _take_in_events(self) -> None:
        if self._tmp is not None:  # inside the with block: the pipe is open
            self._pump(time.monotonic(), "", block=False)

    # ------------------------------------------------------------------ protocol
    def _call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command (to the page's session once attached) and return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self._session is not None:
            message["sessionId"] = self._session
        data = json.dumps(message).encode() + b"\0"
        try:
            while data:
                data = data[os.write(self._cmd_write, data):]
        except BrokenPipeError:
            raise BrowserError(f"chromium closed its debugging pipe (exited?) before {method}{self._log_tail()}") from None
        deadline = time.monotonic() + self.timeout
        while True:
            for reply in self._pump(deadline, f"the reply to {method}"):
                if reply.get("id") == self._next_id:
                    if "error" in reply:
                        raise BrowserError(f"{method} failed: {reply['error'].get('message')}")
                    return reply["result"]

    def _pump(self, deadline: float, waiting_for: str, block: bool = True) -> list[dict[str, Any]]:
        """Read what the browser has written (waiting for at least one message if `block`),
        record its events, and return the replies among the messages."""
        replies: list[dict[str, Any]] = []
        while True:
            *messages, self._buffer = self._buffer.split(b"\0")
            for raw in messages:
                message = json.loads(raw)
                if "id" in message:
                    replies.append(message)
                else:
                    self._record(message.get("method", ""), message.get("params", {}))
            if messages and block:
                return replies
            wait = max(0.0, deadline - time.monotonic()) if block else 0.0
            if not select.select([self._reply_read], [], [], wait)[0]:
                if not block:
                    return replies
                raise BrowserError(f"no answer from chromium for {waiting_for}{self._log_tail()}")
            chunk = os.read(self._reply_read, 1 << 20)
            if not chunk:
                raise BrowserError(f"chromium closed its debugging pipe (exited?) waiting for {waiting_for}{self._log_tail()}")
            self._buffer += chunk

    def _record(self, method: str, params: dict[str, Any]) -> None:
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self._console_errors.append(f"console.{params['type']}: {text}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self._console_errors.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}".rstrip())
        elif method == "Runtime.exceptionThrown":
            self._console_errors.append(f"uncaught: {_describe_exception(params.get('exceptionDetails', {}))}")
        elif method == "Network.requestWillBeSent":
            self._requests.append(params["request"]["url"])
        elif method == "Page.loadEventFired":
            self._load_events += 1

    def _log_tail(self, lines: int = 20) -> str:
        try:
            tail = self._log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return "\n--- last lines of chromium's log:\n" + "\n".join(tail)


def _describe_exception(details: dict[str, Any]) -> str:
    exception = details.get("exception") or {}
    return exception.get("description") or details.get("text", "?")


def _processes() -> dict[int, tuple[bytes, int]]:
    """Every process on the machine: pid -> (state, parent pid), from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                # After "(command name)": state, ppid, ...
                state, ppid = f.read().rsplit(b")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        table[int(entry)] = (state, int(ppid))
    return table


def _in_pid_namespace(ns: str) -> list[int]:
    """Live (non-zombie) processes whose PID namespace is `ns`."""
    found = []
    for pid, (state, _) in _processes().items():
        try:
            if state not in (b"Z", b"X") and os.readlink(f"/proc/{pid}/ns/pid") == ns:
                found.append(pid)
        except OSError:
            continue
    return found
