"""A webhook receiver that verifies every delivery with the Standard
Webhooks reference library and appends what it got to a file.

Usage: webhook_receiver.py <port> <secret> <record file> [<seconds to hold each answer>]

Each verified delivery appends one JSON line {"id", "type", "data"} before
the answer is sent (204 after the hold); a delivery whose signature does
not verify appends {"bad": "<why>"} and is answered 400.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook

port, secret, record = int(sys.argv[1]), sys.argv[2], sys.argv[3]
hold = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
verifier = Webhook(secret)
lock = threading.Lock()


def append(line):
    with lock, open(record, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
        f.flush()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (the stdlib's name)
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            payload = verifier.verify(body, headers)
        except Exception as e:  # noqa: BLE001 (any failure is a bad delivery)
            append({"bad": repr(e)})
            self.send_response(400)
            self.end_headers()
            return
        append({"id": headers["webhook-id"], "type": payload["type"], "data": payload["data"]})
        time.sleep(hold)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
print("receiver ready", flush=True)
server.serve_forever()
