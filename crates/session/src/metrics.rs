//! The metrics a `Manager` emits, through the [`metrics`] facade: the
//! embedder installs a recorder (an exporter) or none; the library never
//! does. Names, units and labels are stable and listed in
//! `docs/operations.md`; no label ever carries an id, so every series has
//! few values.

use std::future::Future;
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use metrics::{counter, gauge, histogram};

/// Runs of this process now (gauge).
pub const RUNS_ACTIVE: &str = "korvus_runs_active";
/// Sessions queued in a pool, shared by every replica (gauge; label
/// `pool`, the manager's pool — names an operator configures, so few;
/// set by [`Manager::observe_queue`](crate::Manager::observe_queue)).
pub const SESSIONS_QUEUED: &str = "korvus_sessions_queued";
/// Runs launched by this process (counter).
pub const RUNS_STARTED: &str = "korvus_runs_started_total";
/// How long a run took, launch to settle signal, in seconds (histogram).
pub const RUN_SECONDS: &str = "korvus_run_duration_seconds";
/// How long each phase of a run took, in seconds (histogram; label
/// `phase`: `prepare`, `execute`, `land`, `settle`, `cleanup`).
pub const PHASE_SECONDS: &str = "korvus_run_phase_duration_seconds";
/// Sessions whose outcome this process wrote (counter; label
/// `exit_reason`: a well-known reason or `other`). Waiting for the user
/// (`awaiting_user`) counts too.
pub const SETTLED: &str = "korvus_sessions_settled_total";
/// From a queued session's create to its claim, in seconds (histogram;
/// first runs only: a queued continue keeps no time of queueing).
pub const QUEUE_WAIT_SECONDS: &str = "korvus_queue_wait_seconds";
/// Files a persist phase stored, `report.md` included (counter).
pub const PERSIST_FILES: &str = "korvus_persist_files_total";
/// Bytes a persist phase stored (counter).
pub const PERSIST_BYTES: &str = "korvus_persist_bytes_total";
/// Files a persist phase could not store (counter).
pub const PERSIST_FAILURES: &str = "korvus_persist_failures_total";
/// How long a persist phase took, in seconds (histogram).
pub const PERSIST_SECONDS: &str = "korvus_persist_duration_seconds";
/// Retries of a bounded store write (counter; label `write`: `report`,
/// `settle`, `start`, `enqueue`, `give_back`).
pub const WRITE_RETRIES: &str = "korvus_store_write_retries_total";
/// Heartbeats (counter; label `outcome`: `ok`, `failed`).
pub const HEARTBEATS: &str = "korvus_heartbeats_total";
/// How long a heartbeat took, in seconds (histogram).
pub const HEARTBEAT_SECONDS: &str = "korvus_heartbeat_duration_seconds";
/// Orphaned sessions this process took over and settled (counter).
pub const TAKEOVERS: &str = "korvus_takeovers_total";
/// Salvages of a lost run's scratch dir by this process (counter; label
/// `outcome`: `complete` — everything stored, the dir removed —, `kept` —
/// something could not be stored and the dir is kept).
pub const SALVAGES: &str = "korvus_salvages_total";
/// Orphans this process sent back to their pool to be resumed instead of
/// settling them `owner_lost` (counter).
pub const RESUMES: &str = "korvus_resumes_total";
/// Scratch dirs kept because their run's output or outcome could not be
/// written (counter).
pub const KEPT_DIRS: &str = "korvus_scratch_dirs_kept_total";
/// Files stored by salvages of lost runs' scratch dirs (counter).
pub const SALVAGED_FILES: &str = "korvus_salvaged_files_total";
/// Checkpoints of runs' scratch dirs (counter; label `outcome`: `ok`,
/// `failed` — something was not stored; the next one tries again).
pub const CHECKPOINTS: &str = "korvus_checkpoints_total";
/// Files stored by checkpoints (counter).
pub const CHECKPOINT_FILES: &str = "korvus_checkpoint_files_total";
/// Kept scratch dirs removed by their retention, their output never
/// stored (counter; label `bound`: `age` or `size`).
pub const KEPT_DIRS_REMOVED: &str = "korvus_kept_dirs_removed_total";
/// Cancels of this process's runs, by where they came from (counter;
/// label `via`: `local` — `Manager::cancel` here —, `request` — a cancel
/// made on another replica, seen by the cancel poller).
pub const CANCELS: &str = "korvus_cancels_total";
/// From a cancel reaching a run of this process (`Manager::cancel` here,
/// or the poller seeing a request made elsewhere) to the run's outcome
/// written and its settle signal, in seconds (histogram): how long a
/// cancel takes to end a run, grace and landing included.
pub const CANCEL_SECONDS: &str = "korvus_cancel_duration_seconds";

/// `depth` sessions are queued in `pool`.
pub(crate) fn queued(pool: &str, depth: u64) {
    gauge!(SESSIONS_QUEUED, "pool" => pool.to_owned()).set(depth as f64);
}

/// A run was launched: counted, and active until the returned guard
/// drops (whatever way the run's task ends), which records its duration.
pub(crate) fn run_started() -> RunGauge {
    counter!(RUNS_STARTED).increment(1);
    gauge!(RUNS_ACTIVE).increment(1.0);
    RunGauge {
        started: Instant::now(),
    }
}

/// A run counted in [`RUNS_ACTIVE`] until dropped.
#[derive(Debug)]
pub(crate) struct RunGauge {
    started: Instant,
}

impl Drop for RunGauge {
    fn drop(&mut self) {
        gauge!(RUNS_ACTIVE).decrement(1.0);
        histogram!(RUN_SECONDS).record(self.started.elapsed().as_secs_f64());
    }
}

/// A cancel that reached a run `took` to get its outcome written.
pub(crate) fn cancel_took(took: Duration) {
    histogram!(CANCEL_SECONDS).record(took.as_secs_f64());
}

/// `work`, recording how long the phase took once it is done (timed from
/// this call, made where the phase is awaited). A plain wrapper, not an
/// `async fn`: an `async fn` keeps its argument and the future it awaits
/// in two places of its state, which doubled the room a parked run's
/// runner takes in its task.
pub(crate) fn phase<F: Future>(name: &'static str, work: F) -> impl Future<Output = F::Output> {
    let started = Instant::now();
    work.map(move |out| {
        histogram!(PHASE_SECONDS, "phase" => name).record(started.elapsed().as_secs_f64());
        out
    })
}

/// An outcome was written with this exit reason (any text: labelled as
/// a well-known reason or `other`).
pub(crate) fn settled(exit_reason: Option<&str>) {
    let label = exit_reason.map_or(korvus_runner::exit::OTHER, korvus_runner::exit::label);
    counter!(SETTLED, "exit_reason" => label).increment(1);
}

/// A queued session was claimed after waiting `waited`.
pub(crate) fn queue_waited(waited: Duration) {
    histogram!(QUEUE_WAIT_SECONDS).record(waited.as_secs_f64());
}

/// A persist phase stored `files` files of `bytes` bytes, failed
/// `failed`, in `took`.
pub(crate) fn persisted(files: u64, bytes: u64, failed: u64, took: Duration) {
    counter!(PERSIST_FILES).increment(files);
    counter!(PERSIST_BYTES).increment(bytes);
    counter!(PERSIST_FAILURES).increment(failed);
    histogram!(PERSIST_SECONDS).record(took.as_secs_f64());
}

/// A bounded store write is tried again.
pub(crate) fn write_retried(write: &'static str) {
    counter!(WRITE_RETRIES, "write" => write).increment(1);
}

/// A heartbeat ended after `took`.
pub(crate) fn heartbeat(ok: bool, took: Duration) {
    let outcome = if ok { "ok" } else { "failed" };
    counter!(HEARTBEATS, "outcome" => outcome).increment(1);
    histogram!(HEARTBEAT_SECONDS).record(took.as_secs_f64());
}

/// An orphan was taken over and settled.
pub(crate) fn taken_over() {
    counter!(TAKEOVERS).increment(1);
}

/// A run's scratch dir was kept: its output or outcome is not stored.
pub(crate) fn kept() {
    counter!(KEPT_DIRS).increment(1);
}

/// A checkpoint stored `files`; `failed` when something was not stored.
pub(crate) fn checkpointed(files: u64, failed: bool) {
    let outcome = if failed { "failed" } else { "ok" };
    counter!(CHECKPOINTS, "outcome" => outcome).increment(1);
    counter!(CHECKPOINT_FILES).increment(files);
}

/// A kept dir was removed by its retention (`bound`: `age` or `size`).
pub(crate) fn kept_removed(bound: &'static str) {
    counter!(KEPT_DIRS_REMOVED, "bound" => bound).increment(1);
}

/// A lost run's scratch dir was salvaged: `files` stored, `complete`
/// when nothing failed.
pub(crate) fn salvaged(files: u64, complete: bool) {
    let outcome = if complete { "complete" } else { "kept" };
    counter!(SALVAGES, "outcome" => outcome).increment(1);
    counter!(SALVAGED_FILES).increment(files);
}

/// An orphan went back to its pool to be resumed.
pub(crate) fn resumed() {
    counter!(RESUMES).increment(1);
}

/// A run of this process was cancelled, here or by a request made on
/// another replica.
pub(crate) fn cancelled(via_request: bool) {
    let via = if via_request { "request" } else { "local" };
    counter!(CANCELS, "via" => via).increment(1);
}
