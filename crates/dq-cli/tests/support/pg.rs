//! A private PostgreSQL that a test stops and starts again, for the
//! PostgreSQL store's faults.

use std::sync::mpsc;

use dq_testkit::PgServer;

/// What the server's thread is asked to do.
enum Op {
    /// `pg_ctl stop -m immediate` (SIGQUIT), keeping the data.
    Stop,
    /// Start again on the same port and data.
    Start,
}

/// A [`PgServer`] of its own, owned by a thread of its own: the server is
/// killed when the thread that started it ends (its death signal), so its
/// stops and starts run there, never on a runtime's threads, which come and
/// go. Stopped and removed when dropped.
pub(crate) struct OwnPg {
    ops: mpsc::Sender<(Op, mpsc::Sender<()>)>,
    /// Its TCP port (the same after a restart).
    pub(crate) port: u16,
    /// The database made for the test.
    pub(crate) db: String,
}

impl OwnPg {
    /// Starts a server and makes one database on it (named after `prefix`).
    pub(crate) fn start(prefix: &str) -> OwnPg {
        let (ops, rx) = mpsc::channel::<(Op, mpsc::Sender<()>)>();
        let (made, made_rx) = mpsc::channel();
        let prefix = prefix.to_string();
        std::thread::Builder::new()
            .name("own-postgres".into())
            .spawn(move || {
                let mut pg = PgServer::start();
                let url = pg.fresh_database(&prefix);
                let db = url.rsplit('/').next().unwrap().to_string();
                made.send((pg.port(), db)).unwrap();
                for (op, done) in rx {
                    match op {
                        Op::Stop => pg.stop_immediate(),
                        Op::Start => pg.restart(),
                    }
                    let _ = done.send(());
                }
            })
            .expect("spawn the postgres thread");
        let (port, db) = made_rx.recv().expect("postgres started");
        OwnPg { ops, port, db }
    }

    /// The database's URL, as the superuser `postgres`.
    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{}", self.port, self.db)
    }

    async fn run(&self, op: Op) {
        let (done, wait) = mpsc::channel();
        self.ops.send((op, done)).expect("the postgres thread runs");
        tokio::task::spawn_blocking(move || wait.recv().expect("the postgres thread answers"))
            .await
            .unwrap();
    }

    /// Stops the server at once (SIGQUIT, as `pg_ctl stop -m immediate`).
    pub(crate) async fn stop_immediate(&self) {
        self.run(Op::Stop).await;
    }

    /// Starts the stopped server again, on the same port and data; returns
    /// once it accepts connections.
    pub(crate) async fn start_again(&self) {
        self.run(Op::Start).await;
    }
}
