//! Cancel requests from other replicas: `Manager::cancel` on a replica that
//! does not run the session records a request in the store, naming the
//! fence of the run it targets; the manager that runs it finds the request
//! here and fires the run's cancellation, as a local `cancel` would. It
//! polls every `cancel_poll` period, and at once when the store pushes a
//! wake-up ([`Coordination::cancel_signal`](korvus_store::Coordination::cancel_signal):
//! PostgreSQL `LISTEN`/`NOTIFY`).

use std::sync::{Arc, Weak};

use tracing::{debug, info, warn};

use crate::inner::Inner;

/// Starts the poller of `inner`'s manager, if a tokio runtime is running
/// (a manager built outside one only sees its own cancels). The task ends
/// when the manager is dropped or stops.
pub(crate) fn start(inner: &Arc<Inner>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        debug!("no runtime: cancel requests from other replicas are not polled");
        return;
    };
    let weak = Arc::downgrade(inner);
    let period = inner.config.cancel_poll;
    // Where the store can push (PostgreSQL NOTIFY), a request is polled
    // for at once; the period stays as the fallback.
    let signal = inner.store.cancel_signal();
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            match &signal {
                Some(pushed) => {
                    tokio::select! {
                        _ = tick.tick() => {}
                        () = pushed.notified() => {}
                    }
                }
                None => {
                    tick.tick().await;
                }
            }
            if !poll(&weak).await {
                return;
            }
        }
    });
}

/// One poll; `false` once the manager is gone or stopping.
async fn poll(weak: &Weak<Inner>) -> bool {
    let Some(inner) = weak.upgrade() else {
        return false;
    };
    if inner.is_shutting_down() {
        return false;
    }
    if inner.live.is_empty() {
        return true;
    }
    let requests = match inner.store.cancel_requests().await {
        Ok(requests) => requests,
        Err(e) => {
            warn!(error = %e, "cancel requests not polled; trying again");
            return true;
        }
    };
    for (session, fence) in requests {
        let Some(run) = inner.live.get(session) else {
            continue;
        };
        if run.fence == fence && !run.cancel.is_cancelled() {
            info!(session_id = %session, fence, "cancel requested on another replica; cancelling the run");
            let _ = run.cancelled_at.set(std::time::Instant::now());
            run.cancel.cancel();
            crate::metrics::cancelled(true);
        }
    }
    true
}
