#!/usr/bin/env python3
"""The embedded store's job lifecycle (enqueue, lease, ack) on candidate
table layouts, timed in one process against the same SQLite: a prototype
to choose the next layout by, not a figure of dq (dq's figures come from
`dq bench`). Each layout runs the statements of a job's lifecycle that dq's
writer runs per job (the enqueue's INSERT, the reserve's read of the ready
order (row ids and ids only, where dq reads the whole job), the lease's
UPDATE, the plain ack's DELETE; not the per-group topic counts), in
transactions of GROUP operations as the writer groups them, WAL mode and
synchronous=FULL as dq opens its file, on a fresh file in a temp directory.

  scripts/embedded-layouts.py [JOBS] [ROUNDS] [SYNC]   (defaults 100000, 3, FULL)

SYNC=OFF leaves the fsyncs out (not a mode dq runs in): what is left is
the statements' CPU, which is what bounds dq's one writer thread.

Layouts:
  now        dq's schema today: a rowid table, the (tid, id) index and five
             partial queue indexes (schedule, ready, keyed ready, leases,
             dead); the lease an UPDATE, the plain ack one DELETE.
  no-lease   today's minus the lease index (leases' order kept elsewhere).
  one-index  today's five partial queue indexes as one index on
             expressions: (tid, state, the ready lane's key, the ready
             priority, the state's time (due, deadline or died), seq).
  memory     every queue order in memory: the rowid table and its (tid, id)
             index only; the lease an UPDATE by row id, the ack a DELETE by
             (tid, id, token).
  clustered  every queue order in memory and the table WITHOUT ROWID,
             keyed by (tid, id): one B-tree per job.

Prints each layout's median time per job over ROUNDS rounds (the layouts
alternate within a round) and its ratio to `now`. Python's own cost per
statement is in every layout's figure alike, so the ratios understate the
differences. The machine is noisy: read ratios of medians, not one run.
"""

import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time

GROUP = 100
BODY = b"x" * 64

# dq's jobs table and its indexes as crates/dq-embedded/src/schema.rs
# builds them (BASE and every migration since), copied: keep them in step
# when the schema changes, or the prototype measures a layout dq left.
NOW_SCHEMA = """
CREATE TABLE jobs (
  seq INTEGER PRIMARY KEY, tid INTEGER NOT NULL, id TEXT NOT NULL,
  state INTEGER NOT NULL, due_ms INTEGER NOT NULL, priority INTEGER NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER, lease_ms INTEGER,
  retry TEXT, last_error TEXT, created_ms INTEGER NOT NULL, token TEXT,
  deadline_ms INTEGER, died_ms INTEGER, is_json INTEGER NOT NULL,
  body BLOB NOT NULL, timeouts INTEGER NOT NULL DEFAULT 0,
  releases INTEGER NOT NULL DEFAULT 0, buries INTEGER NOT NULL DEFAULT 0,
  kicks INTEGER NOT NULL DEFAULT 0, dedup_ms INTEGER, fkey TEXT
);
CREATE UNIQUE INDEX jobs_id ON jobs(tid, id);
"""
QUEUE_INDEXES = {
    "sched": "CREATE INDEX jobs_sched ON jobs(tid, due_ms) WHERE state = 0;",
    "ready": "CREATE INDEX jobs_ready ON jobs(tid, priority, due_ms, seq) WHERE state = 1 AND fkey IS NULL;",
    "kready": "CREATE INDEX jobs_kready ON jobs(tid, fkey, priority, due_ms, seq) WHERE state = 1 AND fkey IS NOT NULL;",
    "lease": "CREATE INDEX jobs_lease ON jobs(tid, deadline_ms) WHERE state = 2;",
    "dead": "CREATE INDEX jobs_dead ON jobs(tid, died_ms, seq) WHERE state = 3;",
}
# One index for every queue order: the columns a state does not order by
# are NULL in its entries, so each state's entries sort as its own index's.
LANE = "(CASE WHEN state = 1 THEN fkey END)"
RANK = "(CASE WHEN state = 1 THEN priority END)"
AT = "(CASE state WHEN 2 THEN deadline_ms WHEN 3 THEN died_ms ELSE due_ms END)"
ONE_INDEX = f"CREATE INDEX jobs_queue ON jobs(tid, state, {LANE}, {RANK}, {AT}, seq);"
CLUSTERED_SCHEMA = NOW_SCHEMA.replace(
    "seq INTEGER PRIMARY KEY, tid INTEGER NOT NULL, id TEXT NOT NULL,",
    "seq INTEGER NOT NULL, tid INTEGER NOT NULL, id TEXT NOT NULL,",
).replace(
    "dedup_ms INTEGER, fkey TEXT\n);",
    "dedup_ms INTEGER, fkey TEXT,\n  PRIMARY KEY (tid, id)\n) WITHOUT ROWID;",
).replace("CREATE UNIQUE INDEX jobs_id ON jobs(tid, id);", "")

assert "WITHOUT ROWID" in CLUSTERED_SCHEMA and "jobs_id" not in CLUSTERED_SCHEMA

INSERT = """INSERT INTO jobs (seq, tid, id, state, due_ms, priority, max_attempts, lease_ms,
  retry, created_ms, is_json, body, dedup_ms, fkey)
  VALUES (?, 1, ?, 1, ?, 0, NULL, NULL, NULL, ?, 0, ?, NULL, NULL)
  ON CONFLICT (tid, id) DO NOTHING"""


def layout_sql(name):
    if name == "now":
        return NOW_SCHEMA + "".join(QUEUE_INDEXES.values())
    if name == "no-lease":
        return NOW_SCHEMA + "".join(v for k, v in QUEUE_INDEXES.items() if k != "lease")
    if name == "one-index":
        return NOW_SCHEMA + ONE_INDEX
    if name == "memory":
        return NOW_SCHEMA
    if name == "clustered":
        return CLUSTERED_SCHEMA
    raise ValueError(name)


def run(name, jobs, sync):
    """Seconds for `jobs` lifecycles on layout `name`."""
    with tempfile.TemporaryDirectory() as d:
        db = sqlite3.connect(os.path.join(d, "f"), isolation_level=None)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA synchronous = {sync}")
        db.executescript(layout_sql(name))
        in_memory = name in ("memory", "clustered")
        ids = [f"run-{i}" for i in range(jobs)]
        ready = []  # the in-memory layouts' ready order: (seq, id)
        start = time.perf_counter()
        # Enqueue, in groups.
        for g in range(0, jobs, GROUP):
            db.execute("BEGIN IMMEDIATE")
            rows = [(i + 1, ids[i], 0, 0, BODY) for i in range(g, min(g + GROUP, jobs))]
            db.executemany(INSERT, rows)
            db.execute("COMMIT")
            if in_memory:
                ready.extend((r[0], r[1]) for r in rows)
        # Reserve and ack, alternating groups as consumers do.
        leased = 0
        while leased < jobs:
            db.execute("BEGIN IMMEDIATE")
            if in_memory:
                batch = ready[leased : leased + GROUP]
            elif name == "one-index":
                batch = db.execute(
                    f"SELECT seq, id FROM jobs WHERE tid = 1 AND state = 1 AND {LANE} IS NULL"
                    f" ORDER BY {RANK}, {AT}, seq LIMIT ?",
                    (GROUP,),
                ).fetchall()
            else:
                batch = db.execute(
                    "SELECT seq, id FROM jobs WHERE tid = 1 AND state = 1 AND fkey IS NULL"
                    " ORDER BY priority, due_ms, seq LIMIT ?",
                    (GROUP,),
                ).fetchall()
            if not batch:
                sys.exit(f"{name}: nothing ready with {jobs - leased} jobs left to lease")
            token = f"{random.getrandbits(64):016x}."
            lease = [(f"{token}{n:x}", 30_000, seq, jid) for n, (seq, jid) in enumerate(batch)]
            if name == "clustered":
                db.executemany(
                    "UPDATE jobs SET state = 2, attempts = attempts + 1, token = ?1,"
                    " deadline_ms = ?2, died_ms = NULL WHERE tid = 1 AND id = ?3",
                    [(t, d, jid) for t, d, _, jid in lease],
                )
            else:
                db.executemany(
                    "UPDATE jobs SET state = 2, attempts = attempts + 1, token = ?1,"
                    " deadline_ms = ?2, died_ms = NULL WHERE seq = ?3",
                    [(t, d, seq) for t, d, seq, _ in lease],
                )
            db.execute("COMMIT")
            db.execute("BEGIN IMMEDIATE")
            db.executemany(
                "DELETE FROM jobs WHERE tid = 1 AND id = ?2 AND state = 2 AND token = ?1"
                " AND fkey IS NULL AND (dedup_ms IS NULL OR dedup_ms <= 0)",
                [(t, jid) for t, _, _, jid in lease],
            )
            db.execute("COMMIT")
            leased += len(batch)
        elapsed = time.perf_counter() - start
        left = db.execute("SELECT count(*) FROM jobs").fetchone()[0]
        if left != 0:
            sys.exit(f"{name}: {left} jobs left")
        db.close()
        return elapsed


def main():
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    sync = sys.argv[3] if len(sys.argv) > 3 else "FULL"
    if sync not in ("FULL", "OFF"):
        sys.exit("SYNC is FULL or OFF")
    names = ["now", "no-lease", "one-index", "memory", "clustered"]
    times = {n: [] for n in names}
    for r in range(rounds):
        for n in names:
            times[n].append(run(n, jobs, sync))
            print(f"round {r + 1} {n:10} {times[n][-1] / jobs * 1e6:6.2f} us/job", flush=True)
    base = statistics.median(times["now"])
    print(
        f"SQLite {sqlite3.sqlite_version}, synchronous = {sync}, {jobs} jobs,"
        f" groups of {GROUP}, median of {rounds}:"
    )
    for n in names:
        m = statistics.median(times[n])
        print(f"{n:10} {m / jobs * 1e6:6.2f} us/job  {m / base:5.2f} of now")


if __name__ == "__main__":
    main()
