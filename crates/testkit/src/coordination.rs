//! The [`Coordination`](korvus_store::Coordination) contract: what a store
//! must honour to be shared by replicas — cancel requests naming the run
//! they target, leases renewed by their owner (one lease per owner, not per row) and taken over exactly once,
//! settle with report, forced cancel, kept output attached to a settled
//! session. Every case is a public async function
//! taking `&dyn CoordinatedStore` (it also uses the rows of
//! [`Store`](korvus_store::Store)); [`run_all`] runs them in order; the
//! [`coordination_contract_tests!`](crate::coordination_contract_tests)
//! macro makes one test per case.
//!
//! The cases live in one file per topic (cancel requests, leases and
//! takeover, the owner-level lease, forced cancel and retried settlements, the queue, resumes, the webhook outbox) and are re-exported
//! here; they share the fixtures of the [`store`](crate::store) suite.

mod cancel;
mod forced;
mod leases;
mod outbox;
mod owners;
mod queue;
mod resume;
mod salvage;

use korvus_store::{CoordinatedStore, Outbox};

/// A store replicas share that also keeps the webhook outbox: what the
/// coordination suite runs against (most cases need only its
/// [`CoordinatedStore`] side; the outbox cases need both). Implemented for
/// every type that implements both.
pub trait SharedStore: CoordinatedStore + Outbox {}

impl<T: CoordinatedStore + Outbox + ?Sized> SharedStore for T {}

pub use self::cancel::a_cancel_request_names_the_run_it_targets;
pub use self::forced::{
    a_forced_cancel_is_a_fenced_transition_with_its_report_row,
    a_forced_cancel_keeps_the_runs_own_report_and_refuses_idle_rows,
    a_forced_cancel_racing_the_runs_settle_has_one_winner, a_retried_identical_settlement_is_ok,
};
pub use self::leases::{
    a_lease_is_written_with_each_run_and_renewed_by_its_owner,
    a_queued_row_is_no_orphan_and_a_start_is_recorded_once,
    a_takeover_keeps_a_pending_cancel_request, an_expired_lease_is_taken_over_exactly_once,
    settle_with_report_keeps_the_dead_runs_row_and_is_all_or_nothing,
};
pub use self::outbox::the_outbox_holds_one_event_per_run_end_or_wait_and_delivers_each_at_least_once;
pub use self::owners::an_owners_lease_holds_its_rows_until_a_beat_leaves_them_out;
pub use self::queue::{
    a_claim_given_back_is_queued_again_in_its_place, a_per_key_cap_holds_across_concurrent_claims,
    a_queued_row_is_claimed_exactly_once, claims_go_by_priority_then_the_least_busy_key_then_age,
    keys_take_turns_when_runs_do_not_overlap, the_phase_follows_each_transition,
    the_queue_depth_counts_queued_rows_by_pool_and_key,
    the_queue_position_is_an_estimate_by_priority_then_age,
};
pub use self::resume::{
    a_cancelled_pending_resume_reopened_is_an_ordinary_run,
    a_pending_resume_waits_out_its_backoff_holds_no_slot_and_can_be_cancelled,
    a_run_released_for_resume_waits_unowned_and_is_claimed_once_after_its_backoff,
    a_run_with_a_pending_cancel_is_not_released_for_resume,
};
pub use self::salvage::kept_output_attaches_to_a_settled_revision_under_a_new_fence;

crate::__with_cases!(
    coordination,
    [crate::__gen_run_all],
    (coordination, SharedStore,)
);
