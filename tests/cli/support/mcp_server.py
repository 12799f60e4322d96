#!/usr/bin/env python3
"""A scripted MCP server for offshoot's tests: JSON-RPC 2.0 over stdio (one message a
line) or over streamable HTTP (POST answered with application/json).

  mcp_server.py stdio [--tools FILE] [--log FILE] [--start-delay SECS]
  mcp_server.py http  [--tools FILE] [--log FILE]   (prints "PORT <n>" when listening)

--tools names a JSON file holding the list `tools/list` answers with, read at start
(a test changes it to make a server whose list changed); without it a fixed list.
--log appends one JSON line per message received, with the server's pid (default:
to stderr).
Tools: echo {text}; add {a, b} (read-only); fail (isError); crash (exits mid-call);
slow {secs}; image (an image block); env {name} (a variable's value); any other
listed tool answers with its name and arguments.
"""

import json
import os
import sys
import time

DEFAULT_TOOLS = [
    {"name": "echo", "description": "Echoes the text back.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
    {"name": "add", "description": "Adds two numbers.",
     "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
     "annotations": {"readOnlyHint": True}},
    {"name": "fail", "description": "Always fails.", "inputSchema": {"type": "object"}},
    {"name": "crash", "description": "Exits in the middle of the call.", "inputSchema": {"type": "object"}},
    {"name": "slow", "description": "Answers after `secs` seconds.",
     "inputSchema": {"type": "object", "properties": {"secs": {"type": "number"}}}},
    {"name": "image", "description": "Returns a tiny image.", "inputSchema": {"type": "object"}},
    {"name": "env", "description": "Returns an environment variable's value.",
     "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}}},
]


def option(args, name, default=None):
    if name in args:
        return args[args.index(name) + 1]
    return default


ARGS = sys.argv[2:]
LOG = option(ARGS, "--log")
TOOLS_FILE = option(ARGS, "--tools")
TOOLS = json.load(open(TOOLS_FILE)) if TOOLS_FILE else DEFAULT_TOOLS


def log(message):
    line = json.dumps({"pid": os.getpid(), "message": message}) + "\n"
    if LOG:
        with open(LOG, "a") as f:
            f.write(line)
    else:
        sys.stderr.write(line)
        sys.stderr.flush()


def text(t, is_error=False):
    return {"content": [{"type": "text", "text": t}], "isError": is_error}


def call(name, args):
    if name == "echo":
        return text("echo: " + str(args.get("text", "")))
    if name == "add":
        return text(str(args.get("a", 0) + args.get("b", 0)))
    if name == "fail":
        return text("the tool failed on purpose", True)
    if name == "crash":
        sys.stdout.flush()
        os._exit(3)
    if name == "slow":
        time.sleep(float(args.get("secs", 1)))
        return text("slept")
    if name == "image":
        return {"content": [{"type": "text", "text": "a red dot:"},
                            {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}]}
    if name == "env":
        return text(os.environ.get(args.get("name", ""), "(unset)"))
    return text(json.dumps({"tool": name, "arguments": args}, sort_keys=True))


def answer(message):
    """The response to one message, or None for a notification."""
    log(message)
    method = message.get("method")
    if "id" not in message:
        return None
    mid = message["id"]
    if method == "initialize":
        version = message.get("params", {}).get("protocolVersion", "2025-06-18")
        if version not in ("2025-06-18", "2025-03-26", "2024-11-05", "2025-11-25"):
            version = "2025-06-18"
        result = {"protocolVersion": version, "capabilities": {"tools": {}},
                  "serverInfo": {"name": "scripted", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        params = message.get("params", {})
        result = call(params.get("name"), params.get("arguments") or {})
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no method " + str(method)}}
    return {"jsonrpc": "2.0", "id": mid, "result": result}


def stdio():
    delay = float(option(ARGS, "--start-delay", "0"))
    if delay:
        time.sleep(delay)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        response = answer(json.loads(line))
        if response is not None:
            sys.stdout.write(json.dumps(response) + "\n")
            sys.stdout.flush()


def http():
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, status, body=b"", headers=()):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self.reply(405)

        def do_DELETE(self):
            self.reply(200)

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            message = json.loads(body)
            message["_authorization"] = self.headers.get("Authorization")
            message["_header"] = self.headers.get("X-Scripted")
            response = answer(message)
            if response is None:
                self.reply(202)
                return
            headers = [("Content-Type", "application/json")]
            if message.get("method") == "initialize":
                headers.append(("Mcp-Session-Id", "s-1"))
            self.reply(200, json.dumps(response).encode(), headers)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("PORT", server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    {"stdio": stdio, "http": http}[sys.argv[1]]()
