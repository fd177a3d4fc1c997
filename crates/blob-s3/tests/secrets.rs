//! Credentials never appear in `Debug` output or error text.

use std::time::Duration;

use korvus_blob::{BlobError, BlobKey, BlobStore};
use korvus_blob_s3::sdk::{RetryConfig, TimeoutConfig};
use korvus_blob_s3::{S3BlobStore, S3Credentials};

use crate::common::{self, builder, ACCESS_KEY_ID, SECRET_ACCESS_KEY};

const SESSION_TOKEN: &str = "korvus-session-token-do-not-log";

/// Everything a caller could print about an error: `Debug`, and `Display`
/// of each error in the source chain.
fn all_text(error: &BlobError) -> String {
    let mut text = format!("{error:?}\n");
    let mut next: Option<&dyn std::error::Error> = Some(error);
    while let Some(e) = next {
        text.push_str(&format!("{e}\n"));
        next = e.source();
    }
    text
}

fn assert_clean(what: &str, text: &str) {
    for secret in [ACCESS_KEY_ID, SECRET_ACCESS_KEY, SESSION_TOKEN] {
        assert!(!text.contains(secret), "{what} shows a credential: {text}");
    }
}

#[tokio::test]
async fn debug_output_never_shows_credentials() {
    for credentials in [
        S3Credentials::fixed(ACCESS_KEY_ID, SECRET_ACCESS_KEY),
        S3Credentials::temporary(ACCESS_KEY_ID, SECRET_ACCESS_KEY, SESSION_TOKEN),
        // Resolved lazily: with a region given, building makes no request.
        #[cfg(feature = "default-chain")]
        S3Credentials::default_chain(),
    ] {
        assert_clean("credentials", &format!("{credentials:?}"));
        let b = S3BlobStore::builder("bucket", credentials)
            .endpoint_url("http://127.0.0.1:9")
            .region("us-east-1");
        assert_clean("builder", &format!("{b:?}"));
        let store = b.build().await.unwrap();
        assert_clean("store", &format!("{store:?} {store:#?}"));
    }
}

/// Errors from a hanging server, a refused connection and (with moto) a
/// missing bucket name none of the credentials.
#[tokio::test]
async fn errors_never_show_credentials() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hanging = format!("http://{}", listener.local_addr().unwrap());
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let key = BlobKey::new("k").unwrap();
    for endpoint in [hanging, closed] {
        let store = S3BlobStore::builder(
            "bucket",
            S3Credentials::temporary(ACCESS_KEY_ID, SECRET_ACCESS_KEY, SESSION_TOKEN),
        )
        .endpoint_url(endpoint)
        .force_path_style(true)
        .timeouts(
            TimeoutConfig::builder()
                .operation_timeout(Duration::from_millis(500))
                .build(),
        )
        .retry(RetryConfig::disabled())
        .build()
        .await
        .unwrap();
        let error = store.get(&key).await.unwrap_err();
        assert!(matches!(error, BlobError::Backend { .. }), "{error:?}");
        assert_clean("transport error", &all_text(&error));
    }
    drop(listener);

    let Some(endpoint) = common::endpoint() else {
        return;
    };
    let store = builder(&endpoint, &common::fresh_bucket())
        .build()
        .await
        .unwrap();
    // The bucket was never created: a service error, not NotFound.
    let error = store.get(&key).await.unwrap_err();
    assert!(matches!(error, BlobError::Backend { .. }), "{error:?}");
    let text = all_text(&error);
    assert!(text.contains("NoSuchBucket"), "{text}");
    assert_clean("service error", &text);
}
