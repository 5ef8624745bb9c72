"""A headless Chromium driven over the DevTools protocol, with the standard library only.

`Browser` starts `chromium --headless --remote-debugging-port=0` with a fresh profile and every
network feature that would download something switched off, reads the port from the profile's
DevToolsActivePort file, and speaks the protocol over a minimal RFC 6455 WebSocket client
(client frames masked, §5.3; no extensions). It records what a page logs as an error
(console.error, uncaught exceptions, failed loads) and every URL it requests.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

CHROMIUM = os.environ.get("AMQPCAP_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
         "--disable-extensions", "--disable-default-apps", "--mute-audio", "--remote-debugging-port=0"]


class WebSocket:
    """Text frames over one TCP connection (enough for the DevTools protocol)."""

    def __init__(self, url: str, timeout: float = 60):
        host_port, path = url.removeprefix("ws://").split("/", 1)
        host, port = host_port.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("DevTools closed the connection during the handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(head.split(b"\r\n", 1)[0].decode())
        self.buf = head.split(b"\r\n\r\n", 1)[1]

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("DevTools closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send(self, text: str, opcode: int = 1) -> None:
        data = text.encode() if isinstance(text, str) else text
        n = len(data)
        head = bytes([0x80 | opcode])
        head += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n) if n < 1 << 16 \
            else bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        self.sock.sendall(head + mask + _mask(data, mask))

    def recv(self) -> str:
        parts = []
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            data = self._read(n)
            if mask:
                data = _mask(data, mask)
            opcode = b0 & 0x0F
            if opcode == 9:  # ping
                self.send(data, opcode=10)
                continue
            if opcode == 8:
                raise ConnectionError("DevTools closed the WebSocket")
            if opcode in (0, 1, 2):
                parts.append(data)
                if b0 & 0x80:
                    return b"".join(parts).decode()

    def close(self) -> None:
        self.sock.close()


def _mask(data: bytes, mask: bytes) -> bytes:
    """XOR with the 4-byte mask, a whole buffer at a time (RFC 6455 §5.3)."""
    n = len(data)
    if n == 0:
        return b""
    key = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
    return (int.from_bytes(data, "big") ^ key).to_bytes(n, "big")


class Browser:
    """One headless Chromium with one page. Use as a context manager."""

    def __init__(self, width: int = 1400, height: int = 900):
        self.width, self.height = width, height
        self.profile = tempfile.mkdtemp(prefix="amqpcap-chromium-")
        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}",
                                      f"--window-size={width},{height}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port = self._port()
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = WebSocket(page["webSocketDebuggerUrl"])
        self.next_id = 0
        self.errors: list[str] = []
        self.requests: list[str] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def _port(self) -> int:
        path = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if path.exists() and path.read_text().strip():
                return int(path.read_text().split()[0])
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            time.sleep(0.05)
        raise TimeoutError("chromium did not open its DevTools port")

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)

    def _event(self, msg: dict) -> None:
        method, p = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.errors.append("console." + p["type"] + ": " + " ".join(str(a.get("value", a.get("description")))
                                                                        for a in p.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            self.errors.append("exception: " + p["exceptionDetails"].get("text", "")
                               + " " + str(p["exceptionDetails"].get("exception", {}).get("description", "")))
        elif method == "Log.entryAdded" and p["entry"]["level"] == "error":
            self.errors.append("log: " + p["entry"].get("text", "") + " " + p["entry"].get("url", ""))
        elif method == "Network.requestWillBeSent":
            self.requests.append(p["request"]["url"])
        elif method == "Network.loadingFailed":
            self.errors.append("load failed: " + p.get("errorText", ""))

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._event(msg)

    def wait_for(self, event: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            self._event(msg)
            if msg.get("method") == event:
                return msg.get("params", {})
        raise TimeoutError(event)

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def js(self, expression: str):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(r["exceptionDetails"])
        return r["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """The whole page (not only the viewport) as a PNG, at the page's width."""
        height = int(self.js("Math.ceil(document.documentElement.scrollHeight)"))
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                         clip={"x": 0, "y": 0, "width": self.width, "height": height, "scale": 1})
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


def main() -> None:
    """`python3 tests/browser.py REPORT.html OUT.png [HEIGHT]`: the top HEIGHT px (default: the
    whole page) of a page at 1400 px wide, e.g. docs/images/report.png from the sample's report."""
    import sys

    page, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    with Browser() as b:
        b.open(page.as_uri())
        height = int(sys.argv[3]) if len(sys.argv) > 3 else int(b.js("document.documentElement.scrollHeight"))
        shot = b.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                      clip={"x": 0, "y": 0, "width": b.width, "height": height, "scale": 1})
        out.write_bytes(base64.b64decode(shot["data"]))
        if b.errors:
            sys.exit("page errors: " + "; ".join(b.errors))


if __name__ == "__main__":
    main()
