//! systemd's readiness protocol (`sd_notify`), without libsystemd: when
//! `NOTIFY_SOCKET` is set (a unit of `Type=notify`), `dq serve` sends
//! `READY=1` once it listens, `STATUS=…` on a drain, and `STOPPING=1` when
//! it begins to shut down — one datagram each on that Unix socket.
//!
//! The socket is a path (`/run/systemd/notify`) or, with a leading `@`, a
//! name in Linux's abstract namespace (what systemd passes to services of
//! its own user managers and in containers); both work here, through std's
//! safe `SocketAddrExt::from_abstract_name`.

use std::os::unix::net::UnixDatagram;

/// Where the notifications go, read once at start.
#[derive(Debug, Clone)]
pub(crate) struct Notifier {
    socket: Option<String>,
}

impl Notifier {
    /// The notifier of this process (`NOTIFY_SOCKET`), or one that sends
    /// nothing. The variable is left set: dq starts no child that should
    /// inherit it anyway.
    pub(crate) fn from_env() -> Self {
        Self {
            socket: std::env::var("NOTIFY_SOCKET")
                .ok()
                .filter(|s| !s.is_empty()),
        }
    }

    /// Sends `state` (e.g. `READY=1`); a failure is logged, never fatal:
    /// systemd then times the start out itself and says so.
    pub(crate) fn notify(&self, state: &str) {
        let Some(socket) = &self.socket else {
            return;
        };
        if let Err(e) = send(socket, state) {
            tracing::warn!(socket = %socket, state, error = %e, "cannot notify the service manager");
        }
    }
}

fn send(socket: &str, state: &str) -> std::io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    if let Some(name) = socket.strip_prefix('@') {
        #[cfg(target_os = "linux")]
        {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            sock.send_to_addr(state.as_bytes(), &addr)?;
            return Ok(());
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = name;
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "abstract socket names exist on Linux only",
            ));
        }
    }
    sock.send_to(state.as_bytes(), socket)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_to_a_path_and_to_an_abstract_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let rx = UnixDatagram::bind(&path).unwrap();
        send(path.to_str().unwrap(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");

        #[cfg(target_os = "linux")]
        {
            use std::os::linux::net::SocketAddrExt;
            let name = format!("dq-notify-test-{}", std::process::id());
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
            let rx = UnixDatagram::bind_addr(&addr).unwrap();
            send(&format!("@{name}"), "STOPPING=1").unwrap();
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"STOPPING=1");
        }
        assert!(send(dir.path().join("none").to_str().unwrap(), "X=1").is_err());
    }
}
