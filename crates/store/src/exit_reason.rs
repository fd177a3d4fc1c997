//! The exit reasons the store itself writes or matches on.
//!
//! The vocabulary of exit reasons belongs to the session layer (and the
//! runner seam's reason codes); the store is a lower layer and cannot name
//! those, so the few texts its conditional transitions depend on are
//! defined here. They must equal the runner's codes of the same name.

/// The runner returned to wait for the user. A `running` session with this
/// exit reason is idle (see [`Session::is_idle`](crate::Session::is_idle)).
pub const AWAITING_USER: &str = "awaiting_user";

/// The session was cancelled; written by
/// [`Store::cancel_idle_session`](crate::Store::cancel_idle_session).
pub const CANCELLED: &str = "cancelled";
