"""A stand-in for SearXNG in the deploy test (its image cannot be pulled here): /search?format=json only."""

import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class Handler(BaseHTTPRequestHandler):
    """Answers SearXNG's JSON API with one fixed result for any query."""

    def do_GET(self) -> None:
        """One JSON result page for /search, 404 elsewhere."""
        url = urlparse(self.path)
        if url.path != "/search":
            self.send_error(404)
            return
        query = parse_qs(url.query).get("q", [""])[0]
        body = json.dumps(
            {
                "query": query,
                "results": [
                    {"url": "https://example.org/", "title": "Example", "content": f"a result for {query}"}
                ],
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    # PID 1 in its container: without a handler SIGTERM is ignored and every stop waits for the kill timeout.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    ThreadingHTTPServer(("127.0.0.1", int(os.environ["STANDIN_PORT"])), Handler).serve_forever()
