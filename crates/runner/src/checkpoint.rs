//! [`CheckpointHook`]: what a runner does just before the manager
//! checkpoints its run's scratch dir.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

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
/// Clones share one slot. [`call`](Self::call) and [`clear`](Self::clear)
/// exclude each other: once `clear` returned, no call is in flight and
/// none starts.
#[derive(Clone, Default)]
pub struct CheckpointHook {
    slot: Arc<Mutex<Option<Hook>>>,
}

impl CheckpointHook {
    /// Installs `hook`, replacing any installed before.
    pub fn set(&self, hook: impl Fn() + Send + Sync + 'static) {
        *self.lock() = Some(Box::new(hook));
    }

    /// Removes the hook, waiting for a call in flight to return. Blocks:
    /// from async code, call it on a blocking thread.
    pub fn clear(&self) {
        *self.lock() = None;
    }

    /// Calls the installed hook, if any, and returns whether there was
    /// one. Blocks for as long as the hook runs.
    pub fn call(&self) -> bool {
        let slot = self.lock();
        match slot.as_ref() {
            Some(hook) => {
                hook();
                true
            }
            None => false,
        }
    }

    /// The slot, even after a hook panicked while holding it.
    fn lock(&self) -> MutexGuard<'_, Option<Hook>> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl fmt::Debug for CheckpointHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckpointHook")
            .field("installed", &self.lock().is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn a_hook_runs_until_cleared_and_clones_share_it() {
        let hook = CheckpointHook::default();
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
    fn clear_waits_for_a_call_in_flight() {
        let hook = CheckpointHook::default();
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
        hook.clear();
        assert_eq!(done.load(Ordering::SeqCst), 1, "clear returned mid-call");
        assert!(caller.join().expect("caller"));
    }
}
