//! Large objects go up in parts; a failed multipart upload is aborted.

use bytes::Bytes;
use korvus_blob::{BlobBody, BlobError, BlobKey, BlobStore, PutOptions, Sha256Digest};
use korvus_blob_s3::sdk::RetryConfig;

use crate::common::{self, builder};
use crate::stub::{Parts, Stub};

/// Bytes that differ per position, so a part put in the wrong place or
/// twice shows up.
fn patterned(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8)
        .collect::<Vec<u8>>()
        .into()
}

/// A 40 MiB object crosses the default 16 MiB threshold, goes up as five
/// 8 MiB parts, and comes back identical with its content type and digest.
#[tokio::test]
async fn a_40_mib_object_round_trips_via_multipart() {
    let Some(fx) = common::fixture().await else {
        return;
    };
    let key = BlobKey::new("archives/workspace.tar.gz").unwrap();
    let body = patterned(40 * 1024 * 1024);
    let digest = Sha256Digest::of(&body);
    fx.put(
        &key,
        body.clone(),
        PutOptions::new("application/gzip", digest),
    )
    .await
    .unwrap();

    // A multipart ETag ends in `-<number of parts>`.
    let raw = fx
        .client()
        .head_object()
        .bucket(fx.bucket())
        .key(key.as_str())
        .send()
        .await
        .unwrap();
    assert!(
        raw.e_tag()
            .is_some_and(|t| t.trim_matches('"').ends_with("-5")),
        "not a 5-part upload: {:?}",
        raw.e_tag()
    );
    let uploads = fx
        .client()
        .list_multipart_uploads()
        .bucket(fx.bucket())
        .send()
        .await
        .unwrap();
    assert!(uploads.uploads().is_empty(), "an upload was left open");

    let meta = fx.head(&key).await.unwrap();
    assert_eq!(meta.size, body.len() as u64);
    assert_eq!(meta.sha256, Some(digest));
    assert_eq!(meta.content_type.as_deref(), Some("application/gzip"));
    let blob = fx.get(&key).await.unwrap();
    assert!(blob.bytes == body, "bytes differ");
    assert_eq!(blob.meta, meta);
    common::teardown(fx).await;
}

/// A wrong digest on a multipart-sized object is refused before the upload
/// starts: S3 checks parts, not the whole object, so the store checks it.
#[tokio::test]
async fn multipart_put_with_a_wrong_digest_is_refused_and_sends_nothing() {
    let stub = Stub::start(Parts::Accept).await;
    let store = builder(&stub.endpoint, "bucket")
        .verify_sha256_locally(false)
        .multipart_threshold(1024)
        .build()
        .await
        .unwrap();
    let key = BlobKey::new("big").unwrap();
    let result = store
        .put(
            &key,
            patterned(4096),
            PutOptions::for_bytes("x/y", b"other"),
        )
        .await;
    assert!(
        matches!(result, Err(BlobError::ChecksumMismatch { .. })),
        "{result:?}"
    );
    assert!(stub.seen().is_empty(), "{:?}", stub.seen());
}

/// When a part fails, the upload is aborted and the part's error returned.
#[tokio::test]
async fn a_failed_multipart_upload_is_aborted() {
    let stub = Stub::start(Parts::Fail).await;
    let store = builder(&stub.endpoint, "bucket")
        .multipart_threshold(1024)
        .part_size(0) // raised to the 5 MiB minimum
        .part_concurrency(1)
        .retry(RetryConfig::disabled())
        .build()
        .await
        .unwrap();
    let key = BlobKey::new("big").unwrap();
    let body = patterned(6 * 1024 * 1024);
    let result = store
        .put(&key, body.clone(), PutOptions::for_bytes("x/y", &body))
        .await;
    assert!(
        matches!(result, Err(BlobError::Backend { .. })),
        "{result:?}"
    );
    let seen: Vec<(String, String)> = stub
        .seen()
        .into_iter()
        .map(|s| {
            (
                s.method,
                s.target.split('?').nth(1).unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[0].0, "POST");
    assert!(seen[0].1.starts_with("uploads"), "{seen:?}");
    assert_eq!(seen[1].0, "PUT");
    assert!(seen[1].1.contains("partNumber=1"), "{seen:?}");
    assert_eq!(seen[2].0, "DELETE");
    assert!(seen[2].1.contains("uploadId=stub-upload"), "{seen:?}");
}

/// With a low threshold, an object whose last part is short round-trips
/// in three parts, and an empty object still goes up in one request.
#[tokio::test]
async fn uneven_parts_and_empty_objects_under_a_low_threshold() {
    let Some(fx) = common::fixture_with(|b| {
        b.multipart_threshold(0)
            .part_size(korvus_blob_s3::MIN_PART_SIZE)
            .part_concurrency(2)
    })
    .await
    else {
        return;
    };
    let key = BlobKey::new("uneven.bin").unwrap();
    let body = patterned(2 * korvus_blob_s3::MIN_PART_SIZE as usize + 12_345);
    fx.put(&key, body.clone(), PutOptions::for_bytes("x/y", &body))
        .await
        .unwrap();
    let raw = fx
        .client()
        .head_object()
        .bucket(fx.bucket())
        .key(key.as_str())
        .send()
        .await
        .unwrap();
    assert!(
        raw.e_tag()
            .is_some_and(|t| t.trim_matches('"').ends_with("-3")),
        "not a 3-part upload: {:?}",
        raw.e_tag()
    );
    assert!(fx.get(&key).await.unwrap().bytes == body, "bytes differ");

    let empty = BlobKey::new("empty").unwrap();
    fx.put(&empty, Bytes::new(), PutOptions::for_bytes("x/y", b""))
        .await
        .unwrap();
    assert_eq!(fx.head(&empty).await.unwrap().size, 0);
    common::teardown(fx).await;
}

/// Whether an upload is still open in the fixture's bucket.
async fn open_uploads(fx: &common::Fixture) -> usize {
    fx.client()
        .list_multipart_uploads()
        .bucket(fx.bucket())
        .send()
        .await
        .unwrap()
        .uploads()
        .len()
}

/// A streamed body goes up in parts read one at a time from the reader,
/// and comes back identical; no upload is left open.
#[tokio::test]
async fn a_streamed_body_goes_up_in_parts() {
    let Some(fx) = common::fixture_with(|b| {
        b.multipart_threshold(1024)
            .part_size(korvus_blob_s3::MIN_PART_SIZE)
    })
    .await
    else {
        return;
    };
    let key = BlobKey::new("data/streamed.bin").unwrap();
    let body = patterned(12 * 1024 * 1024);
    let options = PutOptions::for_bytes("application/octet-stream", &body);
    let reader = std::io::Cursor::new(body.clone());
    fx.put_stream(&key, BlobBody::new(reader, body.len() as u64), options)
        .await
        .unwrap();
    let raw = fx
        .client()
        .head_object()
        .bucket(fx.bucket())
        .key(key.as_str())
        .send()
        .await
        .unwrap();
    assert!(
        raw.e_tag()
            .is_some_and(|t| t.trim_matches('"').ends_with("-3")),
        "not a 3-part upload: {:?}",
        raw.e_tag()
    );
    assert_eq!(open_uploads(&fx).await, 0, "an upload was left open");
    let blob = fx.get(&key).await.unwrap();
    assert!(blob.bytes == body, "bytes differ");
    assert_eq!(blob.meta.sha256, Some(Sha256Digest::of(&body)));
    common::teardown(fx).await;
}

/// A streamed body that turns out not to match its digest after every
/// part went up is aborted: nothing is stored and no upload stays open.
#[tokio::test]
async fn a_streamed_body_with_a_wrong_digest_is_aborted() {
    let Some(fx) = common::fixture_with(|b| {
        b.multipart_threshold(1024)
            .part_size(korvus_blob_s3::MIN_PART_SIZE)
    })
    .await
    else {
        return;
    };
    let key = BlobKey::new("data/changed.bin").unwrap();
    let body = patterned(6 * 1024 * 1024);
    let options = PutOptions::for_bytes("application/octet-stream", b"what was hashed before");
    let reader = std::io::Cursor::new(body.clone());
    let result = fx
        .put_stream(&key, BlobBody::new(reader, body.len() as u64), options)
        .await;
    assert!(
        matches!(result, Err(BlobError::ChecksumMismatch { .. })),
        "{result:?}"
    );
    assert!(matches!(
        fx.head(&key).await,
        Err(BlobError::NotFound { .. })
    ));
    assert_eq!(open_uploads(&fx).await, 0, "an upload was left open");
    common::teardown(fx).await;
}
