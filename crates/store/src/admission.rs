//! What admission needs to know of a session: which runner pool may run
//! it, how urgent it is, which key it is queued and capped under, and the
//! caller's idempotency key ([`Admission`]).
//!
//! A session created (or continued) without a lease is **queued**: running
//! by the status model, unowned and not started
//! ([`Session::is_queued`](crate::Session::is_queued)). Queued rows are
//! never orphans; a manager of the row's pool claims one when it has a
//! free slot, and a run is **started** once its manager recorded
//! ([`Coordination::mark_started`](crate::Coordination::mark_started)) that
//! it is about to call the runner.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The pool a session runs in unless its creator names another.
pub const DEFAULT_POOL: &str = "default";

/// How many sessions wait in a queue
/// ([`Coordination::queue_depth`](crate::Coordination::queue_depth)): in
/// the whole pool, and under one key of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueDepth {
    /// Queued sessions of the pool.
    pub pool: u64,
    /// Queued sessions of the pool under the key asked about.
    pub key: u64,
}

/// How urgent a queued session is: `1` ([`Priority::LOWEST`]) to `9`
/// ([`Priority::HIGHEST`]), [`Priority::NORMAL`] (`5`, the middle) by
/// default. A higher one starts first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u8", into = "u8")]
pub struct Priority(u8);

impl Priority {
    /// The lowest priority, `1`.
    pub const LOWEST: Priority = Priority(1);
    /// The default, `5`.
    pub const NORMAL: Priority = Priority(5);
    /// The highest priority, `9`.
    pub const HIGHEST: Priority = Priority(9);

    /// `n` as a priority, when it is in `1..=9`.
    pub fn new(n: u8) -> Option<Self> {
        (Self::LOWEST.0..=Self::HIGHEST.0)
            .contains(&n)
            .then_some(Self(n))
    }

    /// The number, `1..=9`.
    pub fn get(self) -> u8 {
        self.0
    }
}

impl Default for Priority {
    fn default() -> Self {
        Self::NORMAL
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl TryFrom<u8> for Priority {
    type Error = String;

    fn try_from(n: u8) -> Result<Self, String> {
        Self::new(n).ok_or_else(|| format!("priority {n} is not in 1..=9"))
    }
}

impl From<Priority> for u8 {
    fn from(p: Priority) -> u8 {
        p.0
    }
}

/// A session's place in admission, fixed at create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admission {
    /// The runner pool whose managers may claim it ([`DEFAULT_POOL`]
    /// unless named): managers running different agents are different
    /// pools.
    pub pool: String,
    /// How urgent it is.
    pub priority: Priority,
    /// The key it is queued and capped under (a tenant, say); `None`: its
    /// incident.
    pub queue_key: Option<String>,
    /// The creator's idempotency key: at most one session per incident
    /// has it (a second insert with the key is a `Conflict`).
    pub idempotency_key: Option<String>,
}

impl Default for Admission {
    fn default() -> Self {
        Self {
            pool: DEFAULT_POOL.to_owned(),
            priority: Priority::NORMAL,
            queue_key: None,
            idempotency_key: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_are_one_to_nine_with_five_in_the_middle() {
        assert_eq!(Priority::new(0), None);
        assert_eq!(Priority::new(10), None);
        assert_eq!(Priority::new(5), Some(Priority::default()));
        assert!(Priority::HIGHEST > Priority::NORMAL);
        assert_eq!(Priority::try_from(9), Ok(Priority::HIGHEST));
        assert!(Priority::try_from(11).is_err());
        assert_eq!(u8::from(Priority::LOWEST), 1);
    }
}
