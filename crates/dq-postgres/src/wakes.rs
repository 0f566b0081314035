//! `watch_wakes` on PostgreSQL: a connection of its own that `LISTEN`s on
//! the schema's channel; every `NOTIFY` a store call sent inside its
//! transaction (at its commit) names a topic whose next job became due
//! earlier. The connection is made again after an error, with a backoff.

use std::time::Duration;

use dq_core::WakeFn;
use futures::StreamExt;
use tokio_postgres::AsyncMessage;

/// Listens until dropped, reconnecting as needed.
pub(crate) async fn watch(pg: tokio_postgres::Config, channel: String, on_wake: WakeFn) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match listen(&pg, &channel, &on_wake).await {
            Ok(()) => backoff = Duration::from_millis(100),
            Err(e) => {
                tracing::warn!(error = %e, "postgres: wake-up listener lost; reconnecting");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

async fn listen(
    pg: &tokio_postgres::Config,
    channel: &str,
    on_wake: &WakeFn,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut conn) = pg.connect(tokio_postgres::NoTls).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // The connection's messages: notifications go to the loop below; the
    // stream ends (or fails) with the connection.
    let driver = tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(m) = messages.next().await {
            match m {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx.send(Ok(n.payload().to_string())).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
    });
    let _stop = AbortOnDrop(driver);
    let quoted = channel.replace('"', "\"\"");
    client
        .batch_execute(&format!("LISTEN \"{quoted}\""))
        .await?;
    while let Some(m) = rx.recv().await {
        on_wake(&m?);
    }
    Ok(())
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
