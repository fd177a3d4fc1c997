//! The writer's side of a `LogHandle`: where its next append starts, the
//! events it could not store, and the epoch it claimed.

use crate::Event;

/// The writer's side of a handle: appends are serialised through it.
#[derive(Debug, Default)]
pub(super) struct Writing {
    /// Where the next append starts; `None` until asked of the backend, and
    /// again after an append whose outcome is unknown.
    pub(super) next: Option<u64>,
    /// Events of failed appends not yet noted in the log.
    pub(super) lost: u64,
    /// Why the last of them failed.
    pub(super) reason: String,
    /// The epoch this writer claimed, stamped on every event it appends.
    pub(super) epoch: Option<u64>,
}

impl Writing {
    /// `events` stamped with this writer's epoch, if it claimed one.
    pub(super) fn stamped<'a>(&self, events: &'a [Event]) -> std::borrow::Cow<'a, [Event]> {
        match self.epoch {
            None => events.into(),
            Some(epoch) => events
                .iter()
                .map(|e| Event {
                    epoch: Some(epoch),
                    ..e.clone()
                })
                .collect::<Vec<_>>()
                .into(),
        }
    }
}
