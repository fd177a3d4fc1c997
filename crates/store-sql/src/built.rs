//! What the statements built once per engine are built from: its dialect
//! constants ([`Dialect`]). A leaf: the transitions
//! ([`Statements::new`](crate::transition::Statements::new)) and the
//! heartbeat's statements both build from it.

/// An engine's dialect constants, as the built statements use them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dialect {
    pub(crate) now: &'static str,
    pub(crate) run_key: &'static str,
    pub(crate) texts_4: &'static str,
    pub(crate) share: &'static str,
    pub(crate) incident_text: &'static str,
    pub(crate) skip_locked: &'static str,
    /// Whether the engine runs writes inside `WITH` (PostgreSQL does,
    /// SQLite does not).
    pub(crate) writes_in_with: bool,
}
