//! The owner-level lease of the memory store: [`Leases`], what the SQL
//! backends keep in their `owners` table and the `detached` column.
//!
//! A session row's `lease_expires_at` is kept as the lease the model
//! reports: its claim's own expiry, or its owner's lease when that is
//! later and the owner still holds it. The SQL backends compute it when
//! they read a row; the memory store writes it whenever either part
//! changes (a claim, or a beat of the owner), which comes to the same
//! value.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};

use crate::{OwnerId, Session, SessionId, SessionStatus};

/// How long after its expiry an owner is forgotten.
const FORGET_AFTER: chrono::Duration = chrono::Duration::days(1);

/// The owners' leases and the claims of the rows they own.
#[derive(Debug, Default)]
pub(super) struct Leases {
    /// Each owner's lease expiry, as its last beat wrote it.
    owners: HashMap<OwnerId, DateTime<Utc>>,
    /// The claim of each owned row: its own expiry, and whether its owner
    /// released it.
    claims: HashMap<SessionId, Claim>,
}

#[derive(Debug, Clone, Copy)]
struct Claim {
    expires: DateTime<Utc>,
    detached: bool,
}

impl Claim {
    /// The lease the row reports when its owner's lease is `owner`.
    fn lease(self, owner: Option<DateTime<Utc>>) -> DateTime<Utc> {
        match owner {
            Some(owner) if !self.detached => self.expires.max(owner),
            _ => self.expires,
        }
    }
}

impl Leases {
    /// Records the claim of `session` by `owner` until `expires` (or, for
    /// `None`, that nobody owns it) and answers the lease its row reports.
    pub(super) fn claim(
        &mut self,
        session: SessionId,
        claim: Option<(OwnerId, DateTime<Utc>)>,
    ) -> Option<DateTime<Utc>> {
        let Some((owner, expires)) = claim else {
            self.claims.remove(&session);
            return None;
        };
        let claim = Claim {
            expires,
            detached: false,
        };
        self.claims.insert(session, claim);
        Some(claim.lease(self.owners.get(&owner).copied()))
    }

    /// Forgets a deleted session.
    pub(super) fn forget(&mut self, session: SessionId) {
        self.claims.remove(&session);
    }

    /// A beat of `owner`: its lease now expires at `expires`; of the active
    /// rows it owns, those `listed` are held (and taken back if released),
    /// the others are released once their claim expired by `now`. Answers
    /// the listed runs it holds.
    pub(super) fn beat<'a>(
        &mut self,
        owner: OwnerId,
        expires: DateTime<Utc>,
        now: DateTime<Utc>,
        sessions: impl Iterator<Item = &'a mut Session>,
        listed: &HashSet<(SessionId, u64)>,
    ) -> Vec<(SessionId, u64)> {
        self.owners
            .retain(|o, at| *o == owner || *at + FORGET_AFTER >= now);
        self.owners.insert(owner, expires);
        let mut held = Vec::new();
        for s in sessions {
            if s.owner != Some(owner) || s.status != SessionStatus::Running {
                continue;
            }
            let Some(claim) = self.claims.get_mut(&s.id) else {
                continue;
            };
            if listed.contains(&(s.id, s.fence)) {
                claim.detached = false;
                held.push((s.id, s.fence));
            } else if s.is_active() && !claim.detached && claim.expires <= now {
                claim.detached = true;
            }
            s.lease_expires_at = Some(claim.lease(Some(expires)));
        }
        held
    }
}
