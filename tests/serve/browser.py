"""A real browser on `offshoot serve`'s page: Debian's headless Chromium (unpacked by
.ci/tools), driven over the DevTools protocol with PyPI's `websockets`. Reads a plan as
JSON on stdin — the browser to start, the URL to open, the steps — and prints one JSON
line per step for the Rust test to assert on.

Steps: ["wait", js, seconds] (until the expression is truthy; prints its value, and
`ms` since the last navigation), ["eval", js] (prints its value), ["click", css
selector] (a real mouse click at the element's middle), ["viewport", width, height] (a
phone's screen), ["screenshot", path] (a PNG of the page), ["navigate"] (the URL again).
"""

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import websockets


def say(**fields):
    print(json.dumps(fields), flush=True)


class Page:
    def __init__(self, socket):
        self.socket = socket
        self.next = 0

    async def call(self, method, **params):
        self.next += 1
        mine = self.next
        await self.socket.send(json.dumps({"id": mine, "method": method, "params": params}))
        while True:
            message = json.loads(await self.socket.recv())
            if message.get("id") == mine:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    async def eval(self, expression):
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")


async def run(plan):
    profile = tempfile.mkdtemp(prefix="offshoot-chromium-")
    browser = subprocess.Popen(
        [plan["browser"], "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--remote-debugging-port=0", f"--user-data-dir={profile}", "--window-size=1200,900", "about:blank"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    try:
        endpoint = None
        deadline = time.time() + 30
        while endpoint is None and time.time() < deadline:
            line = browser.stderr.readline()
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            if found:
                endpoint = found.group(1)
        if endpoint is None:
            raise RuntimeError("the browser never said where its DevTools listen")
        port = re.search(r":(\d+)/", endpoint).group(1)
        # The page the browser opened with, by the DevTools' own list of targets.
        listing = await asyncio.to_thread(
            lambda: json.load(__import__("urllib.request").request.urlopen(f"http://127.0.0.1:{port}/json/list"))
        )
        target = next(t for t in listing if t["type"] == "page")
        async with websockets.connect(target["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024) as socket:
            page = Page(socket)
            await page.call("Page.enable")
            navigated = time.time()
            await page.call("Page.navigate", url=plan["url"])
            for step in plan["steps"]:
                verb = step[0]
                if verb == "wait":
                    until = time.time() + step[2]
                    value, error = None, None
                    while time.time() < until:
                        # (One that throws, as on a page not loaded yet, is not yet true.)
                        try:
                            value, error = await page.eval(step[1]), None
                        except RuntimeError as e:
                            value, error = None, str(e)
                        if value:
                            break
                        await asyncio.sleep(0.1)
                    # (`ms`: from the last navigation, for a bench's "usable in".)
                    ms = round((time.time() - navigated) * 1000, 1)
                    if error:
                        say(step=verb, expression=step[1], value=value, ms=ms, error=error)
                    else:
                        say(step=verb, expression=step[1], value=value, ms=ms)
                elif verb == "navigate":
                    navigated = time.time()
                    await page.call("Page.navigate", url=plan["url"])
                    say(step=verb)
                elif verb == "eval":
                    say(step=verb, expression=step[1], value=await page.eval(step[1]))
                elif verb == "click":
                    box = await page.eval(
                        f"(() => {{ const e = document.querySelector({json.dumps(step[1])}); if (!e) return null;"
                        " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
                        " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
                    )
                    if box is None:
                        say(step=verb, selector=step[1], clicked=False)
                        continue
                    for kind in ("mousePressed", "mouseReleased"):
                        await page.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)
                    say(step=verb, selector=step[1], clicked=True)
                elif verb == "viewport":
                    await page.call(
                        "Emulation.setDeviceMetricsOverride",
                        width=step[1], height=step[2], deviceScaleFactor=1, mobile=True,
                    )
                    say(step=verb, width=step[1], height=step[2])
                elif verb == "screenshot":
                    shot = await page.call("Page.captureScreenshot", format="png")
                    os.makedirs(os.path.dirname(step[1]), exist_ok=True)
                    with open(step[1], "wb") as f:
                        f.write(base64.b64decode(shot["data"]))
                    say(step=verb, path=step[1])
    finally:
        browser.kill()
        browser.wait()


asyncio.run(run(json.load(sys.stdin)))
