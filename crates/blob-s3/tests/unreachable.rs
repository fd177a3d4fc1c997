//! A server that is down or hangs gives `Backend` within the configured
//! bounds, never a hang. No moto needed: the "servers" are local sockets.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use bytes::Bytes;
use korvus_blob::{BlobError, BlobKey, BlobStore, PutOptions};
use korvus_blob_s3::sdk::{RetryConfig, TimeoutConfig};
use korvus_blob_s3::S3BlobStore;

use crate::common::builder;

/// One seam call, boxed so calls of different types fit in one list.
type Call<'a> = Pin<Box<dyn Future<Output = Result<(), BlobError>> + Send + 'a>>;

/// Every seam call on `store`, each expected to fail as `Backend` within
/// `bound`.
async fn every_call_fails_within(store: &S3BlobStore, bound: Duration) {
    let key = BlobKey::new("k").unwrap();
    let body = Bytes::from_static(b"x");
    let calls: Vec<(&str, Call<'_>)> = vec![
        (
            "put",
            Box::pin(store.put(&key, body.clone(), PutOptions::for_bytes("x/y", &body))),
        ),
        ("get", Box::pin(async { store.get(&key).await.map(drop) })),
        ("head", Box::pin(async { store.head(&key).await.map(drop) })),
        ("delete", Box::pin(store.delete(&key))),
        ("list", Box::pin(async { store.list(None).await.map(drop) })),
    ];
    for (name, call) in calls {
        let started = Instant::now();
        // The outer timeout only keeps a broken store from hanging the suite.
        let result = tokio::time::timeout(bound * 4, call)
            .await
            .unwrap_or_else(|_| panic!("{name} hung"));
        let took = started.elapsed();
        assert!(
            matches!(result, Err(BlobError::Backend { backend: "s3", .. })),
            "{name}: {result:?}"
        );
        assert!(took < bound, "{name} took {took:?}, bound {bound:?}");
    }
}

/// Nothing listens: connections are refused, retries back off briefly, and
/// every call fails well within the operation timeout.
#[tokio::test]
async fn a_server_that_is_down_gives_backend_quickly() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // The listener is dropped: the port is closed.
    let store = builder(&format!("http://127.0.0.1:{port}"), "bucket")
        .timeouts(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_millis(500))
                .operation_timeout(Duration::from_secs(2))
                .build(),
        )
        .retry(
            RetryConfig::standard()
                .with_max_attempts(3)
                .with_initial_backoff(Duration::from_millis(20))
                .with_max_backoff(Duration::from_millis(100)),
        )
        .build()
        .await
        .unwrap();
    every_call_fails_within(&store, Duration::from_secs(3)).await;
}

/// The server accepts connections but never answers: the operation timeout
/// ends each call, including its retries.
#[tokio::test]
async fn a_server_that_hangs_gives_backend_after_the_operation_timeout() {
    // Connections complete in the kernel's backlog and then see silence.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let store = builder(&format!("http://{addr}"), "bucket")
        .timeouts(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_millis(500))
                .operation_timeout(Duration::from_millis(800))
                .build(),
        )
        .build()
        .await
        .unwrap();
    every_call_fails_within(&store, Duration::from_millis(2500)).await;
    drop(listener);
}
