//! [`CheckpointHook`]: what a runner does just before the manager
//! checkpoints its run's scratch dir.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

/// The callback a runner installs.
type Hook = Box<dyn Fn() + Send + Sync>;

/// A callback the manager calls, on a blocking thread, just before each
/// checkpoint of the run's scratch dir while the run goes.
///
/// Some of what a run must not lose sits where the checkpoint does not
/// look: an agent keeps its own thread in its private `HOME`, which the
/// harvest skips. A runner that knows such state installs a hook with
/// [`set`](Self::set) once its agent started; the hook copies that state
/// into the scratch dir (where the checkpoint stores it), and the runner
/// removes it with [`clear`](Self::clear) before it writes the same
/// places itself at the run's end. A run whose runner installs nothing is
/// checkpointed as it is.
///
/// A run the manager does not checkpoint gets an inert hook
/// ([`default`](Self::default)): [`set`](Self::set) keeps nothing and
/// [`is_live`](Self::is_live) says so, so a runner can skip preparing one.
/// Clones share one slot. A call never waits for another: one still in
/// flight (a checkpoint given up at its bound while the hook ran on) makes
/// the next a no-op instead of a second blocked thread. Once
/// [`clear`](Self::clear) returned, no call is in flight and none starts.
#[derive(Clone, Default)]
pub struct CheckpointHook {
    slot: Option<Arc<Mutex<Option<Hook>>>>,
}

impl CheckpointHook {
    /// A hook the manager calls before each checkpoint of the run.
    pub fn new() -> Self {
        Self {
            slot: Some(Arc::default()),
        }
    }

    /// Whether the manager calls this hook (it checkpoints the run).
    pub fn is_live(&self) -> bool {
        self.slot.is_some()
    }

    /// Installs `hook`, replacing any installed before; nothing on an
    /// inert hook.
    pub fn set(&self, hook: impl Fn() + Send + Sync + 'static) {
        if let Some(slot) = &self.slot {
            *lock(slot) = Some(Box::new(hook));
        }
    }

    /// Removes the hook, waiting for a call in flight to return. Blocks:
    /// from async code, call it on a blocking thread.
    pub fn clear(&self) {
        if let Some(slot) = &self.slot {
            *lock(slot) = None;
        }
    }

    /// Calls the installed hook, unless none is installed or a call is
    /// still in flight, and returns whether it ran. Blocks for as long as
    /// the hook runs.
    pub fn call(&self) -> bool {
        let Some(slot) = &self.slot else {
            return false;
        };
        let held = match slot.try_lock() {
            Ok(held) => held,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        match held.as_ref() {
            Some(hook) => {
                hook();
                true
            }
            None => false,
        }
    }
}

/// The slot, even after a hook panicked while holding it.
fn lock(slot: &Mutex<Option<Hook>>) -> MutexGuard<'_, Option<Hook>> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

impl fmt::Debug for CheckpointHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.slot {
            None => "inert",
            Some(slot) => match slot.try_lock() {
                Ok(held) if held.is_some() => "installed",
                Ok(_) => "empty",
                Err(_) => "in a call",
            },
        };
        f.debug_struct("CheckpointHook")
            .field("state", &state)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn a_hook_runs_until_cleared_and_clones_share_it() {
        let inert = CheckpointHook::default();
        inert.set(|| panic!("an inert hook keeps nothing"));
        assert!(!inert.is_live() && !inert.call());
        let hook = CheckpointHook::new();
        assert!(!hook.call(), "nothing installed");
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        hook.clone()
            .set(move || _ = counted.fetch_add(1, Ordering::SeqCst));
        assert!(hook.call());
        assert!(hook.clone().call());
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        hook.clear();
        assert!(!hook.call());
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn clear_waits_for_a_call_in_flight_and_a_second_call_does_not() {
        let hook = CheckpointHook::new();
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let done = Arc::new(AtomicUsize::new(0));
        let finished = Arc::clone(&done);
        hook.set(move || {
            let _ = entered_tx.send(());
            std::thread::sleep(std::time::Duration::from_millis(200));
            finished.store(1, Ordering::SeqCst);
        });
        let caller = {
            let hook = hook.clone();
            std::thread::spawn(move || hook.call())
        };
        entered_rx.recv().expect("the hook was entered");
        assert!(
            !hook.call(),
            "a call in flight: the next one returns at once"
        );
        hook.clear();
        assert_eq!(done.load(Ordering::SeqCst), 1, "clear returned mid-call");
        assert!(caller.join().expect("caller"));
    }
}
