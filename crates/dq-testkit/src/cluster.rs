//! A private Redis Cluster for tests: `masters` masters with `replicas`
//! replicas each, every node a `redis-server --cluster-enabled yes` on a free
//! loopback port, joined by `redis-cli --cluster create`.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::RedisServer;

/// A running cluster; its nodes are killed when dropped.
#[derive(Debug)]
pub struct RedisCluster {
    /// The nodes, in the order given to `redis-cli --cluster create` (the
    /// first `masters` start as masters).
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts and joins a cluster; returns when every node reports
    /// `cluster_state:ok`. Node timeout 1 s, so a failover takes ~2 s.
    pub fn start(masters: usize, replicas: usize) -> Self {
        let total = masters * (1 + replicas);
        let nodes: Vec<RedisServer> = (0..total)
            .map(|_| {
                RedisServer::start_with_args(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    "1000",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-require-full-coverage",
                    "no",
                ])
            })
            .collect();
        let mut cmd = Command::new("redis-cli");
        cmd.arg("--cluster").arg("create");
        for n in &nodes {
            cmd.arg(format!("127.0.0.1:{}", n.port()));
        }
        cmd.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
        let out = cmd.output().expect("redis-cli not runnable");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let c = Self { nodes };
        c.wait_ok(Duration::from_secs(30));
        c
    }

    /// `redis://127.0.0.1:<port>` of every node (seeds for a cluster client).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Waits until every running node says `cluster_state:ok` and agrees on
    /// who serves every slot.
    pub fn wait_ok(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let ok = self.nodes.iter().filter(|n| n.is_running()).all(|n| {
                let mut c = n.connection();
                ::redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query::<String>(&mut c)
                    .is_ok_and(|i| i.contains("cluster_state:ok"))
            });
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "cluster not ok within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The node id of node `i` (`CLUSTER MYID`).
    pub fn node_id(&self, i: usize) -> String {
        ::redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.nodes[i].connection())
            .expect("cluster myid")
    }

    /// The hash slot of `key`.
    pub fn slot_of(&self, key: &str) -> u16 {
        let any = self.nodes.iter().find(|n| n.is_running()).expect("a node");
        ::redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut any.connection())
            .expect("keyslot")
    }

    /// Moves hash slot `slot` from its master to master `to`, the way
    /// `redis-cli --cluster reshard` does (IMPORTING/MIGRATING, then MIGRATE
    /// of `batch` keys at a time with `pause` between batches, then SETSLOT
    /// NODE everywhere), so that clients meanwhile meet ASK and TRYAGAIN.
    pub fn migrate_slot(&self, slot: u16, to: usize, batch: usize, pause: Duration) {
        let key_probe = self.master_of_slot(slot);
        let from = key_probe;
        assert_ne!(from, to, "slot {slot} is on node {to} already");
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let mut src = self.nodes[from].connection();
        let mut dst = self.nodes[to].connection();
        let setslot = |c: &mut ::redis::Connection, state: &str, id: &str| {
            ::redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(state)
                .arg(id)
                .query::<()>(c)
                .expect("cluster setslot");
        };
        setslot(&mut dst, "IMPORTING", &from_id);
        setslot(&mut src, "MIGRATING", &to_id);
        loop {
            let keys: Vec<String> = ::redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(batch)
                .query(&mut src)
                .expect("getkeysinslot");
            if keys.is_empty() {
                break;
            }
            let mut m = ::redis::cmd("MIGRATE");
            m.arg("127.0.0.1")
                .arg(self.nodes[to].port())
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("REPLACE")
                .arg("KEYS")
                .arg(&keys);
            m.query::<()>(&mut src).expect("migrate");
            std::thread::sleep(pause);
        }
        for i in 0..self.nodes.len() {
            if self.nodes[i].is_running() {
                setslot(&mut self.nodes[i].connection(), "NODE", &to_id);
            }
        }
    }

    /// The index of the node now serving as master for `slot`.
    pub fn master_of_slot(&self, slot: u16) -> usize {
        let any = self
            .nodes
            .iter()
            .find(|n| n.is_running())
            .expect("a running node");
        let mut c = any.connection();
        let slots: ::redis::Value = ::redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut c)
            .expect("cluster slots");
        let ::redis::Value::Array(ranges) = slots else {
            panic!("CLUSTER SLOTS: {slots:?}")
        };
        let slot = i64::from(slot);
        for r in ranges {
            let ::redis::Value::Array(parts) = r else {
                continue;
            };
            let (::redis::Value::Int(lo), ::redis::Value::Int(hi)) = (&parts[0], &parts[1]) else {
                continue;
            };
            if (*lo..=*hi).contains(&slot)
                && let ::redis::Value::Array(master) = &parts[2]
                && let ::redis::Value::Int(port) = master[1]
            {
                return self
                    .nodes
                    .iter()
                    .position(|n| i64::from(n.port()) == port)
                    .expect("a node of ours");
            }
        }
        panic!("no master for slot {slot}");
    }

    /// The index of the node now serving as master for `key`'s slot.
    pub fn master_of(&self, key: &str) -> usize {
        self.master_of_slot(self.slot_of(key))
    }
}
