#!/usr/bin/env python3
"""Loads pages in headless Chromium and reports what they show (tests/test_html.cpp).

    browser.py CHROMIUM < loads.json > results.json

loads.json is a list of loads; each opens a fresh tab at `url`, waits for the
load event, reports the value of `expr` (a JavaScript expression), saves a PNG
of the viewport (of the whole page with "full_page": true) to `screenshot`,
so the picture is of the page as loaded (in a viewport of "width" x "height",
1280 x 800 unless given), then for each of `actions` presses a
key or clicks the middle of an element (a CSS selector) with the mouse and
reports `expr` again:

    [{"url": "file:///tmp/p.html#step=3", "expr": "document.title",
      "actions": [{"key": "ArrowRight"}, {"click": "#next"}], "screenshot": "/tmp/step3.png"}]

Each result: {"value": ..., "after_keys": [one value per action], "errors": [...],
"requests": [...]},
where `errors` lists uncaught exceptions, console errors and warnings, and
error log entries, and `requests` every URL the page asked for beyond the page
itself (a self-contained page asks for none).

Chromium is driven through the DevTools protocol on a pipe
(--remote-debugging-pipe: JSON messages ended by a NUL byte, commands on the
browser's fd 3, answers and events on its fd 4), so no websocket library is
needed: only python3 and the chromium package.
"""
import base64
import fcntl
import json
import os
import select
import subprocess
import sys
import tempfile
import time

TIMEOUT = 30.0  # seconds for any one answer or event


class Browser:
    def __init__(self, chromium, profile):
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()
        # Out of the way of 3 and 4, which the child's dup2 calls overwrite;
        # close-on-exec, so that only 3 and 4 reach chromium.
        high_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD_CLOEXEC, 10)
        high_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_browser_r)
        os.close(from_browser_w)

        def fds_3_and_4():  # dup2 clears close-on-exec on 3 and 4
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        args = [chromium, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--mute-audio", "--hide-scrollbars", "--user-data-dir=" + profile,
                "--window-size=1280,800", "about:blank"]
        self.log = open(os.path.join(profile, "stderr.log"), "w+b")  # a pipe could fill and block it
        self.proc = subprocess.Popen(args, preexec_fn=fds_3_and_4, close_fds=False,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log)
        os.close(high_r)
        os.close(high_w)
        self.buffer = b""
        self.next_id = 0
        self.events = []  # (session, method, params) not yet looked at

    def close(self):
        try:
            self.send("Browser.close", wait=False)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_browser)
        os.close(self.from_browser)
        self.log.close()

    def _read_message(self, deadline):
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer within %g s" % TIMEOUT)
            ready, _, _ = select.select([self.from_browser], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.from_browser, 1 << 20)
            if not chunk:
                self.log.seek(0)
                err = self.log.read().decode(errors="replace")[-2000:]
                raise RuntimeError("chromium closed the pipe (exit %s): %s" % (self.proc.poll(), err))
            self.buffer += chunk
        message, _, self.buffer = self.buffer.partition(b"\0")
        return json.loads(message)

    def send(self, method, params=None, session=None, wait=True):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        if not wait:
            return None
        deadline = time.monotonic() + TIMEOUT
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m.get("result", {})
            if "method" in m:
                self.events.append((m.get("sessionId"), m["method"], m.get("params", {})))

    def wait_event(self, session, method):
        deadline = time.monotonic() + TIMEOUT
        while True:
            for k, (s, name, params) in enumerate(self.events):
                if s == session and name == method:
                    del self.events[k]
                    return params
            m = self._read_message(deadline)
            if "method" in m:
                self.events.append((m.get("sessionId"), m["method"], m.get("params", {})))

    def evaluate(self, session, expr):
        r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session)
        if "exceptionDetails" in r:
            raise RuntimeError("evaluating %r: %s" % (expr, describe_exception(r["exceptionDetails"])))
        return r["result"].get("value")

    def load(self, spec):
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(domain + ".enable", {}, session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": spec.get("width", 1280), "height": spec.get("height", 800), "deviceScaleFactor": 1,
                   "mobile": False}, session)
        self.events.clear()
        nav = self.send("Page.navigate", {"url": spec["url"]}, session)
        if "errorText" in nav:
            raise RuntimeError("loading %s: %s" % (spec["url"], nav["errorText"]))
        self.wait_event(session, "Page.loadEventFired")
        result = {"value": self.evaluate(session, spec["expr"]), "after_keys": []}
        if spec.get("screenshot"):
            shot = {"format": "png"}
            if spec.get("full_page"):  # the whole document, not only the viewport
                size = self.send("Page.getLayoutMetrics", {}, session)["cssContentSize"]
                shot.update(captureBeyondViewport=True,
                            clip=dict(x=0, y=0, width=size["width"], height=size["height"], scale=1))
            png = self.send("Page.captureScreenshot", shot, session)["data"]
            with open(spec["screenshot"], "wb") as f:
                f.write(base64.b64decode(png))
        for action in spec.get("actions", []):
            if "key" in action:
                key = action["key"]
                for kind in ("keyDown", "keyUp"):
                    event = {"type": kind, "key": key, "code": key, "windowsVirtualKeyCode": KEY_CODES[key]}
                    self.send("Input.dispatchKeyEvent", event, session)
            else:
                selector = json.dumps(action["click"])
                middle = ("(() => { const r = document.querySelector(%s).getBoundingClientRect();"
                          " return [r.x + r.width / 2, r.y + r.height / 2]; })()" % selector)
                x, y = self.evaluate(session, middle)
                for kind in ("mousePressed", "mouseReleased"):
                    self.send("Input.dispatchMouseEvent",
                              {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}, session)
            result["after_keys"].append(self.evaluate(session, spec["expr"]))
        self.send("Runtime.evaluate", {"expression": "0"}, session)  # lets pending events arrive
        result["errors"], result["requests"] = [], []
        page = spec["url"].split("#")[0]
        for s, name, params in self.events:
            if s != session:
                continue
            if name == "Runtime.exceptionThrown":
                result["errors"].append(describe_exception(params["exceptionDetails"]))
            elif name == "Runtime.consoleAPICalled" and params["type"] in ("error", "warning", "assert"):
                result["errors"].append("console.%s: %s" % (params["type"], " ".join(
                    str(a.get("value", a.get("description", ""))) for a in params["args"])))
            elif name == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                result["errors"].append("log: " + params["entry"]["text"])
            elif name == "Network.requestWillBeSent":
                url = params["request"]["url"]
                if url.split("#")[0] != page:
                    result["requests"].append(url)
        self.events.clear()
        self.send("Target.closeTarget", {"targetId": target})
        return result


KEY_CODES = {"ArrowLeft": 37, "ArrowUp": 38, "ArrowRight": 39, "ArrowDown": 40, "Home": 36, "End": 35}


def describe_exception(details):
    exc = details.get("exception", {})
    return "%s (line %s): %s" % (details.get("text", "exception"), details.get("lineNumber"),
                                 exc.get("description", exc.get("value", "")))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    loads = json.load(sys.stdin)
    with tempfile.TemporaryDirectory(prefix="tapegrad-chromium-") as profile:
        browser = Browser(sys.argv[1], profile)
        try:
            results = [browser.load(spec) for spec in loads]
        finally:
            browser.close()
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
