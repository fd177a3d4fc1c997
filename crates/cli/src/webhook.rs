//! `korvus serve --webhook URL`: the completion webhooks' deliverer, run
//! beside the API over the same store (any number of replicas may run
//! one: each event is claimed by one at a time).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use korvus_http::webhook::{Deliverer, WebhookConfig, WebhookSecret};
use korvus_store::Outbox;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::compose::Backends;

/// What `--webhook` and `--webhook-secret` asked for, checked before
/// anything starts.
pub(crate) struct Webhook {
    url: String,
    secret: WebhookSecret,
    timeout: Duration,
}

impl Webhook {
    /// `None` without `--webhook`.
    pub(crate) fn parse(
        url: Option<&str>,
        secret: Option<&str>,
        timeout: Duration,
    ) -> Result<Option<Self>> {
        let Some(url) = url else { return Ok(None) };
        let secret = secret.context("--webhook needs --webhook-secret or KORVUS_WEBHOOK_SECRET")?;
        let secret = WebhookSecret::parse(secret).context("invalid --webhook-secret")?;
        Ok(Some(Self {
            url: url.to_owned(),
            secret,
            timeout,
        }))
    }

    /// Starts delivering the events of `backends`' store.
    pub(crate) fn start(self, backends: &Backends) -> Result<Running> {
        let outbox: Arc<dyn Outbox> = Arc::clone(&backends.outbox);
        let mut config = WebhookConfig::new(self.url.clone(), self.secret);
        config.timeout = self.timeout;
        config.claim_ttl = self.timeout * 3;
        let deliverer = Deliverer::new(Arc::clone(&outbox), config).context("invalid --webhook")?;
        println!("korvus serve: webhooks to {}", self.url);
        let stop = CancellationToken::new();
        let task = tokio::spawn(deliverer.run(stop.clone()));
        Ok(Running { outbox, stop, task })
    }
}

/// A running deliverer.
pub(crate) struct Running {
    outbox: Arc<dyn Outbox>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Running {
    /// Gives the deliverer up to `drain` to send what is due (the events of
    /// the runs the shutdown just ended among them), then stops it; what
    /// is left is delivered by another replica or the next start.
    pub(crate) async fn stop(self, drain: Duration) {
        let until = tokio::time::Instant::now() + drain;
        while tokio::time::Instant::now() < until {
            match self.outbox.undelivered().await {
                Ok(0) | Err(_) => break,
                Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        self.stop.cancel();
        // `run` returns at once when cancelled; bounded all the same.
        let mut task = self.task;
        if tokio::time::timeout(Duration::from_secs(1), &mut task)
            .await
            .is_err()
        {
            task.abort();
        }
    }
}
