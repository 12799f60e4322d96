"""An OTLP/HTTP trace receiver for the telemetry tests: a collector's front door on
loopback that decodes each `POST /v1/traces` body with the official OpenTelemetry proto
definitions (PyPI's opentelemetry-proto, installed by .ci/tools) and appends every span
to a file as one JSON line, for the Rust test to read.

Usage: receiver.py SPANS_FILE. Prints the port it listens on, then serves until killed.
A line: {"trace_id", "span_id", "parent_span_id" (hex; "" for none), "name", "kind",
"start_ns", "end_ns", "attributes" {key: value}, "events" [{"name", "attributes"}],
"status" {"code", "message"}, "service"}.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

OUT = sys.argv[1]
LOCK = threading.Lock()


def value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    if kind is None:
        return None
    return getattr(any_value, kind)


def attributes(pairs):
    return {kv.key: value(kv.value) for kv in pairs}


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_response(404)
            self.end_headers()
            return
        request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        lines = []
        for resource_spans in request.resource_spans:
            service = attributes(resource_spans.resource.attributes).get("service.name")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    lines.append(json.dumps({
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "kind": span.kind,
                        "start_ns": span.start_time_unix_nano,
                        "end_ns": span.end_time_unix_nano,
                        "attributes": attributes(span.attributes),
                        "events": [{"name": e.name, "attributes": attributes(e.attributes)} for e in span.events],
                        "status": {"code": span.status.code, "message": span.status.message},
                        "service": service,
                        "headers": {k.lower(): v for k, v in self.headers.items() if k.lower().startswith("x-")},
                    }))
        with LOCK, open(OUT, "a") as out:
            for line in lines:
                out.write(line + "\n")
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
print(server.server_address[1], flush=True)
server.serve_forever()
