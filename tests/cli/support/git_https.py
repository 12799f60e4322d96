"""A git server over https on loopback for the transport tests: git's own
`http-backend` (the smart HTTP protocol) behind TLS and Basic authentication.

Usage: git_https.py <base dir> <cert> <key> <user:password>
Prints the port it listens on, then serves the bare repositories under <base dir>
until killed. Every request must carry the credentials.
"""

import base64
import http.server
import os
import ssl
import subprocess
import sys

BASE, CERT, KEY, AUTH = sys.argv[1:5]
EXPECTED = "Basic " + base64.b64encode(AUTH.encode()).decode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.backend()

    def do_POST(self):
        self.backend()

    def reply(self, status, headers, body):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def backend(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.headers.get("Authorization") != EXPECTED:
            self.reply(401, [("WWW-Authenticate", 'Basic realm="git"')], b"")
            return
        path, _, query = self.path.partition("?")
        env = {
            "GIT_PROJECT_ROOT": BASE,
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": AUTH.split(":")[0],
            "REMOTE_ADDR": "127.0.0.1",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": BASE,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
        }
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        head, sep, rest = out.partition(b"\r\n\r\n")
        if not sep:
            head, _, rest = out.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.reply(status, headers, rest)


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(CERT, KEY)
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
