//! Integration tests of korvus-blob-s3: the `korvus-testkit` BlobStore
//! contract against moto (with and without a key prefix), and S3-specific
//! behaviour: server-side checksums, paging, awkward keys, multipart, a
//! server that is down, and credentials kept out of text.
//!
//! Tests that need moto read `KORVUS_TEST_S3_ENDPOINT`, which
//! `cargo xtask test` sets after starting it. Without it they fail when
//! `KORVUS_REQUIRE_SERVICES=1` (as under `cargo xtask test`) and are skipped
//! with a message otherwise. Each test gets its own bucket. The stub servers
//! here listen on 127.0.0.1 only.

mod common;

mod contract {
    // Without an endpoint the `return` leaves the generated test early
    // (after `endpoint()` printed why, or panicked under xtask).
    korvus_testkit::blob_contract_tests!(
        match crate::common::fixture().await {
            Some(fx) => std::future::ready(fx),
            None => return,
        },
        teardown = crate::common::teardown
    );
}

mod contract_under_key_prefix {
    korvus_testkit::blob_contract_tests!(
        match crate::common::fixture_with(
            |b| b.key_prefix(korvus_blob::BlobKey::new("tenant a/blobs").unwrap())
        )
        .await
        {
            Some(fx) => std::future::ready(crate::common::with_neighbours(fx).await),
            None => return,
        },
        teardown = crate::common::teardown
    );
}

mod checksum;
mod keys;
mod listing;
mod multipart;
mod secrets;
mod stub;
mod unreachable;
