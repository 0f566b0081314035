//! What the schedules stand on: named records with marks that only rise,
//! and `next_seq` counters.

use dq_core::*;

use super::T0;

/// Named records: put creates then replaces (value and mark), get and list
/// (sorted, per kind) read them, the mark only rises, delete forgets.
pub async fn records_keep_values_and_raise_marks(s: &dyn Store) {
    assert!(
        s.put_record("schedule", "b", "{\"x\":1}", 10)
            .await
            .unwrap()
    );
    assert!(s.put_record("schedule", "a", "one", 5).await.unwrap());
    assert!(s.put_record("other", "a", "elsewhere", 0).await.unwrap());
    assert!(
        !s.put_record("schedule", "a", "two", 7).await.unwrap(),
        "replaced"
    );
    let rec = |v: &str, mark| Record {
        value: v.into(),
        mark,
    };
    assert_eq!(
        s.get_record("schedule", "a").await.unwrap(),
        Some(rec("two", 7))
    );
    assert_eq!(s.get_record("schedule", "zz").await.unwrap(), None);
    assert_eq!(
        s.list_records("schedule").await.unwrap(),
        vec![
            ("a".into(), rec("two", 7)),
            ("b".into(), rec("{\"x\":1}", 10))
        ]
    );
    // Raised, never lowered; concurrent raises keep the highest.
    assert_eq!(s.raise_mark("schedule", "a", 3).await.unwrap(), Some(7));
    let raises = (0..20u64).map(|i| s.raise_mark("schedule", "a", T0 + i));
    let after = futures::future::join_all(raises).await;
    assert!(after.iter().all(|r| r.is_ok()));
    assert_eq!(
        s.get_record("schedule", "a").await.unwrap().unwrap().mark,
        T0 + 19
    );
    assert_eq!(
        s.raise_mark("schedule", "zz", 1).await.unwrap(),
        None,
        "not created"
    );
    assert_eq!(s.get_record("schedule", "zz").await.unwrap(), None);
    assert!(s.delete_record("schedule", "a").await.unwrap());
    assert!(!s.delete_record("schedule", "a").await.unwrap());
    assert_eq!(s.list_records("schedule").await.unwrap().len(), 1);
    assert_eq!(
        s.list_records("other").await.unwrap(),
        vec![("a".into(), rec("elsewhere", 0))]
    );
}

/// `next_seq`: 1 first, then increasing; concurrent callers never get the
/// same value; counters of different names are apart.
pub async fn next_seq_is_unique_and_increasing(s: &dyn Store) {
    assert_eq!(s.next_seq("a").await.unwrap(), 1);
    assert_eq!(s.next_seq("a").await.unwrap(), 2);
    assert_eq!(s.next_seq("b").await.unwrap(), 1);
    let got: Vec<u64> = futures::future::join_all((0..50).map(|_| s.next_seq("a")))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let mut sorted = got.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted, (3..53).collect::<Vec<u64>>(), "unique: {got:?}");
}
