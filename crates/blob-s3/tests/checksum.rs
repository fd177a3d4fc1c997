//! The SHA-256 given to `put` is the one the server checks, and a server's
//! refusal is `ChecksumMismatch`.

use aws_sdk_s3::types::ChecksumMode;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::Bytes;
use korvus_blob::{BlobError, BlobKey, BlobStore, PutOptions, Sha256Digest};

use crate::common::{self, builder};
use crate::stub::{Parts, Stub};

/// A server that verifies `x-amz-checksum-sha256` (as AWS S3 does) refuses a
/// wrong digest, and `put` reports it as `ChecksumMismatch`; the local check
/// is off, so only the server can have caught it.
#[tokio::test]
async fn server_refusal_of_a_wrong_sha256_is_checksum_mismatch() {
    let stub = Stub::start(Parts::Accept).await;
    let store = builder(&stub.endpoint, "bucket")
        .verify_sha256_locally(false)
        .build()
        .await
        .unwrap();
    let key = BlobKey::new("reports/r.md").unwrap();
    let body = Bytes::from_static(b"actual bytes");

    let wrong = store
        .put(
            &key,
            body.clone(),
            PutOptions::for_bytes("text/markdown", b"other bytes"),
        )
        .await;
    assert!(
        matches!(&wrong, Err(BlobError::ChecksumMismatch { key: k }) if k == "reports/r.md"),
        "{wrong:?}"
    );
    store
        .put(
            &key,
            body.clone(),
            PutOptions::for_bytes("text/markdown", &body),
        )
        .await
        .unwrap();

    let seen = stub.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].status, 400);
    assert_eq!(
        seen[0].header("x-amz-checksum-sha256"),
        Some(
            BASE64
                .encode(Sha256Digest::of(b"other bytes").as_bytes())
                .as_str()
        ),
        "the caller's digest is sent, not one computed from the bytes"
    );
    assert_eq!(seen[1].status, 200);
    assert_eq!(seen[1].header("content-type"), Some("text/markdown"));
    assert_eq!(
        seen[1].header("x-amz-meta-sha256"),
        Some(Sha256Digest::of(&body).to_hex().as_str())
    );
}

/// Against moto: the header carries the caller's digest, so S3 checks the
/// bytes against what the caller meant to store.
///
/// FIXME: moto 5.2.5 does not verify `x-amz-checksum-sha256` (nor
/// `Content-MD5`); it stores the value it was sent. This test pins that
/// today's moto accepts the wrong digest and echoes it back; the refusal
/// itself is proven against the verifying stub above, and the default local
/// check keeps the contract's `checksum_mismatch_is_refused` honest on moto.
#[tokio::test]
async fn the_callers_sha256_reaches_the_server_as_given() {
    let Some(fx) = common::fixture_with(|b| b.verify_sha256_locally(false)).await else {
        return;
    };
    let key = BlobKey::new("tampered.txt").unwrap();
    let claimed = Sha256Digest::of(b"other bytes");
    let put = fx
        .put(
            &key,
            Bytes::from_static(b"actual bytes"),
            PutOptions::new("text/plain", claimed),
        )
        .await;
    assert!(put.is_ok(), "moto 5.2.5 does not verify checksums: {put:?}");
    let head = fx
        .client()
        .head_object()
        .bucket(fx.bucket())
        .key("tampered.txt")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert_eq!(
        head.checksum_sha256(),
        Some(BASE64.encode(claimed.as_bytes()).as_str())
    );
    common::teardown(fx).await;
}

/// With the local check on (the default) a wrong digest never reaches the
/// server: nothing is sent at all.
#[tokio::test]
async fn local_check_refuses_before_any_request() {
    let stub = Stub::start(Parts::Accept).await;
    let store = builder(&stub.endpoint, "bucket").build().await.unwrap();
    let key = BlobKey::new("k").unwrap();
    let result = store
        .put(
            &key,
            Bytes::from_static(b"a"),
            PutOptions::for_bytes("x/y", b"b"),
        )
        .await;
    assert!(
        matches!(result, Err(BlobError::ChecksumMismatch { .. })),
        "{result:?}"
    );
    assert!(stub.seen().is_empty());
}
