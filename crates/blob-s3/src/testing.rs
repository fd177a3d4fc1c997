//! Test fixtures for korvus's own tests and for embedders testing against a
//! real S3-compatible server: the endpoint, a store on a fresh bucket, and
//! teardown. Behind the `testing` feature; never enable it in production.
//!
//! The endpoint comes from `KORVUS_TEST_S3_ENDPOINT` (set by
//! `cargo xtask test`, which runs moto on 127.0.0.1). When it is missing,
//! [`endpoint`] panics if `KORVUS_REQUIRE_SERVICES=1` and otherwise prints
//! why and returns `None`, so a plain `cargo test` can skip.

use std::ops::Deref;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use korvus_blob_s3::{S3BlobStore, S3BlobStoreBuilder, S3Credentials};

/// Distinctive credentials, so tests can look for them in text.
pub const ACCESS_KEY_ID: &str = "AKIDKORVUSTEST0001";
/// Its secret, distinctive so tests can look for it in text.
pub const SECRET_ACCESS_KEY: &str = "korvus-secret-do-not-log-7f3a";

/// The moto endpoint; `None` (after saying why) when it is not configured.
///
/// # Panics
/// When it is not configured but `KORVUS_REQUIRE_SERVICES=1`: under
/// `cargo xtask test` a missing server is a failure, never a skip.
pub fn endpoint() -> Option<String> {
    match std::env::var("KORVUS_TEST_S3_ENDPOINT") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("KORVUS_REQUIRE_SERVICES").as_deref() != Ok("1"),
                "KORVUS_TEST_S3_ENDPOINT is not set but KORVUS_REQUIRE_SERVICES=1: \
                 the S3-compatible server did not start"
            );
            eprintln!(
                "skipped: KORVUS_TEST_S3_ENDPOINT is not set; \
                 `cargo xtask test -p korvus-blob-s3` starts moto and sets it"
            );
            None
        }
    }
}

/// A builder for `bucket` at `endpoint` with the test credentials.
pub fn builder(endpoint: &str, bucket: &str) -> S3BlobStoreBuilder {
    S3BlobStore::builder(
        bucket,
        S3Credentials::fixed(ACCESS_KEY_ID, SECRET_ACCESS_KEY),
    )
    .endpoint_url(endpoint)
    .force_path_style(true)
    .region("us-east-1")
}

/// A store on its own bucket; [`teardown`] empties and removes the bucket.
#[derive(Debug)]
pub struct Fixture {
    /// The store on the fixture's bucket.
    pub store: S3BlobStore,
}

impl Deref for Fixture {
    type Target = S3BlobStore;
    fn deref(&self) -> &S3BlobStore {
        &self.store
    }
}

/// A fresh bucket name (lower case, at most 63 characters).
pub fn fresh_bucket() -> String {
    format!("korvus-{}", uuid::Uuid::now_v7().simple())
}

/// A store with default settings on a fresh bucket.
pub async fn fixture() -> Option<Fixture> {
    fixture_with(|b| b).await
}

/// A store on a fresh bucket, configured further by `configure`.
pub async fn fixture_with(
    configure: impl FnOnce(S3BlobStoreBuilder) -> S3BlobStoreBuilder,
) -> Option<Fixture> {
    let endpoint = endpoint()?;
    let bucket = fresh_bucket();
    let store = configure(builder(&endpoint, &bucket))
        .build()
        .await
        .expect("build the store");
    store
        .client()
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap_or_else(|e| panic!("create bucket {bucket}: {e:?}"));
    Some(Fixture { store })
}

/// Puts objects beside the store's key prefix (outside it, and sharing its
/// text but not its segment) that the store must never list or touch.
pub async fn with_neighbours(fx: Fixture) -> Fixture {
    let prefix = fx.key_prefix().expect("a prefixed store").to_string();
    for neighbour in [
        "outside/contract/x".to_owned(),
        format!("{prefix}x/contract/y"),
        format!("{prefix}-sibling"),
    ] {
        fx.client()
            .put_object()
            .bucket(fx.bucket())
            .key(&neighbour)
            .body(ByteStream::from_static(b"not the store's"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("put neighbour {neighbour}: {e:?}"));
    }
    fx
}

/// Deletes every object (and unfinished upload) in the bucket, then the
/// bucket.
pub async fn teardown(fx: Fixture) {
    let client = fx.client();
    let bucket = fx.bucket();
    let mut token = None;
    loop {
        let page = client
            .list_objects_v2()
            .bucket(bucket)
            .set_continuation_token(token.take())
            .send()
            .await
            .expect("list for teardown");
        // One DeleteObjects per page (up to 1,000 keys) keeps teardown of
        // the big listing cases short.
        let ids: Vec<ObjectIdentifier> = page
            .contents()
            .iter()
            .filter_map(|o| {
                ObjectIdentifier::builder()
                    .set_key(o.key().map(str::to_owned))
                    .build()
                    .ok()
            })
            .collect();
        if !ids.is_empty() {
            let deleted = client
                .delete_objects()
                .bucket(bucket)
                .delete(
                    Delete::builder()
                        .set_objects(Some(ids))
                        .quiet(true)
                        .build()
                        .expect("delete request"),
                )
                .send()
                .await
                .expect("delete for teardown");
            assert!(deleted.errors().is_empty(), "{:?}", deleted.errors());
        }
        match page.next_continuation_token() {
            Some(next) if page.is_truncated() == Some(true) => token = Some(next.to_owned()),
            _ => break,
        }
    }
    let uploads = client
        .list_multipart_uploads()
        .bucket(bucket)
        .send()
        .await
        .expect("list uploads for teardown");
    for upload in uploads.uploads() {
        client
            .abort_multipart_upload()
            .bucket(bucket)
            .key(upload.key().unwrap_or_default())
            .upload_id(upload.upload_id().unwrap_or_default())
            .send()
            .await
            .expect("abort upload for teardown");
    }
    client
        .delete_bucket()
        .bucket(bucket)
        .send()
        .await
        .expect("delete bucket");
}
