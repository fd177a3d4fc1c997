//! Who runs a session and how a run ends: the [`OwnerId`] of a manager
//! incarnation, the [`Lease`] it holds its runs under, and the
//! [`Settlement`] that ends a run.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::model::id_newtype;
use crate::{Counters, ExitReason, NewReport, Session, SessionStatus};

id_newtype!(
    /// Identifies one manager *incarnation*: the owner of the sessions it
    /// runs. Minted fresh every time a manager is built and never reused, so
    /// a restarted process never renews the leases of its dead predecessor.
    OwnerId
);

/// A claim on the sessions an owner runs: who owns them and for how long a
/// renewal keeps them.
///
/// The store writes the expiry itself, from the **database clock** (the
/// memory store from its own clock), as `now + ttl` — for the session row
/// when a session is created, reopened, resumed, claimed or taken over
/// under this lease, and for the owner at every
/// [`heartbeat`](crate::Coordination::heartbeat). A lease whose expiry is not after
/// the store's now has expired: a `ttl` of zero gives a lease that is
/// expired at once, which is how tests make an orphan without waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The owning manager incarnation.
    pub owner: OwnerId,
    /// How long a renewal keeps the sessions (whole milliseconds are kept).
    pub ttl: std::time::Duration,
}

impl Lease {
    /// `ttl` in whole milliseconds, saturating (what backends store).
    pub fn ttl_millis(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
    }
}

/// The outcome written by [`Store::settle_session`](crate::Store::settle_session).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// New status; `ended_at` is set when it is terminal and cleared when it is not.
    pub status: SessionStatus,
    /// Why the run ended.
    pub exit_reason: Option<ExitReason>,
    /// Usage of the run.
    pub counters: Counters,
    /// The fence of the run that settles ([`Session::fence`](crate::Session::fence) as its run
    /// started): the store writes nothing and answers
    /// [`StoreError::Fenced`](crate::StoreError::Fenced) when the row's
    /// fence moved on.
    pub fence: u64,
}

/// The settlement and report row an operator's forced cancel
/// ([`Coordination::force_cancel`](crate::Coordination::force_cancel)) writes for
/// `session`, the row once the cancel moved its fence on: both at that
/// (new) fence, the settlement `cancelled` with the row's counters, the
/// report without a document and with `detail`. Every backend writes
/// exactly these.
pub fn forced_cancel(session: &Session, detail: String) -> (Settlement, NewReport) {
    let fence = session.fence;
    let settlement = Settlement {
        status: SessionStatus::Cancelled,
        exit_reason: Some(ExitReason::CANCELLED),
        counters: session.counters,
        fence,
    };
    let report = NewReport {
        session_id: session.id,
        incident_id: session.incident_id,
        revision: session.revision,
        markdown_key: None,
        manifest_key: None,
        markdown_bytes: 0,
        exit_reason: ExitReason::CANCELLED,
        counters: session.counters,
        detail: Some(detail),
        salvaged_from: None,
        fence,
    };
    (settlement, report)
}
