//! Macros that turn each contract suite into one `#[tokio::test]` per case,
//! so a backend's test output names every case it passed.
//!
//! The API is the four public macros. The `__`-prefixed ones are exported
//! only because an expansion in another crate has to reach them through
//! `$crate`; they are internals and may change with any release.

/// Expands, for each case name, `callback!(args…, [case, case, …])`.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_cases {
    (store, [$($cb:tt)+], ($($args:tt)*)) => {
        $($cb)+ ! ($($args)* [
            incidents_round_trip,
            invalid_input_is_refused_and_nothing_written,
            unknown_ids_are_not_found,
            concurrent_creates_get_seqs_one_to_hundred,
            session_insert_rules,
            the_runner_description_round_trips_and_is_bounded,
            concurrent_first_creates_have_one_initial,
            admission_round_trips_and_idempotency_keys_are_unique,
            settle_sets_and_clears_ended_at,
            each_new_run_increments_the_fence,
            a_stale_fence_settles_nothing,
            a_terminal_or_idle_row_refuses_every_write_of_its_run,
            a_settle_retry_racing_an_idle_cancel_leaves_the_cancel_standing,
            a_stale_fence_writes_no_report_row,
            a_stale_fence_writes_no_artifact_rows,
            reopen_has_exactly_one_winner,
            reopen_of_a_running_session_is_not_finished,
            cancel_idle_session_cancels_an_idle_row,
            continue_from_idle_resumes_an_idle_row,
            idle_transitions_refuse_terminal_and_active_rows,
            cancel_and_resume_of_an_idle_row_have_exactly_one_winner,
            context_refs_keep_request_order,
            cross_incident_context_ref_is_refused,
            duplicate_context_ref_is_a_conflict,
            reports_are_unique_per_revision,
            report_for_another_incidents_session_is_refused,
            report_detail_round_trips_and_is_bounded,
            identical_second_report_is_a_conflict_and_keeps_the_first,
            artifacts_batch_is_all_or_nothing,
            every_list_walks_page_by_page,
            a_cursor_of_another_list_is_invalid_input,
            artifacts_are_listed_and_fetched,
            latest_session_artifacts_keep_the_newest_per_path,
            a_checkpoint_is_superseded_then_promoted_in_one_step,
            replace_checkpoints_refuses_what_is_not_its_own_and_writes_nothing,
            a_stale_or_ended_run_replaces_no_checkpoint,
            delete_session_removes_a_finished_session_and_its_rows,
            delete_session_never_reuses_a_seq,
            delete_session_refuses_unfinished_stale_and_inherited_rows,
            a_reopen_racing_a_delete_wins_or_finds_nothing,
        ]);
    };
    (coordination, [$($cb:tt)+], ($($args:tt)*)) => {
        $($cb)+ ! ($($args)* [
            a_cancel_request_names_the_run_it_targets,
            a_lease_is_written_with_each_run_and_renewed_by_its_owner,
            an_expired_lease_is_taken_over_exactly_once,
            an_owners_lease_holds_its_rows_until_a_beat_leaves_them_out,
            a_takeover_keeps_a_pending_cancel_request,
            settle_with_report_keeps_the_dead_runs_row_and_is_all_or_nothing,
            a_queued_row_is_no_orphan_and_a_start_is_recorded_once,
            claims_go_by_priority_then_the_least_busy_key_then_age,
            a_queued_row_is_claimed_exactly_once,
            a_claim_given_back_is_queued_again_in_its_place,
            a_per_key_cap_holds_across_concurrent_claims,
            the_queue_depth_counts_queued_rows_by_pool_and_key,
            the_queue_position_is_an_estimate_by_priority_then_age,
            the_phase_follows_each_transition,
            keys_take_turns_when_runs_do_not_overlap,
            a_run_released_for_resume_waits_unowned_and_is_claimed_once_after_its_backoff,
            a_pending_resume_waits_out_its_backoff_holds_no_slot_and_can_be_cancelled,
            a_cancelled_pending_resume_reopened_is_an_ordinary_run,
            a_run_with_a_pending_cancel_is_not_released_for_resume,
            a_retried_identical_settlement_is_ok,
            a_forced_cancel_is_a_fenced_transition_with_its_report_row,
            a_forced_cancel_keeps_the_runs_own_report_and_refuses_idle_rows,
            a_forced_cancel_racing_the_runs_settle_has_one_winner,
            the_outbox_holds_one_event_per_run_end_or_wait_and_delivers_each_at_least_once,
            kept_output_attaches_to_a_settled_revision_under_a_new_fence,
        ]);
    };
    (budgets, [$($cb:tt)+], ($($args:tt)*)) => {
        $($cb)+ ! ($($args)* [
            a_budget_is_set_read_and_replaced_keeping_its_spend,
            a_spend_counts_against_the_session_and_its_incident_only,
            concurrent_spends_are_all_counted,
            a_budget_of_an_unknown_scope_or_out_of_range_is_refused,
            a_deleted_session_takes_its_budget_along,
        ]);
    };
    (log, [$($cb:tt)+], ($($args:tt)*)) => {
        $($cb)+ ! ($($args)* [
            create_refuses_an_existing_id,
            second_writer_is_already_owned,
            writer_can_reopen_after_close_or_drop,
            read_handle_is_read_only,
            reads_are_contiguous_prefixes,
            reads_never_shrink,
            read_after_append_sees_it,
            revision_changes_on_append_only,
            close_is_idempotent_and_final,
            flush_reports_every_failing_writer,
            stat_knows_header_without_events,
            unknown_log_is_not_found,
            list_names_every_log,
            events_round_trip_exactly,
            export_is_canonical,
            append_at_is_idempotent_and_checks_the_offset,
            an_append_whose_ack_was_lost_is_stored_once,
            transient_append_failures_are_retried,
            failed_appends_are_noted_once_an_append_works,
            a_reopened_writer_appends_after_the_stored_events,
            an_older_writer_epoch_is_refused_and_events_record_theirs,
            an_unclaimed_writer_is_refused_after_a_claim,
            a_fence_refuses_the_appends_of_the_open_older_writer,
            a_fence_older_than_the_newest_claim_is_fenced,
            fencing_a_missing_log_is_not_found,
            a_fence_is_idempotent,
            appends_racing_a_fence_land_before_it_or_are_refused,
            delete_removes_a_log_whole_and_again_is_ok,
            delete_of_a_log_held_by_a_writer_is_refused,
        ]);
    };
    (blob, [$($cb:tt)+], ($($args:tt)*)) => {
        $($cb)+ ! ($($args)* [
            round_trip_keeps_content_type_and_digest,
            head_describes_without_bytes,
            overwrite_replaces,
            empty_object_round_trips,
            delete_then_not_found,
            delete_of_missing_key_is_ok,
            missing_key_is_not_found,
            checksum_mismatch_is_refused,
            list_matches_whole_segments,
            list_of_a_thousand_keys_is_complete_and_sorted,
            list_page_walks_what_list_lists,
            delete_many_removes_every_key,
            hostile_keys_are_refused_before_io,
            put_stream_round_trips_a_large_body,
            put_stream_failing_half_way_stores_nothing,
            put_stream_of_changed_bytes_stores_nothing,
            put_file_stores_the_bytes_and_returns_their_digest,
            put_file_of_a_changed_file_stores_nothing,
            objects_carry_their_last_modified_time,
            deferred_puts_are_visible_and_a_barrier_succeeds,
            get_stream_reads_what_get_reads,
        ]);
    };
}

/// One `#[tokio::test]` per case: skip check, factory, case, teardown.
#[doc(hidden)]
#[macro_export]
macro_rules! __gen_tests {
    ($suite:ident, $factory:tt, $skip:tt, $teardown:tt, [$($case:ident),* $(,)?]) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::__skip_unless!($skip);
                let subject = $factory.await;
                $crate::$suite::$case(&*subject).await;
                $crate::__teardown!(subject, $teardown);
            }
        )*
    };
}

/// Returns from the test early when the `skip_unless` expression is false;
/// nothing when it was not given.
#[doc(hidden)]
#[macro_export]
macro_rules! __skip_unless {
    (()) => {};
    (($skip:expr)) => {
        if !$skip {
            return;
        }
    };
}

/// Runs the `teardown` function on the subject, or drops it.
#[doc(hidden)]
#[macro_export]
macro_rules! __teardown {
    ($subject:ident, ()) => {
        drop($subject);
    };
    ($subject:ident, ($teardown:expr)) => {
        ($teardown)($subject).await;
    };
}

/// A suite module's `run_all`, calling every case in order.
#[doc(hidden)]
#[macro_export]
macro_rules! __gen_run_all {
    ($suite:ident, $trait:path, [$($case:ident),* $(,)?]) => {
        /// Runs every case of this suite, in order, against one subject.
        /// Cases use fresh ids, so they do not interfere with each other or
        /// with existing data.
        pub async fn run_all(subject: &dyn $trait) {
            $( $case(subject).await; )*
        }
    };
}

/// Generates one `#[tokio::test]` per [`Store`](korvus_store::Store) contract case.
///
/// ```text
/// store_contract_tests!(<factory> [, skip_unless = <bool>] [, teardown = <fn>]);
/// ```
///
/// - `<factory>` is an async expression producing something that
///   dereferences to your store (`Arc<MyStore>`, `Box<dyn Store>`, a fixture
///   guard …); it is evaluated once per case, so each case can get a fresh
///   store.
/// - `skip_unless = <bool>` (optional) is evaluated at the start of each
///   case, before the factory. When it is `false` the case returns at once
///   and passes, so a backend that needs a server can be skipped where none
///   is configured. Make the expression say why on stderr, and make it panic
///   instead when `KORVUS_REQUIRE_SERVICES=1` (what `cargo xtask test` sets):
///   there a missing service is a failure, never a skip. korvus's own
///   backends do both in `korvus_store_sql::testing::database_url` and
///   `korvus_blob_s3::testing::endpoint`.
/// - `teardown = |subject| async { … }` (optional) runs after each case that
///   passed; without it the subject is dropped.
///
/// The named arguments may come in either order. The calling crate needs
/// `tokio` (features `macros`, `rt-multi-thread`) as a dev-dependency.
///
/// # Example
///
/// ```
/// use std::sync::Arc;
///
/// use korvus_store::MemoryStore;
///
/// /// Whether the server under test is configured; a real check reads an
/// /// environment variable, prints why it skips, and panics when
/// /// `KORVUS_REQUIRE_SERVICES=1`.
/// fn server_configured() -> bool {
///     std::env::var_os("MY_STORE_URL").is_some()
/// }
///
/// korvus_testkit::store_contract_tests!(
///     async { Arc::new(MemoryStore::new()) },
///     skip_unless = server_configured(),
///     teardown = |store: Arc<MemoryStore>| async move { drop(store) },
/// );
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! store_contract_tests {
    ($factory:expr $(, skip_unless = $skip:expr)? $(, teardown = $teardown:expr)? $(,)?) => {
        $crate::__with_cases!(
            store,
            [$crate::__gen_tests],
            (store, ($factory), ($($skip)?), ($($teardown)?),)
        );
    };
    ($factory:expr, teardown = $teardown:expr, skip_unless = $skip:expr $(,)?) => {
        $crate::store_contract_tests!($factory, skip_unless = $skip, teardown = $teardown);
    };
}

/// Generates one `#[tokio::test]` per
/// [`Coordination`](korvus_store::Coordination) contract case, for a store
/// that implements both [`Store`](korvus_store::Store) and `Coordination`;
/// see [`store_contract_tests!`] for the arguments (factory,
/// `skip_unless`, `teardown`). A store shared by replicas runs both
/// macros.
#[macro_export]
macro_rules! coordination_contract_tests {
    ($factory:expr $(, skip_unless = $skip:expr)? $(, teardown = $teardown:expr)? $(,)?) => {
        $crate::__with_cases!(
            coordination,
            [$crate::__gen_tests],
            (coordination, ($factory), ($($skip)?), ($($teardown)?),)
        );
    };
    ($factory:expr, teardown = $teardown:expr, skip_unless = $skip:expr $(,)?) => {
        $crate::coordination_contract_tests!($factory, skip_unless = $skip, teardown = $teardown);
    };
}

/// Generates one `#[tokio::test]` per [`Budgets`](korvus_store::Budgets)
/// contract case, for a store that implements both
/// [`Store`](korvus_store::Store) and `Budgets`; see
/// [`store_contract_tests!`] for the arguments (factory, `skip_unless`,
/// `teardown`).
#[macro_export]
macro_rules! budgets_contract_tests {
    ($factory:expr $(, skip_unless = $skip:expr)? $(, teardown = $teardown:expr)? $(,)?) => {
        $crate::__with_cases!(
            budgets,
            [$crate::__gen_tests],
            (budgets, ($factory), ($($skip)?), ($($teardown)?),)
        );
    };
    ($factory:expr, teardown = $teardown:expr, skip_unless = $skip:expr $(,)?) => {
        $crate::budgets_contract_tests!($factory, skip_unless = $skip, teardown = $teardown);
    };
}

/// Generates one `#[tokio::test]` per [`TurnLog`](korvus_log::TurnLog) contract
/// case; see [`store_contract_tests!`] for the arguments (factory,
/// `skip_unless`, `teardown`).
#[macro_export]
macro_rules! log_contract_tests {
    ($factory:expr $(, skip_unless = $skip:expr)? $(, teardown = $teardown:expr)? $(,)?) => {
        $crate::__with_cases!(
            log,
            [$crate::__gen_tests],
            (log, ($factory), ($($skip)?), ($($teardown)?),)
        );
    };
    ($factory:expr, teardown = $teardown:expr, skip_unless = $skip:expr $(,)?) => {
        $crate::log_contract_tests!($factory, skip_unless = $skip, teardown = $teardown);
    };
}

/// Generates one `#[tokio::test]` per [`BlobStore`](korvus_blob::BlobStore)
/// contract case; see [`store_contract_tests!`] for the arguments (factory,
/// `skip_unless`, `teardown`).
#[macro_export]
macro_rules! blob_contract_tests {
    ($factory:expr $(, skip_unless = $skip:expr)? $(, teardown = $teardown:expr)? $(,)?) => {
        $crate::__with_cases!(
            blob,
            [$crate::__gen_tests],
            (blob, ($factory), ($($skip)?), ($($teardown)?),)
        );
    };
    ($factory:expr, teardown = $teardown:expr, skip_unless = $skip:expr $(,)?) => {
        $crate::blob_contract_tests!($factory, skip_unless = $skip, teardown = $teardown);
    };
}

#[cfg(test)]
mod tests {
    /// A false `skip_unless` leaves the case before the factory runs, and a
    /// true one runs the case.
    mod skip_unless_false_skips_before_the_factory {
        crate::__gen_tests!(
            store,
            (async {
                unreachable!("the factory of a skipped case ran")
                    as std::sync::Arc<korvus_store::MemoryStore>
            }),
            (false),
            (),
            [incidents_round_trip]
        );
    }

    mod skip_unless_true_runs_the_case {
        crate::__gen_tests!(
            store,
            (async { std::sync::Arc::new(korvus_store::MemoryStore::new()) }),
            (true),
            (),
            [incidents_round_trip]
        );
    }

    /// Every contract case — a public async function of a suite module
    /// whose one parameter is `&dyn <Trait>` — is in its suite's case
    /// list, and every listed case is one: the lists the macros expand
    /// cannot forget a case, nor name one twice.
    #[test]
    fn every_case_is_listed_exactly_once() {
        use std::collections::BTreeSet;
        use std::path::Path;

        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let macros = std::fs::read_to_string(src.join("macros.rs")).unwrap();
        for suite in ["store", "coordination", "log", "blob"] {
            let mut texts = vec![std::fs::read_to_string(src.join(format!("{suite}.rs"))).unwrap()];
            if let Ok(dir) = std::fs::read_dir(src.join(suite)) {
                for entry in dir {
                    texts.push(std::fs::read_to_string(entry.unwrap().path()).unwrap());
                }
            }
            let mut defined = BTreeSet::new();
            for text in &texts {
                for (at, _) in text.match_indices("pub async fn ") {
                    let rest = &text[at + "pub async fn ".len()..];
                    let name = rest.split('(').next().unwrap();
                    let params = rest[name.len() + 1..].split(')').next().unwrap();
                    let params: Vec<&str> = params
                        .split(',')
                        .map(str::trim)
                        .filter(|p| !p.is_empty())
                        .collect();
                    if params.len() == 1 && params[0].contains(": &dyn ") {
                        defined.insert(name.to_owned());
                    }
                }
            }
            let head = format!("    ({suite}, [$($cb:tt)+], ($($args:tt)*)) => {{");
            let list = macros
                .split(&head)
                .nth(1)
                .unwrap_or_else(|| panic!("no case list for {suite}"));
            let list = &list[list.find('[').unwrap() + 1..list.find(']').unwrap()];
            let listed: Vec<String> = list
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect();
            let unique: BTreeSet<String> = listed.iter().cloned().collect();
            assert_eq!(
                unique.len(),
                listed.len(),
                "{suite}: a case is listed twice"
            );
            assert_eq!(
                defined, unique,
                "{suite}: the case list and the cases defined differ"
            );
        }
    }
}
