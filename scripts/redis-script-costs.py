#!/usr/bin/env python3
"""Where a Redis server's time goes, per script and per command, from its SLOWLOG.

    redis-cli -p PORT config set slowlog-log-slower-than 0
    redis-cli -p PORT config set slowlog-max-len 3000000
    redis-cli -p PORT slowlog reset
    ... run the load (e.g. dq bench drain against a dq serve on that Redis) ...
    scripts/redis-script-costs.py PORT

Prints, most total time first, one line per EVALSHA script (the first 8
digits of its sha) and per command: calls, total ms, us per call. A script's
time includes the commands it runs, which are also counted on their own
lines. To tell the scripts apart, look at a call's arguments in
`redis-cli -p PORT slowlog get 5` (after the 11 keys: the topic, then
reserve's now, max, lease and a token prefix `<16 hex>.`; enqueue's 12 per
job; ack_batch's id and token per job). SLOWLOG keeps at most 32 arguments
of a call. Logging every call costs Redis at least a microsecond per
command, more for calls with many arguments (a drain over 1-10 s: reserve
184 us per call logged, all scripts 165 us per call with logging off, from
`INFO commandstats`): compare only figures measured the same way, and take
absolute per-call costs from `INFO commandstats`.
"""
import collections
import socket
import sys


def main():
    port = int(sys.argv[1])
    s = socket.create_connection(("127.0.0.1", port))
    f = s.makefile("rb")

    def read():
        line = f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else f.read(n + 2)[:-2]
        if kind == b"*":
            return [read() for _ in range(int(rest))]
        raise RuntimeError(f"unexpected reply {line!r}")

    s.sendall(b"*3\r\n$7\r\nSLOWLOG\r\n$3\r\nGET\r\n$2\r\n-1\r\n")
    entries = read()
    agg = collections.defaultdict(lambda: [0, 0])
    for e in entries:
        micros, args = e[2], e[3]
        name = args[0].decode().lower()
        key = f"evalsha {args[1][:8].decode()}" if name == "evalsha" and len(args) > 1 else name
        a = agg[key]
        a[0] += 1
        a[1] += micros
    print(f"{len(entries)} calls logged")
    for key, (calls, micros) in sorted(agg.items(), key=lambda x: -x[1][1]):
        print(f"{key:18} calls {calls:8}  total_ms {micros / 1000:9.1f}  us_per_call {micros / calls:8.1f}")


if __name__ == "__main__":
    main()
