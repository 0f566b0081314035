#!/usr/bin/env python3
"""Put/reserve/delete throughput over the beanstalkd protocol: C connections,
each doing put -> reserve -> delete in a loop for D seconds, against any
beanstalkd-protocol server (dq serve --beanstalkd, or beanstalkd itself).

    scripts/bench-beanstalkd.py HOST:PORT [--connections 50] [--seconds 10]

Prints one JSON line: cycles, cycles/s (one cycle = 3 commands), errors.
The client is Python asyncio on one core: compare servers in the same run,
and read the figures as a floor for fast servers."""
import argparse
import asyncio
import json
import time


async def worker(host, port, stop_at, tube, out):
    r, w = await asyncio.open_connection(host, port)
    w.write(f"use {tube}\r\nwatch {tube}\r\nignore default\r\n".encode())
    for _ in range(3):
        await r.readline()
    body = b"x" * 100
    done = errors = 0
    while time.monotonic() < stop_at:
        w.write(b"put 1024 0 60 %d\r\n%s\r\n" % (len(body), body))
        line = await r.readline()
        if not line.startswith(b"INSERTED"):
            errors += 1
            continue
        w.write(b"reserve-with-timeout 5\r\n")
        line = await r.readline()
        if not line.startswith(b"RESERVED"):
            errors += 1
            continue
        job_id, size = line.split()[1:3]
        await r.readexactly(int(size) + 2)
        w.write(b"delete %s\r\n" % job_id)
        line = await r.readline()
        if line != b"DELETED\r\n":
            errors += 1
            continue
        done += 1
    w.close()
    out.append((done, errors))


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("addr")
    p.add_argument("--connections", type=int, default=50)
    p.add_argument("--seconds", type=float, default=10)
    a = p.parse_args()
    host, port = a.addr.rsplit(":", 1)
    out = []
    start = time.monotonic()
    stop_at = start + a.seconds
    tube = f"bench-{int(start * 1000)}"
    await asyncio.gather(*(worker(host, int(port), stop_at, tube, out) for _ in range(a.connections)))
    took = time.monotonic() - start
    cycles = sum(d for d, _ in out)
    print(json.dumps({"connections": a.connections, "seconds": round(took, 2), "cycles": cycles,
                      "cycles_per_s": round(cycles / took), "errors": sum(e for _, e in out)}))


asyncio.run(main())
