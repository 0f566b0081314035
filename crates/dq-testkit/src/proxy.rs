//! A TCP proxy on loopback that can be partitioned: [`TcpProxy::blackhole`]
//! stops forwarding in both directions without closing either socket, as a
//! network that drops packets does (the peers see silence, not a reset);
//! [`TcpProxy::resume`] lets the held bytes through, in order, as TCP's
//! retransmissions would once the network is back.
//!
//! Threads, not tasks: a proxy works the same under any test runtime, and
//! a test that blocks a runtime thread does not stall it. Each connection
//! has two pumps (one per direction); a pump reads with a short timeout so
//! that it sees a partition begin and the proxy stop. While partitioned a
//! pump reads nothing (the bytes wait in the kernel's buffers), and a
//! connection accepted meanwhile is not forwarded until [`TcpProxy::resume`].

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often a pump looks at the partition and stop flags while waiting.
const TICK: Duration = Duration::from_millis(20);

#[derive(Default)]
struct State {
    /// Forwarding is stopped (a partition).
    holed: Mutex<bool>,
    changed: Condvar,
    /// The proxy is being dropped.
    stop: AtomicBool,
    /// Every socket of every connection, to close them when dropped.
    sockets: Mutex<Vec<TcpStream>>,
    /// Bytes forwarded, both ways.
    forwarded: AtomicU64,
}

impl State {
    /// Waits while the proxy is partitioned; false when it is stopping.
    fn wait_open(&self) -> bool {
        let mut holed = self.holed.lock().unwrap_or_else(|e| e.into_inner());
        while *holed && !self.stop.load(Ordering::SeqCst) {
            holed = self
                .changed
                .wait_timeout(holed, TICK)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        !self.stop.load(Ordering::SeqCst)
    }
}

/// A loopback TCP proxy to `upstream` that a test can partition; closes
/// everything when dropped.
pub struct TcpProxy {
    addr: SocketAddr,
    state: Arc<State>,
    acceptor: Option<JoinHandle<()>>,
}

impl TcpProxy {
    /// Listens on a free loopback port and forwards each connection to
    /// `127.0.0.1:upstream_port`.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub fn start(upstream_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().expect("the proxy's address");
        let upstream: SocketAddr = ([127, 0, 0, 1], upstream_port).into();
        let state = Arc::new(State::default());
        let st = state.clone();
        let acceptor = std::thread::Builder::new()
            .name(format!("proxy-{}", addr.port()))
            .spawn(move || {
                for client in listener.incoming() {
                    if st.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    let st = st.clone();
                    std::thread::spawn(move || connect(client, upstream, &st));
                }
            })
            .expect("spawn the proxy's thread");
        Self {
            addr,
            state,
            acceptor: Some(acceptor),
        }
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `redis://127.0.0.1:<port>`, for a proxy in front of a Redis.
    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port())
    }

    /// Stops forwarding, both ways, on every connection and on those
    /// accepted from now on; no socket is closed.
    pub fn blackhole(&self) {
        *self.state.holed.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.state.changed.notify_all();
    }

    /// Forwards again, the bytes held during the partition first.
    pub fn resume(&self) {
        *self.state.holed.lock().unwrap_or_else(|e| e.into_inner()) = false;
        self.state.changed.notify_all();
    }

    /// Bytes forwarded so far, both ways: a test can tell that traffic
    /// flows through the proxy.
    pub fn forwarded(&self) -> u64 {
        self.state.forwarded.load(Ordering::SeqCst)
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        self.state.changed.notify_all();
        // Wakes the acceptor, which then sees the stop flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        for s in self
            .state
            .sockets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// Connects an accepted client to the upstream (once the proxy is not
/// partitioned) and runs the two pumps.
fn connect(client: TcpStream, upstream: SocketAddr, st: &Arc<State>) {
    if !st.wait_open() {
        return;
    }
    let Ok(server) = TcpStream::connect(upstream) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let clones = (|| Some((client.try_clone().ok()?, server.try_clone().ok()?)))();
    let Some((client2, server2)) = clones else {
        return;
    };
    {
        let mut sockets = st.sockets.lock().unwrap_or_else(|e| e.into_inner());
        for s in [&client, &server] {
            if let Ok(c) = s.try_clone() {
                sockets.push(c);
            }
        }
    }
    let up = {
        let st = st.clone();
        std::thread::spawn(move || pump(client, server, &st))
    };
    pump(server2, client2, st);
    let _ = up.join();
}

/// Copies `from` to `to` until either closes or the proxy stops, holding
/// back while partitioned.
fn pump(mut from: TcpStream, mut to: TcpStream, st: &State) {
    let _ = from.set_read_timeout(Some(TICK));
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if !st.wait_open() {
            break;
        }
        match from.read(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => {
                // Read just as the partition began: held until it ends.
                if !st.wait_open() {
                    break;
                }
                st.forwarded.fetch_add(n as u64, Ordering::SeqCst);
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// An echo server on loopback: its port.
    fn echo() -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { continue };
                std::thread::spawn(move || {
                    let mut r = c.try_clone().unwrap();
                    let _ = std::io::copy(&mut r, &mut c);
                });
            }
        });
        port
    }

    fn read_exact_within(s: &mut TcpStream, n: usize, limit: Duration) -> Option<Vec<u8>> {
        s.set_read_timeout(Some(limit)).unwrap();
        let mut buf = vec![0u8; n];
        s.read_exact(&mut buf).ok().map(|()| buf)
    }

    #[test]
    fn a_blackholed_proxy_holds_bytes_without_closing_and_delivers_them_on_resume() {
        let proxy = TcpProxy::start(echo());
        let mut c = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        c.write_all(b"ping").unwrap();
        assert_eq!(
            read_exact_within(&mut c, 4, Duration::from_secs(10)).as_deref(),
            Some(&b"ping"[..])
        );

        proxy.blackhole();
        c.write_all(b"held").unwrap();
        // Silence, not a close: the read times out (a closed socket would
        // answer at once with end of file).
        let start = Instant::now();
        c.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut one = [0u8; 1];
        let err = c
            .read(&mut one)
            .expect_err("nothing comes through a partition");
        assert!(
            matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{err:?}"
        );
        assert!(start.elapsed() >= Duration::from_millis(250));
        // A connection made during the partition is silent too.
        let mut late = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        late.write_all(b"late").unwrap();
        assert_eq!(
            read_exact_within(&mut late, 4, Duration::from_millis(300)),
            None
        );

        proxy.resume();
        assert_eq!(
            read_exact_within(&mut c, 4, Duration::from_secs(10)).as_deref(),
            Some(&b"held"[..])
        );
        assert_eq!(
            read_exact_within(&mut late, 4, Duration::from_secs(10)).as_deref(),
            Some(&b"late"[..])
        );
        assert!(proxy.forwarded() >= 24);
    }
}
