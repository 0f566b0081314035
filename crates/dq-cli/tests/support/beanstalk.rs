//! A raw beanstalkd client for tests: bytes out, one reply in (its line,
//! and the body the line announces), with a deadline on each reply.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One connection to a beanstalkd (or `dq serve --beanstalkd`) server.
pub(crate) struct Raw {
    read: BufReader<tokio::net::tcp::OwnedReadHalf>,
    write: tokio::net::tcp::OwnedWriteHalf,
}

/// A reply: its line (without `\r\n`) and the body it announced, if any.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reply {
    pub(crate) line: String,
    pub(crate) body: Option<Vec<u8>>,
}

impl Reply {
    /// The line's words.
    pub(crate) fn words(&self) -> Vec<&str> {
        self.line.split(' ').collect()
    }

    /// The body as text (empty without one).
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(self.body.as_deref().unwrap_or_default()).into_owned()
    }
}

/// Replies whose line is followed by a body of the length it ends with.
fn announces_body(line: &str) -> Option<usize> {
    let words: Vec<&str> = line.split(' ').collect();
    match words.as_slice() {
        ["RESERVED" | "FOUND", _, n] | ["OK", n] => n.parse().ok(),
        _ => None,
    }
}

impl Raw {
    pub(crate) async fn connect(port: u16) -> Raw {
        let s = TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
        s.set_nodelay(true).unwrap();
        let (r, w) = s.into_split();
        Raw {
            read: BufReader::new(r),
            write: w,
        }
    }

    /// Sends bytes as they are.
    pub(crate) async fn send(&mut self, bytes: &[u8]) {
        self.write
            .write_all(bytes)
            .await
            .expect("send to the server");
    }

    /// The next reply, or None when none comes within `within` (or the
    /// server closed the connection: then the line is `<closed>`).
    pub(crate) async fn reply_within(&mut self, within: Duration) -> Option<Reply> {
        tokio::time::timeout(within, self.read_reply()).await.ok()
    }

    async fn read_reply(&mut self) -> Reply {
        let mut line = Vec::new();
        match self.read.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => {
                return Reply {
                    line: "<closed>".into(),
                    body: None,
                };
            }
            Ok(_) => {}
        }
        let line = String::from_utf8_lossy(&line)
            .trim_end_matches("\r\n")
            .to_string();
        let body = match announces_body(&line) {
            Some(n) => {
                let mut b = vec![0u8; n + 2];
                self.read
                    .read_exact(&mut b)
                    .await
                    .expect("the body announced");
                assert!(b.ends_with(b"\r\n"), "{line}: body without its \\r\\n");
                b.truncate(n);
                Some(b)
            }
            None => None,
        };
        Reply { line, body }
    }

    /// Sends one command line (`\r\n` added) and waits up to 10 s for its
    /// reply; panics when none comes.
    pub(crate) async fn cmd(&mut self, line: &str) -> Reply {
        self.send(format!("{line}\r\n").as_bytes()).await;
        self.reply_within(Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("no reply to {line:?} within 10 s"))
    }

    /// A `put` of `body` with these numbers; its reply.
    pub(crate) async fn put(&mut self, pri: u32, delay: u32, ttr: u32, body: &str) -> Reply {
        let msg = format!("put {pri} {delay} {ttr} {}\r\n{body}\r\n", body.len());
        self.send(msg.as_bytes()).await;
        self.reply_within(Duration::from_secs(10))
            .await
            .expect("a reply to put")
    }
}
