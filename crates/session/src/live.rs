//! The runs of this process: one table, [`LiveRuns`], keyed by session, and
//! the run group that `wait` and `stop` join.
//!
//! Each live run has one [`LiveRun`] entry holding everything other calls
//! need to reach it — its cancellation, its settle signal and its append
//! wake-up — so `cancel`, `await_settled`, `watch` and `reopen` read one
//! map, and `launch` and the supervisor are its only writers.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use korvus_store::{IncidentId, SessionId};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::SessionError;

/// One live run of this process.
///
/// What other calls share with the run itself (its flags, its cancel time
/// and its settle signal) is one allocation, [`RunState`], reached through
/// `Deref`: ten thousand parked runs each keep one entry.
#[derive(Debug, Clone)]
pub(crate) struct LiveRun {
    /// Tells entries of the same session apart, so a run only ever removes
    /// its own entry.
    number: u64,
    pub(crate) incident: IncidentId,
    /// The fence of the run: a cancel request from another replica names it.
    pub(crate) fence: u64,
    /// When the entry was registered: a heartbeat sent before it cannot
    /// know the run.
    pub(crate) registered: std::time::Instant,
    /// The run's cancellation: `cancel` and `stop` fire it.
    pub(crate) cancel: CancellationToken,
    /// Woken after every append to the run's turn log (for `watch`).
    pub(crate) appended: Arc<Notify>,
    state: Arc<RunState>,
}

pub(crate) use crate::live_state::RunState;

impl std::ops::Deref for LiveRun {
    type Target = RunState;

    fn deref(&self) -> &RunState {
        &self.state
    }
}

impl LiveRun {
    /// Fires the settle signal and wakes every watcher.
    pub(crate) fn signal_settled(&self) {
        self.state.set_settled();
        self.appended.notify_waiters();
    }

    /// The run's shared state, for a waiter that outlives this entry.
    pub(crate) fn state(&self) -> Arc<RunState> {
        Arc::clone(&self.state)
    }
}

/// The sessions this process runs, keyed by session id.
///
/// It is never a source of truth — the store's rows are. It answers "is
/// this process running that session?", so `cancel` can reach a local run
/// and `stop` can cancel every one. Cloning gives another view of the same
/// table. Cancellation happens outside the table's lock.
#[derive(Clone, Default)]
pub struct LiveRuns {
    entries: Arc<Mutex<HashMap<SessionId, LiveRun>>>,
    numbers: Arc<AtomicU64>,
    /// Runs of this process that ended without their outcome written, by
    /// session, with their fence (until the session's next run here).
    unsettled: Arc<Mutex<HashMap<SessionId, u64>>>,
}

impl fmt::Debug for LiveRuns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveRuns")
            .field("live", &self.lock().len())
            .finish()
    }
}

impl LiveRuns {
    fn lock(&self) -> MutexGuard<'_, HashMap<SessionId, LiveRun>> {
        // Every operation is one map call: a poisoned map is still consistent.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a new live run of `session` and returns its entry.
    ///
    /// # Errors
    /// [`SessionError::AlreadyLive`] when the session is registered; the
    /// existing entry is left untouched and the returned error carries a
    /// fresh, unregistered entry the caller may still run with.
    pub(crate) fn register(
        &self,
        session: SessionId,
        incident: IncidentId,
        fence: u64,
    ) -> Result<LiveRun, Box<(SessionError, LiveRun)>> {
        let run = LiveRun {
            number: self.numbers.fetch_add(1, Ordering::Relaxed),
            incident,
            fence,
            registered: std::time::Instant::now(),
            cancel: CancellationToken::new(),
            appended: Arc::new(Notify::new()),
            state: Arc::default(),
        };
        let mut entries = self.lock();
        if entries.contains_key(&session) {
            return Err(Box::new((SessionError::AlreadyLive { session }, run)));
        }
        entries.insert(session, run.clone());
        drop(entries);
        self.unsettled().remove(&session);
        Ok(run)
    }

    fn unsettled(&self) -> MutexGuard<'_, HashMap<SessionId, u64>> {
        self.unsettled.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that this process's run of `session` at `fence` ended
    /// without its outcome written.
    pub(crate) fn mark_unsettled(&self, session: SessionId, fence: u64) {
        self.unsettled().insert(session, fence);
    }

    /// Whether this process's last run of `session` ended at `fence`
    /// without its outcome written.
    pub(crate) fn ended_unsettled(&self, session: SessionId, fence: u64) -> bool {
        self.unsettled().get(&session) == Some(&fence)
    }

    /// Removes `run`'s entry of `session`, if it is still there; a second
    /// call, or a call for an entry another run holds, changes nothing.
    pub(crate) fn unregister(&self, session: SessionId, run: &LiveRun) {
        let mut entries = self.lock();
        if entries
            .get(&session)
            .is_some_and(|e| e.number == run.number)
        {
            entries.remove(&session);
        }
    }

    /// Whether no run is live.
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The entry of a live run of `session`.
    pub(crate) fn get(&self, session: SessionId) -> Option<LiveRun> {
        self.lock().get(&session).cloned()
    }

    /// Every live run with its session, in no particular order.
    pub(crate) fn snapshot(&self) -> Vec<(SessionId, LiveRun)> {
        self.lock().iter().map(|(s, r)| (*s, r.clone())).collect()
    }

    /// Whether this process runs `session`.
    pub fn contains(&self, session: SessionId) -> bool {
        self.lock().contains_key(&session)
    }

    /// Cancels a local run; the entry stays until the run settled.
    /// Returns whether the session was live here. The manager's own: a
    /// caller cancels with [`Manager::cancel`](crate::Manager::cancel),
    /// which also settles a queued row and reaches other replicas.
    pub(crate) fn cancel(&self, session: SessionId) -> bool {
        let token = self.lock().get(&session).map(|e| e.cancel.clone());
        token.map(|t| t.cancel()).is_some()
    }

    /// Cancels every local run; returns how many (the manager's stop).
    pub(crate) fn cancel_all(&self) -> usize {
        self.stop_all(false)
    }

    /// Cancels every local run for the manager's stop — or, with
    /// `hand_off`, for its drain (`handoff.rs`) — marking each run no
    /// caller had cancelled first; returns how many.
    pub(crate) fn stop_all(&self, hand_off: bool) -> usize {
        let runs: Vec<(CancellationToken, Arc<RunState>)> = self
            .lock()
            .values()
            .map(|e| (e.cancel.clone(), e.state()))
            .collect();
        for (token, state) in &runs {
            // A run a caller cancelled first stays cancelled by the caller.
            if !token.is_cancelled() {
                state.by_stop.store(true, Ordering::Release);
                state.handoff.store(hand_off, Ordering::Release);
            }
            token.cancel();
        }
        runs.len()
    }

    /// The sessions of `incident` live in this process, sorted.
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

/// Creates in flight plus runs not yet released: `wait` and `stop` wait
/// until the count is back to zero. A counter with a wake-up: joining and
/// leaving are one atomic step each, and only the last to leave wakes the
/// waiters.
#[derive(Debug, Default)]
pub(crate) struct RunGroup {
    state: Arc<GroupState>,
}

#[derive(Debug, Default)]
struct GroupState {
    members: AtomicUsize,
    emptied: Notify,
}

impl RunGroup {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Joins the group; the returned guard leaves it on drop.
    pub(crate) fn join(&self) -> RunGuard {
        self.state.members.fetch_add(1, Ordering::AcqRel);
        RunGuard {
            state: Arc::clone(&self.state),
        }
    }

    /// Members right now.
    pub(crate) fn len(&self) -> usize {
        self.state.members.load(Ordering::Acquire)
    }

    /// Resolves when the group is empty.
    pub(crate) async fn empty(&self) {
        loop {
            // Registered before the check, so a leave between the check
            // and the wait still wakes this waiter.
            let emptied = self.state.emptied.notified();
            tokio::pin!(emptied);
            emptied.as_mut().enable();
            if self.len() == 0 {
                return;
            }
            emptied.await;
        }
    }
}

/// Membership in the [`RunGroup`]: taken when a create or reopen starts,
/// released last in a run.
#[derive(Debug)]
pub(crate) struct RunGuard {
    state: Arc<GroupState>,
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if self.state.members.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.state.emptied.notify_waiters();
        }
    }
}

/// The run slots of one manager: at most `max` runs execute at once; a
/// create that finds none free queues its session instead, and the
/// admission loop claims queued ones as slots free up.
#[derive(Debug, Clone)]
pub(crate) struct Slots {
    state: Arc<SlotState>,
}

#[derive(Debug)]
struct SlotState {
    used: AtomicUsize,
    max: usize,
    freed: Notify,
    /// Whether the pool's queue may hold sessions (this manager queued
    /// one, or its last claim found one): then a create queues too
    /// instead of taking a free slot past them.
    waiting: AtomicBool,
}

impl Slots {
    /// `max` slots (at least one).
    pub(crate) fn new(max: usize) -> Self {
        Self {
            state: Arc::new(SlotState {
                used: AtomicUsize::new(0),
                max: max.max(1),
                freed: Notify::new(),
                waiting: AtomicBool::new(false),
            }),
        }
    }

    /// A free slot for a new session, unless sessions may be queued
    /// ahead of it (then it queues behind them).
    pub(crate) fn try_take_for_new(&self) -> Option<Slot> {
        if self.state.waiting.load(Ordering::Acquire) {
            return None;
        }
        self.try_take()
    }

    /// Records whether the queue may hold sessions (see
    /// [`try_take_for_new`](Slots::try_take_for_new)).
    pub(crate) fn set_waiting(&self, waiting: bool) {
        self.state.waiting.store(waiting, Ordering::Release);
    }

    /// Whether the queue may hold sessions (see
    /// [`set_waiting`](Slots::set_waiting)).
    pub(crate) fn waiting(&self) -> bool {
        self.state.waiting.load(Ordering::Acquire)
    }

    /// A free slot, if there is one.
    pub(crate) fn try_take(&self) -> Option<Slot> {
        self.state
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.state.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot {
                state: Arc::clone(&self.state),
                wake: true,
            })
    }

    /// Slots in use now.
    pub(crate) fn in_use(&self) -> usize {
        self.state.used.load(Ordering::Acquire)
    }

    /// Resolves once a slot is freed after this call.
    pub(crate) async fn freed(&self) {
        self.state.freed.notified().await;
    }

    /// Wakes the admission loop (work may have been queued).
    pub(crate) fn nudge(&self) {
        self.state.freed.notify_one();
    }
}

/// One run's slot: freed on drop, which wakes the admission loop.
#[derive(Debug)]
pub(crate) struct Slot {
    state: Arc<SlotState>,
    /// Whether freeing it wakes the admission loop.
    wake: bool,
}

impl Slot {
    /// Frees the slot without waking the admission loop: for the loop
    /// itself, when it found nothing to claim (a wake-up would only make
    /// it look again at once).
    pub(crate) fn give_back(mut self) {
        self.wake = false;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.state.used.fetch_sub(1, Ordering::AcqRel);
        if self.wake {
            self.state.freed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_taken_up_to_the_cap_and_freed_on_drop() {
        let slots = Slots::new(2);
        let (a, b) = (slots.try_take().unwrap(), slots.try_take().unwrap());
        assert!(slots.try_take().is_none());
        assert_eq!(slots.in_use(), 2);
        drop(a);
        assert_eq!(slots.in_use(), 1);
        assert!(slots.try_take().is_some());
        drop(b);
        assert_eq!(
            Slots::new(0).try_take().map(|_| ()),
            Some(()),
            "at least one"
        );
    }

    #[tokio::test]
    async fn the_group_is_empty_once_its_last_member_leaves() {
        let group = RunGroup::new();
        group.empty().await;
        let (a, b) = (group.join(), group.join());
        assert_eq!(group.len(), 2);
        let waiting = tokio::spawn({
            let state = Arc::clone(&group.state);
            async move { RunGroup { state }.empty().await }
        });
        drop(a);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one member is left");
        drop(b);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("woken by the last leave")
            .unwrap();
        assert_eq!(group.len(), 0);
    }

    #[test]
    fn duplicate_register_keeps_the_existing_entry() {
        let live = LiveRuns::default();
        let (s, i) = (SessionId::new(), IncidentId::new());
        let first = live.register(s, i, 1).unwrap();
        let (err, second) = *live.register(s, i, 1).unwrap_err();
        assert!(matches!(err, SessionError::AlreadyLive { .. }));
        assert!(live.cancel(s));
        assert!(first.cancel.is_cancelled());
        assert!(!second.cancel.is_cancelled());
        assert!(live.contains(s), "cancel leaves the entry");
        // The loser's entry was never registered: removing it changes nothing.
        live.unregister(s, &second);
        assert!(live.contains(s));
        live.unregister(s, &first);
        live.unregister(s, &first);
        assert!(!live.cancel(s));
    }

    #[test]
    fn live_count_and_cancel_all() {
        let live = LiveRuns::default();
        let (i, j) = (IncidentId::new(), IncidentId::new());
        let runs: Vec<LiveRun> = (0..3)
            .map(|_| live.register(SessionId::new(), i, 1).unwrap())
            .collect();
        let other = live.register(SessionId::new(), j, 1).unwrap();
        assert_eq!(live.count(i), 3);
        assert_eq!(live.live(i).len(), 3);
        assert_eq!(live.cancel_all(), 4);
        assert!(runs.iter().chain([&other]).all(|r| r.cancel.is_cancelled()));
    }

    #[tokio::test]
    async fn the_run_group_is_empty_when_every_guard_is_dropped() {
        let group = RunGroup::new();
        let (a, b) = (group.join(), group.join());
        assert_eq!(group.len(), 2);
        drop(a);
        drop(b);
        group.empty().await;
        assert_eq!(group.len(), 0);
    }
}
