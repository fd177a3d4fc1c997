//! Macros that turn each contract suite into one `#[tokio::test]` per case,
//! so a backend's test output names every case it passed.

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
            settle_sets_and_clears_ended_at,
            reopen_has_exactly_one_winner,
            reopen_of_a_running_session_is_not_finished,
            context_refs_keep_request_order,
            cross_incident_context_ref_is_refused,
            duplicate_context_ref_is_a_conflict,
            reports_are_unique_per_revision,
            report_for_another_incidents_session_is_refused,
            artifacts_batch_is_all_or_nothing,
            artifacts_are_listed_and_fetched,
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
            hostile_keys_are_refused_before_io,
        ]);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __gen_tests {
    ($suite:ident, $factory:tt, $teardown:tt, [$($case:ident),* $(,)?]) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let subject = $factory.await;
                $crate::$suite::$case(&*subject).await;
                $crate::__teardown!(subject, $teardown);
            }
        )*
    };
}

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
/// The argument is an async expression producing something that dereferences
/// to your store (`Arc<MyStore>`, `Box<dyn Store>`, a fixture guard …); it is
/// evaluated once per case, so each case can get a fresh store. An optional
/// `teardown = |subject| async { … }` runs after each case that passed. The
/// calling crate needs `tokio` (features `macros`, `rt-multi-thread`) as a
/// dev-dependency.
///
/// ```text
/// korvus_testkit::store_contract_tests!(async { std::sync::Arc::new(MyStore::connect().await) });
/// ```
#[macro_export]
macro_rules! store_contract_tests {
    ($factory:expr $(, teardown = $teardown:expr)? $(,)?) => {
        $crate::__with_cases!(store, [$crate::__gen_tests], (store, ($factory), ($($teardown)?),));
    };
}

/// Generates one `#[tokio::test]` per [`TurnLog`](korvus_log::TurnLog) contract
/// case; see [`store_contract_tests!`] for the argument.
#[macro_export]
macro_rules! log_contract_tests {
    ($factory:expr $(, teardown = $teardown:expr)? $(,)?) => {
        $crate::__with_cases!(log, [$crate::__gen_tests], (log, ($factory), ($($teardown)?),));
    };
}

/// Generates one `#[tokio::test]` per [`BlobStore`](korvus_blob::BlobStore)
/// contract case; see [`store_contract_tests!`] for the argument.
#[macro_export]
macro_rules! blob_contract_tests {
    ($factory:expr $(, teardown = $teardown:expr)? $(,)?) => {
        $crate::__with_cases!(blob, [$crate::__gen_tests], (blob, ($factory), ($($teardown)?),));
    };
}
