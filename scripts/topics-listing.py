#!/usr/bin/env python3
"""How long one page of `GET /v1/topics` takes with many topics.

    scripts/topics-listing.py HOST:PORT [--topics 100000] [--limit 100] [--runs 50]
    scripts/topics-listing.py HOST:PORT --skip-create   # topics made already

Creates --topics topics named t000000, t000001, ... through the HTTP API,
each by one enqueued job (so its counts are not all zero), over 32
keep-alive connections; then times --runs requests of each page below,
one after another on one keep-alive connection, and prints one JSON line
per page (median, p90, max ms, topics in the page) and the creation rate:

- first: `?limit=L` (the first page also checks the sorted names against
  the topics set: one SCARD and one ZCARD);
- middle: `?limit=L&cursor=<the middle topic>`;
- last: the page after the last-but-L topic;
- prefix: `?limit=L&prefix=t0500` (the 100 topics t050000..t050099).

Times are the client's, request written to reply read: they include the
HTTP round trip on loopback, JSON encoding and the counts of each topic of
the page (read 16 at a time)."""
import argparse
import http.client
import json
import statistics
import threading
import time


def create(host, port, names, errors):
    conn = http.client.HTTPConnection(host, port, timeout=30)
    for n in names:
        conn.request("POST", f"/v1/topics/{n}/jobs", body=b'{"body":1,"delay_ms":3600000}',
                     headers={"content-type": "application/json"})
        r = conn.getresponse()
        r.read()
        if r.status != 201:
            errors.append((n, r.status))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("--topics", type=int, default=100_000)
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--skip-create", action="store_true")
    a = ap.parse_args()
    host, port = a.server.rsplit(":", 1)
    port = int(port)
    names = [f"t{i:06d}" for i in range(a.topics)]
    if not a.skip_create:
        errors = []
        started = time.monotonic()
        threads = [threading.Thread(target=create, args=(host, port, names[i::32], errors))
                   for i in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.monotonic() - started
        print(json.dumps({"created": a.topics - len(errors), "errors": len(errors),
                          "topics_per_s": round(a.topics / took)}), flush=True)
    conn = http.client.HTTPConnection(host, port, timeout=30)
    mid = names[len(names) // 2]
    last = names[max(0, len(names) - a.limit - 1)]
    pages = {
        "first": f"/v1/topics?limit={a.limit}",
        "middle": f"/v1/topics?limit={a.limit}&cursor={mid}",
        "last": f"/v1/topics?limit={a.limit}&cursor={last}",
        "prefix": f"/v1/topics?limit={a.limit}&prefix=t0500",
    }
    for what, uri in pages.items():
        times, count = [], 0
        for _ in range(a.runs):
            t0 = time.perf_counter()
            conn.request("GET", uri)
            r = conn.getresponse()
            body = r.read()
            times.append((time.perf_counter() - t0) * 1000)
            assert r.status == 200, (uri, r.status, body[:200])
            count = len(json.loads(body)["topics"])
        times.sort()
        print(json.dumps({
            "page": what, "uri": uri, "topics_in_page": count, "runs": a.runs,
            "median_ms": round(statistics.median(times), 2),
            "p90_ms": round(times[int(len(times) * 0.9) - 1], 2),
            "max_ms": round(times[-1], 2),
        }), flush=True)


if __name__ == "__main__":
    main()
