//! [`IncidentRegistry`]: which sessions this process is running.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use korvus_store::{IncidentId, SessionId};

use crate::SessionError;

/// A function that cancels one run.
pub type CancelFn = Arc<dyn Fn() + Send + Sync>;

#[derive(Clone)]
struct Entry {
    incident: IncidentId,
    cancel: CancelFn,
}

/// A per-process cache of live runs: session → (incident, cancel function).
///
/// It is never a source of truth — the store's rows are. It answers "is this
/// process running that session?" so `cancel` can reach a local run and
/// `stop` can cancel every one. Cancel functions are always called outside
/// the lock, so a cancel function may call back into the registry.
#[derive(Clone, Default)]
pub struct IncidentRegistry {
    entries: Arc<Mutex<HashMap<SessionId, Entry>>>,
}

impl fmt::Debug for IncidentRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IncidentRegistry")
            .field("live", &self.lock().len())
            .finish()
    }
}

impl IncidentRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<SessionId, Entry>> {
        // Every operation is one map call: a poisoned map is still consistent.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a live run.
    ///
    /// # Errors
    /// [`SessionError::AlreadyLive`] when the session is registered; the
    /// existing entry is left untouched.
    pub fn register(
        &self,
        session: SessionId,
        incident: IncidentId,
        cancel: CancelFn,
    ) -> Result<(), SessionError> {
        let mut entries = self.lock();
        if entries.contains_key(&session) {
            return Err(SessionError::AlreadyLive { session });
        }
        entries.insert(session, Entry { incident, cancel });
        Ok(())
    }

    /// Removes a run; removing an unknown session is fine (idempotent).
    pub fn unregister(&self, session: SessionId) {
        self.lock().remove(&session);
    }

    /// Whether this process runs `session`.
    pub fn contains(&self, session: SessionId) -> bool {
        self.lock().contains_key(&session)
    }

    /// Cancels a local run; the entry stays until the run deregisters.
    /// Returns whether the session was live here.
    pub fn cancel(&self, session: SessionId) -> bool {
        let cancel = self.lock().get(&session).map(|e| Arc::clone(&e.cancel));
        match cancel {
            Some(cancel) => {
                cancel();
                true
            }
            None => false,
        }
    }

    /// Cancels every local run (outside the lock); returns how many.
    pub fn cancel_all(&self) -> usize {
        let cancels: Vec<CancelFn> = self
            .lock()
            .values()
            .map(|e| Arc::clone(&e.cancel))
            .collect();
        for cancel in &cancels {
            cancel();
        }
        cancels.len()
    }

    /// The sessions of `incident` live in this process.
    pub fn live(&self, incident: IncidentId) -> Vec<SessionId> {
        let mut live: Vec<SessionId> = self
            .lock()
            .iter()
            .filter(|(_, e)| e.incident == incident)
            .map(|(s, _)| *s)
            .collect();
        live.sort();
        live
    }

    /// How many sessions of `incident` are live in this process.
    pub fn count(&self, incident: IncidentId) -> usize {
        self.lock()
            .values()
            .filter(|e| e.incident == incident)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn counter() -> (Arc<AtomicUsize>, CancelFn) {
        let n = Arc::new(AtomicUsize::new(0));
        let c = Arc::clone(&n);
        (
            n,
            Arc::new(move || {
                c.fetch_add(1, Ordering::SeqCst);
            }),
        )
    }

    #[test]
    fn duplicate_register_keeps_the_existing_entry() {
        let reg = IncidentRegistry::new();
        let (s, i) = (SessionId::new(), IncidentId::new());
        let (first, f) = counter();
        let (second, g) = counter();
        reg.register(s, i, f).unwrap();
        assert!(matches!(
            reg.register(s, i, g),
            Err(SessionError::AlreadyLive { .. })
        ));
        assert!(reg.cancel(s));
        assert_eq!(first.load(Ordering::SeqCst), 1);
        assert_eq!(second.load(Ordering::SeqCst), 0);
        assert!(reg.contains(s), "cancel leaves the entry");
        reg.unregister(s);
        reg.unregister(s);
        assert!(!reg.cancel(s));
    }

    #[test]
    fn live_count_and_cancel_all() {
        let reg = IncidentRegistry::new();
        let (i, j) = (IncidentId::new(), IncidentId::new());
        let (n, f) = counter();
        let sessions: Vec<SessionId> = (0..3).map(|_| SessionId::new()).collect();
        for s in &sessions {
            reg.register(*s, i, Arc::clone(&f)).unwrap();
        }
        reg.register(SessionId::new(), j, Arc::clone(&f)).unwrap();
        assert_eq!(reg.count(i), 3);
        assert_eq!(reg.live(i).len(), 3);
        assert_eq!(reg.cancel_all(), 4);
        assert_eq!(n.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn a_cancel_function_may_reenter_the_registry() {
        let reg = IncidentRegistry::new();
        let s = SessionId::new();
        let inner = reg.clone();
        reg.register(s, IncidentId::new(), Arc::new(move || inner.unregister(s)))
            .unwrap();
        assert!(reg.cancel(s), "no deadlock: called outside the lock");
        assert!(!reg.contains(s));
    }
}
