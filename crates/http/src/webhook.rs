//! Completion webhooks: a [`Deliverer`] posts each event of the store's
//! [`Outbox`] — a session ended, or waits for the user — to one URL,
//! signed the Standard Webhooks way, retrying with backoff until the
//! receiver answers 2xx.
//!
//! Any number of replicas may run a deliverer over one store: each event
//! is claimed with a lease ([`Outbox::claim_events`]), so it goes to one
//! deliverer at a time, and one whose deliverer died is claimed again
//! when the claim expires. Delivery is therefore **at least once**: a
//! receiver drops repeats by `webhook-id`, which is the same on every
//! attempt (the run — session, revision, fence — and what became of it).
//!
//! The request: `POST <url>`, `Content-Type: application/json`, headers
//! `webhook-id`, `webhook-timestamp` (Unix seconds of this attempt) and
//! `webhook-signature` (`v1,` + base64 of HMAC-SHA256 over
//! `<id>.<timestamp>.<body>` with the secret), and the body
//! `{"type": "session.ended" | "session.waiting", "timestamp": <when the
//! transition committed>, "data": {"session_id", "incident_id",
//! "revision", "fence", "status", "exit_reason"}}`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use bytes::Bytes;
use futures::StreamExt as _;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt as _, Full};
use korvus_store::{Backoff, Outbox, OutboxEvent, OutboxKind, OwnerId};
use korvus_tls::{HttpsClient, Roots};
use serde_json::json;
use sha2::Sha256;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info_span, warn, Instrument as _};

/// Deliveries by `outcome` (`delivered`, `failed`): a counter.
pub const WEBHOOK_DELIVERIES: &str = "korvus_webhook_deliveries_total";

/// The secret webhooks are signed with: the bytes of a Standard Webhooks
/// `whsec_<base64>` secret. Its `Debug` does not show it.
#[derive(Clone)]
pub struct WebhookSecret(Vec<u8>);

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(…)")
    }
}

/// Why a webhook could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// The secret is not `whsec_` followed by base64 of at least 24 bytes.
    #[error("the webhook secret must be whsec_ followed by base64 of at least 24 bytes")]
    Secret,
    /// The URL is not an absolute `http` or `https` URL.
    #[error("the webhook URL must be an absolute http:// or https:// URL: {0}")]
    Url(String),
    /// HTTPS could not be set up (no root certificates).
    #[error("HTTPS for webhooks cannot be set up: {0}")]
    Tls(String),
}

impl WebhookSecret {
    /// Parses `whsec_<base64>` (the form Standard Webhooks libraries use).
    ///
    /// # Errors
    /// [`WebhookError::Secret`] for anything else, or fewer than 24 bytes.
    pub fn parse(text: &str) -> Result<Self, WebhookError> {
        let encoded = text
            .trim()
            .strip_prefix("whsec_")
            .ok_or(WebhookError::Secret)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|_| WebhookError::Secret)?;
        if bytes.len() < 24 {
            return Err(WebhookError::Secret);
        }
        Ok(Self(bytes))
    }

    /// The `webhook-signature` of `body` sent as `id` at `timestamp`
    /// (Unix seconds): `v1,` + base64(HMAC-SHA256(`id.timestamp.body`)).
    pub fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        let tag = mac.finalize().into_bytes();
        format!(
            "v1,{}",
            base64::engine::general_purpose::STANDARD.encode(tag)
        )
    }
}

/// Where and how webhooks are sent.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WebhookConfig {
    /// The receiver.
    pub url: String,
    /// The signing secret.
    pub secret: WebhookSecret,
    /// Events claimed per pass, all sent at once (default 8).
    pub batch: u32,
    /// How long a claim holds before another deliverer may take the event
    /// (default 30 s). Keep it longer than `timeout`: a pass sends its
    /// whole batch at once, so every attempt ends (or times out) within
    /// `timeout` of its claim.
    pub claim_ttl: Duration,
    /// How long one attempt may take (default 10 s).
    pub timeout: Duration,
    /// How often the outbox is looked at when it was empty (default 1 s).
    pub poll: Duration,
    /// The first retry delay's ceiling, doubled per attempt; each delay is
    /// jittered between half its ceiling and the ceiling (default 1 s).
    pub backoff: Duration,
    /// The largest ceiling, so the longest retry delay (default 5 min).
    pub max_backoff: Duration,
}

impl WebhookConfig {
    /// Sends to `url`, signed with `secret`, with the default timings.
    pub fn new(url: impl Into<String>, secret: WebhookSecret) -> Self {
        Self {
            url: url.into(),
            secret,
            batch: 8,
            claim_ttl: Duration::from_secs(30),
            timeout: Duration::from_secs(10),
            poll: Duration::from_secs(1),
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(300),
        }
    }

    /// The delay before attempt `attempts + 1`: korvus's one
    /// [`Backoff`] policy, from `backoff` doubling to `max_backoff`,
    /// jittered.
    fn retry_in(&self, attempts: u32) -> Duration {
        // A first delay above the cap is cut to it: the cap is the longest.
        Backoff::new(self.backoff.min(self.max_backoff), self.max_backoff).delay(attempts)
    }
}

/// Delivers the outbox's events to one URL; see the module docs.
pub struct Deliverer {
    outbox: Arc<dyn Outbox>,
    config: WebhookConfig,
    uri: axum::http::Uri,
    claimer: OwnerId,
    client: HttpsClient,
}

impl std::fmt::Debug for Deliverer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deliverer")
            .field("url", &self.config.url)
            .field("claimer", &self.claimer)
            .finish_non_exhaustive()
    }
}

impl Deliverer {
    /// A deliverer of `outbox`'s events as configured.
    ///
    /// # Errors
    /// [`WebhookError::Url`] for a URL that is not absolute http(s);
    /// [`WebhookError::Tls`] when HTTPS has no root certificates.
    pub fn new(outbox: Arc<dyn Outbox>, config: WebhookConfig) -> Result<Self, WebhookError> {
        let uri: axum::http::Uri = config
            .url
            .parse()
            .map_err(|_| WebhookError::Url(config.url.clone()))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(WebhookError::Url(config.url.clone()));
        }
        let client =
            HttpsClient::new(&Roots::native()).map_err(|e| WebhookError::Tls(e.to_string()))?;
        Ok(Self {
            outbox,
            config,
            uri,
            claimer: OwnerId::new(),
            client,
        })
    }

    /// Delivers until `stop` is cancelled: a pass whenever events are due,
    /// a look every `poll` otherwise. Store failures are logged and tried
    /// again at the next look.
    ///
    /// # Cancel safety
    /// Dropping the future stops delivery as cancelling `stop` does: a pass
    /// cut short leaves its claims to expire, and those events are sent again.
    pub async fn run(self, stop: CancellationToken) {
        while !stop.is_cancelled() {
            // A pass cut short by `stop` leaves its claims to expire: the
            // next deliverer sends those events again.
            let pass = tokio::select! {
                () = stop.cancelled() => return,
                pass = self.deliver_due() => pass,
            };
            let full = match pass {
                Ok(n) => n == self.config.batch as usize,
                Err(e) => {
                    warn!(error = %e, "webhook outbox not read; trying again");
                    false
                }
            };
            if full {
                continue;
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.config.poll) => {}
            }
        }
    }

    /// One pass: claims the due events (at most a batch) and attempts them
    /// all at once; returns how many it claimed.
    ///
    /// # Errors
    /// The store's, when the claim fails (a failed attempt is not an
    /// error: the event is due again after its backoff).
    ///
    /// # Cancel safety
    /// Not cancel safe: events it claimed whose outcome it had not recorded
    /// stay claimed until `claim_ttl` passes, then are sent again — also one
    /// the receiver already took (it can drop repeats by `webhook-id`).
    pub async fn deliver_due(&self) -> korvus_store::Result<usize> {
        let events = self
            .outbox
            .claim_events(self.claimer, self.config.batch, self.config.claim_ttl)
            .await?;
        let n = events.len();
        futures::stream::iter(events)
            .for_each_concurrent(None, |event| self.attempt(event))
            .await;
        Ok(n)
    }

    async fn attempt(&self, event: OutboxEvent) {
        let id = event.key.id();
        let span = info_span!("webhook", id = %id, attempt = event.attempts);
        async {
            let outcome = self.send(&id, &event).await;
            let stored = match &outcome {
                Ok(()) => self.outbox.mark_delivered(event.key).await,
                Err(why) => {
                    let retry_in = self.config.retry_in(event.attempts);
                    warn!(error = %why, retry_in_ms = retry_in.as_millis() as u64, "webhook not delivered");
                    self.outbox
                        .mark_failed(event.key, self.claimer, retry_in, why)
                        .await
                }
            };
            let label = if outcome.is_ok() { "delivered" } else { "failed" };
            metrics::counter!(WEBHOOK_DELIVERIES, "outcome" => label).increment(1);
            if let Err(e) = stored {
                // The claim expires and the event is attempted again.
                warn!(error = %e, "webhook outcome not recorded");
            }
        }
        .instrument(span)
        .await;
    }

    /// One POST; `Err` with the reason unless the receiver answered 2xx.
    async fn send(&self, id: &str, event: &OutboxEvent) -> Result<(), String> {
        let body = Bytes::from(payload(event).to_string());
        let timestamp = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let signature = self.config.secret.sign(id, timestamp, &body);
        let request = axum::http::Request::post(self.uri.clone())
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        let answer = tokio::time::timeout(self.config.timeout, async {
            let response = self.client.send(request).await.map_err(|e| e.to_string())?;
            let status = response.status();
            // Read (and drop) the body so the connection can be reused.
            let _ = response.into_body().collect().await;
            Ok::<_, String>(status)
        })
        .await
        .map_err(|_| format!("no answer within {:?}", self.config.timeout))??;
        if answer.is_success() {
            debug!(status = answer.as_u16(), "webhook delivered");
            Ok(())
        } else {
            Err(format!("the receiver answered {answer}"))
        }
    }
}

/// The JSON body of an event.
pub fn payload(event: &OutboxEvent) -> serde_json::Value {
    let kind = match event.key.kind {
        OutboxKind::Ended => "session.ended",
        OutboxKind::Waiting => "session.waiting",
    };
    json!({
        "type": kind,
        "timestamp": event.occurred_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "data": {
            "session_id": event.key.session_id,
            "incident_id": event.incident_id,
            "revision": event.key.revision,
            "fence": event.key.fence,
            "status": event.status,
            "exit_reason": event.exit_reason,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::{WebhookConfig, WebhookSecret};
    use std::time::Duration;

    /// The example of the Standard Webhooks reference libraries.
    #[test]
    fn the_signature_is_the_standard_webhooks_one() {
        let secret = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            secret.sign(
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                b"{\"test\": 2432232314}"
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert_eq!(format!("{secret:?}"), "WebhookSecret(…)");
        for bad in [
            "",
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_***",
            "whsec_c2hvcnQ=",
        ] {
            assert!(WebhookSecret::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn retries_back_off_doubling_up_to_the_cap() {
        let config = WebhookConfig::new("http://127.0.0.1:1/", WebhookSecret(vec![0; 32]));
        let within = |attempt: u32, ceiling: u64| {
            let d = config.retry_in(attempt);
            assert!(
                d >= Duration::from_secs(ceiling) / 2 && d <= Duration::from_secs(ceiling),
                "attempt {attempt}: {d:?}"
            );
        };
        within(1, 1);
        within(4, 8);
        within(12, 300);
        within(u32::MAX, 300);
        // A cap below the first delay is still the longest wait.
        let mut capped = config.clone();
        capped.backoff = Duration::from_secs(10);
        capped.max_backoff = Duration::from_secs(2);
        assert!(capped.retry_in(1) <= Duration::from_secs(2));
    }
}
