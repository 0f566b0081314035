//! API keys and their scopes (docs/security.md).
//!
//! A key is a name, a list of scopes and a secret. The secret
//! (`dqk_` + 64 hex digits: 256 bits from the operating system's CSPRNG
//! through `rand`) is shown once, when the key is created or rotated; the
//! store keeps only its SHA-256. A plain hash is enough because the secret
//! is random, not chosen by a person: nobody can guess 2^256 secrets, so the
//! slow, salted hashes made for passwords would only cost CPU on every
//! request. Keys are records of kind [`KIND`] in the store, so every
//! instance sharing it sees the same keys.
//!
//! A scope is `action:pattern`: the action is one of [`Action`], the
//! pattern a topic name, or a prefix ending in `*` (`billing-*`, `*`).
//! `admin` (or `admin:*`) allows everything, key management included.
//!
//! [`KeyRing`] is a process's copy of the keys, read again from the store
//! every [`REFRESH`] (and changed at once by this process's own creates,
//! rotations and revocations), so a key revoked on one instance stops
//! working on every other within a second. A request is authenticated by
//! hashing the secret it presents and looking the hash up: the time that
//! takes says nothing about how much of a secret was right, and an
//! unknown key and a revoked one take the same path.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use dq_core::{InvalidInput, Record, Topic};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The store record kind of keys.
pub const KIND: &str = "key";
/// What every secret starts with (so secret scanners and people recognise one).
pub const SECRET_PREFIX: &str = "dqk_";
/// How often every instance reads the keys again.
pub const REFRESH: Duration = Duration::from_millis(500);
/// How often an unknown secret may make an instance read the keys again
/// (so a key made elsewhere works at once).
pub const REREAD_EVERY: Duration = Duration::from_millis(200);
/// Most keys a store holds.
pub const MAX_KEYS: usize = 10_000;
/// Most scopes one key holds.
pub const MAX_SCOPES: usize = 100;
/// Longest key name, in bytes.
pub const MAX_NAME_LEN: usize = 64;
/// A key's last use is written to the store at most this often (per
/// instance), so busy keys cost no write per request.
pub const LAST_USED_EVERY_MS: u64 = 60_000;

/// What a scope allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Enqueue jobs (one or a batch).
    Enqueue,
    /// Reserve jobs and settle their leases (ack, nack, touch, release).
    Consume,
    /// Read topics, jobs, stats, dead letters and schedules.
    Read,
    /// Change topics, cancel and reschedule jobs, replay and purge dead
    /// letters, change schedules, import jobs.
    Manage,
    /// Everything, keys and operations on the instance included.
    Admin,
}

impl Action {
    /// Every action, in the order docs list them.
    pub const ALL: [Action; 5] = [
        Action::Enqueue,
        Action::Consume,
        Action::Read,
        Action::Manage,
        Action::Admin,
    ];

    /// The action's name in scopes.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Enqueue => "enqueue",
            Action::Consume => "consume",
            Action::Read => "read",
            Action::Manage => "manage",
            Action::Admin => "admin",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One scope: an action on the topics a pattern matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    action: Action,
    pattern: TopicPattern,
}

/// A topic name, or a prefix ending in `*` (`billing-*`, `*`): which topics
/// a scope (or the `metrics_topics` setting) names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPattern {
    /// A topic name, or a prefix when `wildcard`.
    prefix: String,
    wildcard: bool,
}

impl TopicPattern {
    /// Parses a pattern; the message names what is wrong (the caller says
    /// where the pattern came from).
    ///
    /// # Errors
    /// `*` other than at the end; a prefix no topic name can start with;
    /// an empty pattern.
    pub fn parse(pattern: &str) -> Result<Self, String> {
        let (prefix, wildcard) = match pattern.strip_suffix('*') {
            Some(p) => (p, true),
            None => (pattern, false),
        };
        if prefix.contains('*') {
            return Err("`*` may only end a pattern".into());
        }
        if !prefix.is_empty() {
            // A prefix must be the start of some valid topic name.
            Topic::new(prefix.to_string()).map_err(|e| e.message)?;
        } else if !wildcard {
            return Err(
                "the pattern is empty; write a topic name, a prefix ending in `*`, or `*`".into(),
            );
        }
        Ok(Self {
            prefix: prefix.to_string(),
            wildcard,
        })
    }

    /// Whether the pattern matches `topic`.
    pub fn matches(&self, topic: &str) -> bool {
        if self.wildcard {
            topic.starts_with(&self.prefix)
        } else {
            topic == self.prefix
        }
    }

    /// Whether it matches every topic (`*`).
    pub fn is_everything(&self) -> bool {
        self.wildcard && self.prefix.is_empty()
    }
}

impl fmt::Display for TopicPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.prefix, if self.wildcard { "*" } else { "" })
    }
}

fn invalid_scope(message: String) -> InvalidInput {
    InvalidInput::new("invalid_scope", message)
}

impl Scope {
    /// Parses `action:pattern` (`admin` alone means `admin:*`).
    ///
    /// # Errors
    /// `invalid_scope`, saying what is wrong.
    pub fn parse(s: &str) -> Result<Self, InvalidInput> {
        let (action, pattern) = match s.split_once(':') {
            Some((a, p)) => (a, p),
            None if s == "admin" => ("admin", "*"),
            None => {
                return Err(invalid_scope(format!(
                    "scope {s:?} is not action:pattern (e.g. consume:billing-*)"
                )));
            }
        };
        let action = Action::parse(action).ok_or_else(|| {
            invalid_scope(format!(
                "scope {s:?}: unknown action {action:?}; one of enqueue, consume, read, manage, admin"
            ))
        })?;
        let pattern =
            TopicPattern::parse(pattern).map_err(|m| invalid_scope(format!("scope {s:?}: {m}")))?;
        if action == Action::Admin && !pattern.is_everything() {
            return Err(invalid_scope(format!(
                "scope {s:?}: admin applies to everything; write `admin`"
            )));
        }
        Ok(Self { action, pattern })
    }

    /// The scope's action.
    pub fn action(&self) -> Action {
        self.action
    }

    /// Whether the pattern matches `topic`.
    pub fn matches(&self, topic: &str) -> bool {
        self.pattern.matches(topic)
    }

    /// Whether this scope allows `action` on `topic`.
    pub fn allows(&self, action: Action, topic: &str) -> bool {
        self.action == Action::Admin || (self.action == action && self.matches(topic))
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.action == Action::Admin {
            return f.write_str("admin");
        }
        write!(f, "{}:{}", self.action, self.pattern)
    }
}

/// Parses and checks a key's scopes: 1 to [`MAX_SCOPES`], each valid,
/// duplicates dropped.
///
/// # Errors
/// `invalid_scope`.
pub fn parse_scopes(scopes: &[String]) -> Result<Vec<Scope>, InvalidInput> {
    if scopes.is_empty() || scopes.len() > MAX_SCOPES {
        return Err(invalid_scope(format!(
            "a key holds 1 to {MAX_SCOPES} scopes, got {}",
            scopes.len()
        )));
    }
    let mut out: Vec<Scope> = Vec::with_capacity(scopes.len());
    for s in scopes {
        let scope = Scope::parse(s)?;
        if !out.contains(&scope) {
            out.push(scope);
        }
    }
    Ok(out)
}

/// Checks a key name: 1 to [`MAX_NAME_LEN`] bytes of `A-Z a-z 0-9 _ -`.
///
/// # Errors
/// `invalid_key_name`.
pub fn check_name(name: &str) -> Result<(), InvalidInput> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(InvalidInput::new(
            "invalid_key_name",
            format!("a key name is 1-{MAX_NAME_LEN} bytes of A-Z a-z 0-9 _ -"),
        ))
    }
}

/// A new secret: [`SECRET_PREFIX`] and 32 random bytes in hex.
pub fn new_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    let mut s = String::with_capacity(SECRET_PREFIX.len() + 64);
    s.push_str(SECRET_PREFIX);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// SHA-256 of a secret.
pub fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// A key as the store keeps it (the record's value; its mark is the last
/// use, Unix ms).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    /// SHA-256 of the secret, hex.
    sha256: String,
    scopes: Vec<String>,
    created_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rate_limit: Option<dq_core::RateLimit>,
}

/// A key a process knows.
pub struct ApiKey {
    /// The key's name.
    pub name: String,
    hash: [u8; 32],
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// When it was created (or last rotated), Unix ms.
    pub created_ms: u64,
    /// When it was last used, Unix ms (0: never), as far as this process knows.
    last_used_ms: AtomicU64,
    /// Most requests per window to this process.
    pub rate_limit: Option<dq_core::RateLimit>,
    /// The rate limit's bucket here: credit (None: full) and when it was
    /// last counted.
    bucket: std::sync::Mutex<(Option<u64>, u64)>,
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl ApiKey {
    /// A new key with `secret`.
    pub fn new(name: String, secret: &str, scopes: Vec<Scope>, created_ms: u64) -> Self {
        Self {
            name,
            hash: hash(secret),
            scopes,
            created_ms,
            last_used_ms: AtomicU64::new(0),
            rate_limit: None,
            bucket: std::sync::Mutex::new((None, 0)),
        }
    }

    /// The same with a request rate limit.
    pub fn limited(mut self, rate_limit: Option<dq_core::RateLimit>) -> Self {
        self.rate_limit = rate_limit;
        self
    }

    /// Counts one request at `now_ms` against the key's rate limit: `Ok`, or
    /// when the next one is allowed (Unix ms).
    ///
    /// # Errors
    /// The time of the next token when the bucket is empty.
    pub fn admit(&self, now_ms: u64) -> Result<(), u64> {
        let Some(limit) = &self.rate_limit else {
            return Ok(());
        };
        let mut b = self
            .bucket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let taken = limit.take(b.0, b.1, now_ms, 1);
        if taken.granted == 1 {
            *b = (Some(taken.credit), now_ms);
            Ok(())
        } else {
            Err(taken.next_at.unwrap_or(now_ms + 1))
        }
    }

    /// Reads a stored key.
    ///
    /// # Errors
    /// What is wrong with the record.
    pub fn from_record(name: &str, rec: &Record) -> Result<Self, String> {
        let s: Stored = serde_json::from_str(&rec.value).map_err(|e| e.to_string())?;
        let hash = unhex32(&s.sha256).ok_or("sha256 is not 64 hex digits")?;
        let scopes = parse_scopes(&s.scopes).map_err(|e| e.message)?;
        if let Some(r) = &s.rate_limit {
            r.validate("rate_limit").map_err(|e| e.message)?;
        }
        Ok(Self {
            name: name.to_string(),
            hash,
            scopes,
            created_ms: s.created_ms,
            last_used_ms: AtomicU64::new(rec.mark),
            rate_limit: s.rate_limit,
            bucket: std::sync::Mutex::new((None, 0)),
        })
    }

    /// The record value the store keeps.
    pub fn to_record(&self) -> String {
        serde_json::to_string(&Stored {
            sha256: hex(&self.hash),
            scopes: self.scopes.iter().map(ToString::to_string).collect(),
            created_ms: self.created_ms,
            rate_limit: self.rate_limit,
        })
        .expect("plain fields serialize")
    }

    /// The hash in hex: what ties the admin page's sessions of this key to
    /// this secret (a rotation ends them). Not a secret by itself, but not
    /// shown anywhere either.
    pub(crate) fn fingerprint(&self) -> String {
        hex(&self.hash)
    }

    /// Whether the key allows `action` on every topic (a `*` pattern).
    pub fn allows_all(&self, action: Action) -> bool {
        self.scopes
            .iter()
            .any(|s| s.action == Action::Admin || (s.action == action && s.pattern.is_everything()))
    }

    /// Whether the key allows `action` on `topic`.
    pub fn allows(&self, action: Action, topic: &str) -> bool {
        self.scopes.iter().any(|s| s.allows(action, topic))
    }

    /// Whether the key allows `action` on some topic.
    pub fn allows_any(&self, action: Action) -> bool {
        self.scopes
            .iter()
            .any(|s| s.action == action || s.action == Action::Admin)
    }

    /// Whether the key is an admin key.
    pub fn is_admin(&self) -> bool {
        self.scopes.iter().any(|s| s.action == Action::Admin)
    }

    /// When the key was last used (Unix ms; 0: never).
    pub fn last_used_ms(&self) -> u64 {
        self.last_used_ms.load(Ordering::Relaxed)
    }

    /// Notes a use at `now_ms`; true when it should be written to the store
    /// (the last write is [`LAST_USED_EVERY_MS`] old).
    pub fn note_use(&self, now_ms: u64) -> bool {
        let last = self.last_used_ms.load(Ordering::Relaxed);
        now_ms >= last.saturating_add(LAST_USED_EVERY_MS)
            && self
                .last_used_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// The key as `GET /v1/keys` shows it (never the secret or its hash).
    pub fn info(&self) -> dq_api::KeyInfo {
        let used = self.last_used_ms();
        dq_api::KeyInfo {
            name: self.name.clone(),
            scopes: self.scopes.iter().map(ToString::to_string).collect(),
            created_ms: self.created_ms,
            last_used_ms: (used > 0).then_some(used),
            rate_limit: self.rate_limit,
        }
    }
}

/// A process's copy of the keys.
#[derive(Default)]
pub struct KeyRing {
    by_hash: RwLock<Arc<HashMap<[u8; 32], Arc<ApiKey>>>>,
    /// Whether the store holds a record of kind [`KIND`] this process could
    /// not read: auth is then enforced as if keys existed.
    unreadable: AtomicBool,
    /// Whether the keys were read at least once.
    loaded: AtomicBool,
    /// Bumped by every change this process makes: a read of the store that
    /// began before one is not applied (it may miss the change).
    changes: AtomicU64,
    /// When an unknown secret last made this process read the keys again.
    reread: std::sync::Mutex<Option<std::time::Instant>>,
    /// Held while the keys are read from the store.
    reading: tokio::sync::Mutex<()>,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing")
            .field("keys", &self.snapshot().len())
            .finish()
    }
}

impl KeyRing {
    fn snapshot(&self) -> Arc<HashMap<[u8; 32], Arc<ApiKey>>> {
        self.by_hash
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether any key exists (or a key record could not be read).
    pub fn any(&self) -> bool {
        self.unreadable.load(Ordering::Relaxed) || !self.snapshot().is_empty()
    }

    /// Whether the keys were read from the store at least once.
    pub fn loaded(&self) -> bool {
        self.loaded.load(Ordering::Relaxed)
    }

    /// Whether an unknown secret may make this process read the keys again
    /// now: at most once per [`REREAD_EVERY`], so unknown secrets cannot
    /// turn into a read of the store each.
    pub fn may_reread(&self) -> bool {
        let mut last = self
            .reread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::Instant::now();
        if last.is_some_and(|at| now.duration_since(at) < REREAD_EVERY) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// The key named `name`, if this process knows it.
    pub fn named(&self, name: &str) -> Option<Arc<ApiKey>> {
        self.snapshot().values().find(|k| k.name == name).cloned()
    }

    /// How many admin keys exist.
    pub fn admin_count(&self) -> usize {
        self.snapshot().values().filter(|k| k.is_admin()).count()
    }

    /// Whether an admin key exists.
    pub fn has_admin(&self) -> bool {
        self.snapshot().values().any(|k| k.is_admin())
    }

    /// The key whose secret is `secret`, if any.
    pub fn find(&self, secret: &str) -> Option<Arc<ApiKey>> {
        let h = hash(secret);
        let map = self.snapshot();
        let key = map.get(&h)?;
        // The map found it by hash equality already; compare once more in
        // constant time so no early-exit comparison is on this path.
        constant_time_eq(&key.hash, &h).then(|| key.clone())
    }

    /// Held by whoever reads the keys from the store, so reads land in order.
    pub fn reading(&self) -> &tokio::sync::Mutex<()> {
        &self.reading
    }

    /// A mark to pass to [`KeyRing::replace`]: take it before reading the store.
    pub fn begin_read(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    /// Replaces the copy with what the store holds (`records` of [`KIND`],
    /// read after [`KeyRing::begin_read`] gave `mark`), keeping what this
    /// process knows of each key's last use. Returns false, changing
    /// nothing, when this process changed a key since `mark`.
    pub fn replace(&self, mark: u64, records: &[(String, Record)]) -> bool {
        let old = self.snapshot();
        let mut map = HashMap::with_capacity(records.len());
        let mut unreadable = false;
        for (name, rec) in records {
            match ApiKey::from_record(name, rec) {
                Ok(k) => {
                    if let Some(prev) = old.get(&k.hash).filter(|p| p.name == k.name) {
                        let used = prev.last_used_ms().max(k.last_used_ms());
                        k.last_used_ms.store(used, Ordering::Relaxed);
                        if prev.rate_limit == k.rate_limit {
                            let b = *prev
                                .bucket
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner);
                            *k.bucket
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner) = b;
                        }
                    }
                    map.insert(k.hash, Arc::new(k));
                }
                Err(e) => {
                    unreadable = true;
                    tracing::warn!(key = %name, error = %e, "stored API key is not valid; auth stays enforced");
                }
            }
        }
        let mut slot = self
            .by_hash
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.changes.load(Ordering::SeqCst) != mark {
            return false;
        }
        *slot = Arc::new(map);
        self.unreadable.store(unreadable, Ordering::Relaxed);
        self.loaded.store(true, Ordering::Relaxed);
        true
    }

    fn change(&self, f: impl FnOnce(&mut HashMap<[u8; 32], Arc<ApiKey>>)) {
        let mut slot = self
            .by_hash
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut map = (**slot).clone();
        f(&mut map);
        *slot = Arc::new(map);
        self.changes.fetch_add(1, Ordering::SeqCst);
    }

    /// Adds (or replaces, by name) a key this process wrote.
    pub fn insert(&self, key: ApiKey) {
        self.change(|map| {
            map.retain(|_, k| k.name != key.name);
            map.insert(key.hash, Arc::new(key));
        });
    }

    /// Forgets the key named `name`.
    pub fn remove(&self, name: &str) {
        self.change(|map| map.retain(|_, k| k.name != name));
    }
}

/// Byte comparison whose time depends only on the length.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_parse_and_match() {
        let s = Scope::parse("consume:billing-*").unwrap();
        assert!(s.allows(Action::Consume, "billing-eu"));
        assert!(
            s.allows(Action::Consume, "billing-"),
            "an empty rest matches"
        );
        assert!(
            !s.allows(Action::Consume, "billing"),
            "the prefix holds the dash"
        );
        assert!(!s.allows(Action::Consume, "Billing-eu"), "case counts");
        assert!(!s.allows(Action::Read, "billing-eu"), "consume is not read");
        assert!(!s.allows(Action::Consume, "xbilling-eu"));
        let exact = Scope::parse("read:orders").unwrap();
        assert!(exact.allows(Action::Read, "orders"));
        assert!(!exact.allows(Action::Read, "orders2"));
        assert!(!exact.allows(Action::Read, "order"));
        let all = Scope::parse("enqueue:*").unwrap();
        assert!(all.allows(Action::Enqueue, "anything"));
        assert!(!all.allows(Action::Manage, "anything"));
        let admin = Scope::parse("admin").unwrap();
        for a in Action::ALL {
            assert!(admin.allows(a, "t"));
        }
        assert_eq!(Scope::parse("admin:*").unwrap(), admin);
        assert_eq!(admin.to_string(), "admin");
        assert_eq!(s.to_string(), "consume:billing-*");
        assert_eq!(exact.to_string(), "read:orders");
        assert_eq!(Scope::parse("read:a:b*").unwrap().to_string(), "read:a:b*");
        assert!(Scope::parse("read:a:b*").unwrap().matches("a:bc"));
    }

    #[test]
    fn bad_scopes_are_refused() {
        for bad in [
            "",
            "read",
            "write:x",
            "read:",
            "read:*x",
            "read:a*b*",
            "read:bad topic",
            "read:{x}",
            "admin:orders",
            "admin:x*",
            "Read:x",
        ] {
            let e = Scope::parse(bad).unwrap_err();
            assert_eq!(e.code, "invalid_scope", "{bad:?}");
        }
        assert!(parse_scopes(&[]).is_err());
        assert!(parse_scopes(&vec!["read:*".to_string(); MAX_SCOPES + 1]).is_err());
        assert_eq!(
            parse_scopes(&["read:*".into(), "read:*".into()])
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn names_and_secrets() {
        assert!(check_name("billing-worker_2").is_ok());
        for bad in ["", "a.b", "a b", "ü", &"x".repeat(MAX_NAME_LEN + 1)] {
            assert_eq!(check_name(bad).unwrap_err().code, "invalid_key_name");
        }
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert!(a.starts_with(SECRET_PREFIX));
        assert_eq!(a.len(), SECRET_PREFIX.len() + 64);
        assert!(a[4..].bytes().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn ring_finds_by_secret_and_round_trips_records() {
        let ring = KeyRing::default();
        assert!(!ring.any());
        let secret = new_secret();
        let key = ApiKey::new(
            "w".into(),
            &secret,
            parse_scopes(&["consume:b-*".into()]).unwrap(),
            5,
        );
        let rec = Record {
            value: key.to_record(),
            mark: 9,
        };
        assert!(!rec.value.contains(&secret), "only the hash is stored");
        assert!(ring.replace(ring.begin_read(), &[("w".into(), rec.clone())]));
        assert!(ring.any() && !ring.has_admin());
        let found = ring.find(&secret).unwrap();
        assert_eq!(found.name, "w");
        assert_eq!(found.last_used_ms(), 9);
        assert!(ring.find(&new_secret()).is_none());
        assert!(ring.find(&secret[..secret.len() - 1]).is_none());
        let before = ring.begin_read();
        ring.remove("w");
        assert!(ring.find(&secret).is_none() && !ring.any());
        assert!(
            !ring.replace(before, &[("w".into(), rec.clone())]),
            "a read begun before a revocation does not bring the key back"
        );
        assert!(ring.find(&secret).is_none());
        ring.replace(
            ring.begin_read(),
            &[(
                "x".into(),
                Record {
                    value: "{".into(),
                    mark: 0,
                },
            )],
        );
        assert!(ring.any(), "an unreadable key keeps auth enforced");
    }

    #[test]
    fn last_use_is_written_once_a_minute() {
        let key = ApiKey::new("k".into(), "s", vec![], 0);
        assert!(key.note_use(LAST_USED_EVERY_MS));
        assert!(!key.note_use(LAST_USED_EVERY_MS + 1));
        assert!(key.note_use(2 * LAST_USED_EVERY_MS));
    }

    #[test]
    fn a_rate_limited_key_admits_its_burst_then_one_per_token() {
        let key = ApiKey::new("k".into(), "s", vec![], 0).limited(Some(dq_core::RateLimit {
            limit: 2,
            per_ms: 1000,
            burst: 2,
        }));
        assert_eq!(key.admit(10_000), Ok(()));
        assert_eq!(key.admit(10_000), Ok(()));
        assert_eq!(key.admit(10_000), Err(10_500));
        assert_eq!(key.admit(10_499), Err(10_500));
        assert_eq!(key.admit(10_500), Ok(()));
        assert!(key.admit(10_500).is_err());
        let free = ApiKey::new("f".into(), "s", vec![], 0);
        for _ in 0..1000 {
            assert_eq!(free.admit(0), Ok(()));
        }
    }

    #[test]
    fn constant_time_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
