//! [`Outbox`]: the events a completion webhook delivers, written by the
//! store in the same transaction as the transition they report.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{ExitReason, IncidentId, OwnerId, Result, SessionId, SessionStatus};

/// What an outbox event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxKind {
    /// The run ended: the row became terminal (`completed`, `failed`,
    /// `cancelled`).
    Ended,
    /// The run is waiting for the user or for a raised budget (`running`,
    /// idle: `awaiting_user` or `budget_reached`, the row's exit reason).
    Waiting,
}

impl OutboxKind {
    /// `ended` or `waiting`, as stored.
    pub const fn as_str(self) -> &'static str {
        match self {
            OutboxKind::Ended => "ended",
            OutboxKind::Waiting => "waiting",
        }
    }

    /// The kind stored as `text`, if it is one.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "ended" => Some(OutboxKind::Ended),
            "waiting" => Some(OutboxKind::Waiting),
            _ => None,
        }
    }
}

/// Which event: the run (session, revision, fence) and what became of it.
/// At most one event exists per key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OutboxKey {
    /// The session.
    pub session_id: SessionId,
    /// The run's revision.
    pub revision: u32,
    /// The run's fence.
    pub fence: u64,
    /// Ended or waiting.
    pub kind: OutboxKind,
}

impl OutboxKey {
    /// The event's id, stable for the run and what became of it:
    /// `<session>.<revision>.<fence>.<kind>` — what a webhook sends as
    /// `webhook-id`, so a receiver can drop a repeated delivery.
    pub fn id(&self) -> String {
        format!(
            "{}.{}.{}.{}",
            self.session_id,
            self.revision,
            self.fence,
            self.kind.as_str()
        )
    }
}

/// An outbox event as claimed for delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEvent {
    /// Which event.
    pub key: OutboxKey,
    /// The session's incident.
    pub incident_id: IncidentId,
    /// The row's status at the transition.
    pub status: SessionStatus,
    /// The row's exit reason at the transition.
    pub exit_reason: Option<ExitReason>,
    /// When the transition committed, by the store's clock.
    pub occurred_at: DateTime<Utc>,
    /// Delivery attempts so far, this claim's included.
    pub attempts: u32,
}

/// The events a completion webhook delivers.
///
/// A store writes one event per transition of a session row into a
/// terminal status or into waiting for the user, in the same transaction
/// as the transition (so a refused write, which changes nothing, writes
/// none; and every path that moves a row — settle, settle with report,
/// idle or queued cancel, forced cancel, takeover — writes one).
/// Deliverers on any number of replicas claim events with a lease, so an
/// event whose deliverer died is claimed again once its claim expires:
/// delivery is at least once.
///
/// # Cancel safety
/// Each method is one statement or transaction: a dropped call has
/// committed whole or not at all. Events a dropped `claim_events` claimed
/// are claimed again once `ttl` has passed; a dropped `mark_delivered` or
/// `mark_failed` leaves the claim to expire the same way, so the event is
/// sent again (at least once). `undelivered` only reads. An implementation
/// must write each call in one step, so that a claim always carries its
/// expiry and one nobody finishes lapses.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Outbox: Send + Sync {
    /// Claims up to `limit` undelivered events that are due (never
    /// delivered, not claimed or their claim expired, and past any retry
    /// delay), oldest first, for `claimer` until `ttl` from now (the
    /// store's clock), counting an attempt on each. Of concurrent
    /// claimers, each event goes to one.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn claim_events(
        &self,
        claimer: OwnerId,
        limit: u32,
        ttl: Duration,
    ) -> Result<Vec<OutboxEvent>>;

    /// Marks an event delivered: it is never claimed again. Idempotent;
    /// also when another claimer took the event over meanwhile.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn mark_delivered(&self, key: OutboxKey) -> Result<()>;

    /// Gives back `claimer`'s claim of an undelivered event after a failed
    /// attempt: due again `retry_in` from now, with `error` kept for the
    /// operator. Does nothing when the claim is no longer `claimer`'s.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn mark_failed(
        &self,
        key: OutboxKey,
        claimer: OwnerId,
        retry_in: Duration,
        error: &str,
    ) -> Result<()>;

    /// How many events are not delivered yet.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn undelivered(&self) -> Result<u64>;
}
