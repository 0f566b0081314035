//! Unit tests of the writer's held statements (`HotSql`): their shapes and
//! plans match the schema, they run clean, are reused, and let the
//! connection close cleanly.

use super::*;

#[test]
fn held_statements_match_the_schema_run_clean_and_are_reused() {
    use rusqlite::StatementStatus;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let db = Db::hold(crate::file::open(&path, None).unwrap());
    // Each names what it is: its parameters, its columns, whether it writes.
    let shape = |which: HotSql| {
        db.with(which, |st| {
            Ok((st.parameter_count(), st.column_count(), st.readonly()))
        })
        .unwrap()
    };
    let shapes: Vec<_> = HotSql::ALL.into_iter().map(shape).collect();
    assert_eq!(
        shapes,
        [
            (16, 0, false),
            (8, 0, false),
            (3, 0, false),
            (4, 0, false),
            (3, 3, true),
            (1, 0, false),
            (5, 13, true),
            (6, 13, true),
            (8, 0, false)
        ]
    );
    // Each finds its rows where it should: the plain ack's, the lease's
    // and the delete's by row id, the lease's reader by `(tid, id)` (an
    // insert has no plan).
    for (which, how) in [
        (HotSql::Insert, None),
        (HotSql::InsertPlain, None),
        (
            HotSql::Lease,
            Some("SEARCH jobs USING INTEGER PRIMARY KEY (rowid=?)"),
        ),
        (
            HotSql::AckPlain,
            Some("SEARCH jobs USING INTEGER PRIMARY KEY (rowid=?)"),
        ),
        (
            HotSql::FindLease,
            Some("SEARCH jobs USING INDEX jobs_id (tid=? AND id=?)"),
        ),
        (
            HotSql::Delete,
            Some("SEARCH jobs USING INTEGER PRIMARY KEY (rowid=?)"),
        ),
        (
            HotSql::ReadyRow,
            Some("SEARCH jobs USING INTEGER PRIMARY KEY (rowid=?)"),
        ),
        (
            HotSql::ReadySpan,
            Some("SEARCH jobs USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"),
        ),
        (
            HotSql::LeaseSpan,
            Some("SEARCH jobs USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"),
        ),
    ] {
        let mut explain = db
            .prepare(&format!("EXPLAIN QUERY PLAN {}", which.sql()))
            .unwrap();
        // Parameters left unbound are NULL: the plan does not need them.
        let plan: Vec<String> = explain
            .raw_query()
            .mapped(|r| r.get::<_, String>(3))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(plan, Vec::from_iter(how), "{which:?}");
    }
    // Jobs' lifecycles through them; none is left active after its call
    // (an active statement would hold a read transaction open).
    let insert = |id: Option<&str>, dedup_ms: Option<i64>, key: Option<&str>| {
        db.with(HotSql::Insert, |st| {
            st.execute(rusqlite::params![
                1,
                id,
                1,
                0,
                0,
                None::<i64>,
                None::<i64>,
                None::<String>,
                0,
                false,
                b"x".as_slice(),
                dedup_ms,
                key,
                None::<i64>,
                None::<i64>,
                None::<String>
            ])
        })
    };
    let mut seqs = Vec::new();
    for (id, dedup_ms, key) in [
        ("plain", None, None),
        ("no-window", Some(0), None),
        ("window", Some(1000), None),
        ("keyed", None, Some("k")),
    ] {
        assert_eq!(insert(Some(id), dedup_ms, key).unwrap(), 1);
        assert!(!db.is_busy());
        let seq = db.last_insert_rowid();
        let leased = db.with(HotSql::Lease, |st| {
            st.execute(rusqlite::params!["t", 5, seq])
        });
        assert_eq!(leased.unwrap(), 1);
        seqs.push(seq);
    }
    let ack_plain = |seq: i64, id: &str, token: &str| {
        db.with(HotSql::AckPlain, |st| {
            st.execute(rusqlite::params![seq, 1, id, token])
        })
        .unwrap()
    };
    // The plain ack ends only a plain job's lease, and only its own: the
    // row id, the id and the token must all match.
    assert_eq!(ack_plain(seqs[0], "plain", "stale"), 0);
    assert_eq!(ack_plain(seqs[1], "plain", "t"), 0);
    assert_eq!(ack_plain(seqs[0], "no-window", "t"), 0);
    assert_eq!(ack_plain(seqs[0], "plain", "t"), 1);
    assert_eq!(ack_plain(seqs[0], "plain", "t"), 0);
    assert_eq!(ack_plain(seqs[1], "no-window", "t"), 1);
    assert!(!db.is_busy());
    for (id, seq) in [("window", seqs[2]), ("keyed", seqs[3])] {
        assert_eq!(ack_plain(seq, id, "t"), 0, "{id} has more to do");
        let found = db.with(HotSql::FindLease, |st| {
            st.query_row(rusqlite::params![1, id, "t"], |r| r.get::<_, i64>(0))
        });
        assert_eq!(found.unwrap(), seq);
        assert!(!db.is_busy());
        assert_eq!(db.with(HotSql::Delete, |st| st.execute([seq])).unwrap(), 1);
    }
    let left: i64 = db
        .query_row("SELECT count(*) FROM jobs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(left, 0);
    // A statement that failed is reset too, and runs again.
    assert!(insert(None, None, None).is_err());
    assert!(!db.is_busy());
    assert_eq!(insert(Some("again"), None, None).unwrap(), 1);
    // Six runs of one prepared statement: held, not prepared anew.
    let runs = db.with(HotSql::Insert, |st| Ok(st.get_status(StatementStatus::Run)));
    assert_eq!(runs.unwrap(), 6);
    // Statements first, then the connection: a clean close of the last
    // connection removes the write-ahead log, a close refused for an
    // unfinalized statement would leave it.
    let wal = crate::schema::wal_path(&path);
    assert!(wal.exists());
    drop(db);
    assert!(!wal.exists());
}
