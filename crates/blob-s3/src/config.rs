//! [`S3BlobStoreBuilder`] and [`S3Credentials`]: how an [`S3BlobStore`] is
//! configured.

use std::fmt;
use std::time::Duration;

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region, SharedHttpClient};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};
use korvus_blob::{BlobError, BlobKey};

use crate::store::{S3BlobStore, Settings};

/// Smallest part S3 accepts in a multipart upload (every part but the last).
pub const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;

/// Default size from which `put` uploads in parts: 16 MiB.
pub const DEFAULT_MULTIPART_THRESHOLD: u64 = 16 * 1024 * 1024;

/// Default part size of a multipart upload: 8 MiB.
pub const DEFAULT_PART_SIZE: u64 = 8 * 1024 * 1024;

/// Default connect timeout (the SDK's own default).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(3100);

/// Default limit on one attempt of a call, so a server that accepts
/// connections but never answers fails (and is retried) instead of hanging
/// the caller. It covers sending a body, so it also bounds how slow a link
/// may be: 60 s lets a 16 MiB single-request put through at about 300 KB/s.
/// A `get` is covered until the response starts; its body is guarded by the
/// SDK's stalled-stream protection.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(60);

/// Region used with explicit credentials when none is configured. Most
/// S3-compatible servers accept any region; AWS itself needs the bucket's.
pub const FALLBACK_REGION: &str = "us-east-1";

/// Where an [`S3BlobStore`] gets its credentials.
///
/// `Debug` never shows a key: these values end up in logs.
///
/// ```
/// use korvus_blob_s3::S3Credentials;
///
/// let creds = S3Credentials::fixed("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG");
/// let shown = format!("{creds:?}");
/// assert!(!shown.contains("AKIDEXAMPLE") && !shown.contains("wJalrXUtnFEMI"));
/// ```
#[derive(Clone)]
pub struct S3Credentials(Source);

#[derive(Clone)]
enum Source {
    Fixed(Credentials),
    #[cfg(feature = "default-chain")]
    DefaultChain,
}

impl S3Credentials {
    /// An access key id and secret access key, used as given; nothing is read
    /// from the environment.
    pub fn fixed(access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        Self(Source::Fixed(Credentials::new(
            access_key_id,
            secret_access_key,
            None,
            None,
            "korvus-fixed",
        )))
    }

    /// Temporary credentials: an access key id, secret and session token.
    pub fn temporary(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: impl Into<String>,
    ) -> Self {
        Self(Source::Fixed(Credentials::new(
            access_key_id,
            secret_access_key,
            Some(session_token.into()),
            None,
            "korvus-fixed",
        )))
    }

    /// The AWS default chain: environment variables, profile files, web
    /// identity, ECS and EC2 instance metadata, resolved lazily on first use.
    /// The region, when not configured, also comes from the chain.
    #[cfg(feature = "default-chain")]
    pub fn default_chain() -> Self {
        Self(Source::DefaultChain)
    }
}

impl fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Source::Fixed(_) => f.write_str("S3Credentials::Fixed(** redacted **)"),
            #[cfg(feature = "default-chain")]
            Source::DefaultChain => f.write_str("S3Credentials::DefaultChain"),
        }
    }
}

/// Configures and builds an [`S3BlobStore`]; start with
/// [`S3BlobStore::builder`].
///
/// Defaults: no key prefix; virtual-hosted addressing; region from the
/// default chain (with [`S3Credentials::default_chain`]) or
/// [`FALLBACK_REGION`]; the SDK's endpoint for the region;
/// [`DEFAULT_CONNECT_TIMEOUT`], [`DEFAULT_ATTEMPT_TIMEOUT`] per attempt and
/// no limit on a whole call (retries included); standard retries, 3 attempts;
/// multipart from [`DEFAULT_MULTIPART_THRESHOLD`] in parts of
/// [`DEFAULT_PART_SIZE`], 4 at a time; listing pages of 1,000 keys; the
/// SHA-256 checked locally before upload as well as by the server.
#[derive(Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct S3BlobStoreBuilder {
    bucket: String,
    credentials: S3Credentials,
    key_prefix: Option<BlobKey>,
    region: Option<String>,
    endpoint_url: Option<String>,
    force_path_style: bool,
    timeouts: TimeoutConfig,
    retry: RetryConfig,
    multipart_threshold: u64,
    part_size: u64,
    part_concurrency: usize,
    list_page_size: i32,
    verify_sha256_locally: bool,
}

impl fmt::Debug for S3BlobStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3BlobStoreBuilder")
            .field("bucket", &self.bucket)
            .field("credentials", &self.credentials)
            .field("key_prefix", &self.key_prefix)
            .field("region", &self.region)
            .field("endpoint_url", &self.endpoint_url)
            .field("force_path_style", &self.force_path_style)
            .field("timeouts", &self.timeouts)
            .field("retry", &self.retry)
            .field("multipart_threshold", &self.multipart_threshold)
            .field("part_size", &self.part_size)
            .field("part_concurrency", &self.part_concurrency)
            .field("list_page_size", &self.list_page_size)
            .field("verify_sha256_locally", &self.verify_sha256_locally)
            .finish()
    }
}

impl S3BlobStoreBuilder {
    pub(crate) fn new(bucket: impl Into<String>, credentials: S3Credentials) -> Self {
        Self {
            bucket: bucket.into(),
            credentials,
            key_prefix: None,
            region: None,
            endpoint_url: None,
            force_path_style: false,
            timeouts: TimeoutConfig::builder()
                .connect_timeout(DEFAULT_CONNECT_TIMEOUT)
                .operation_attempt_timeout(DEFAULT_ATTEMPT_TIMEOUT)
                .build(),
            retry: RetryConfig::standard(),
            multipart_threshold: DEFAULT_MULTIPART_THRESHOLD,
            part_size: DEFAULT_PART_SIZE,
            part_concurrency: 4,
            list_page_size: 1000,
            verify_sha256_locally: true,
        }
    }

    /// Stores every object under `prefix/` in the bucket, so several stores
    /// (or other data) can share a bucket. Keys given to and returned by the
    /// store never include the prefix.
    pub fn key_prefix(mut self, prefix: BlobKey) -> Self {
        self.key_prefix = Some(prefix);
        self
    }

    /// The bucket's region, e.g. `eu-central-1`.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// The endpoint of an S3-compatible service, e.g. `http://127.0.0.1:9000`.
    /// A plain `http://` endpoint loads no TLS roots.
    pub fn endpoint_url(mut self, url: impl Into<String>) -> Self {
        self.endpoint_url = Some(url.into());
        self
    }

    /// Path-style addressing (`endpoint/bucket/key`) instead of
    /// virtual-hosted (`bucket.endpoint/key`); most self-hosted
    /// S3-compatible servers need it.
    pub fn force_path_style(mut self, on: bool) -> Self {
        self.force_path_style = on;
        self
    }

    /// The SDK's timeouts (connect, read, per attempt, per operation),
    /// replacing the defaults. An operation timeout bounds a call including
    /// its retries. Without an attempt or operation timeout, a server that
    /// accepts connections and never answers makes calls hang.
    pub fn timeouts(mut self, timeouts: TimeoutConfig) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// The SDK's retry configuration (mode, attempts, backoff).
    pub fn retry(mut self, retry: RetryConfig) -> Self {
        self.retry = retry;
        self
    }

    /// Objects of at least this many bytes go up as multipart uploads.
    pub fn multipart_threshold(mut self, bytes: u64) -> Self {
        self.multipart_threshold = bytes;
        self
    }

    /// Part size of multipart uploads; raised to [`MIN_PART_SIZE`] if
    /// smaller, since S3 refuses smaller parts.
    pub fn part_size(mut self, bytes: u64) -> Self {
        self.part_size = bytes.max(MIN_PART_SIZE);
        self
    }

    /// How many parts of one multipart upload are in flight at once (at
    /// least 1).
    pub fn part_concurrency(mut self, parts: usize) -> Self {
        self.part_concurrency = parts.max(1);
        self
    }

    /// Keys asked for per listing request (1 to 1,000; S3 caps it at 1,000).
    pub fn list_page_size(mut self, keys: u16) -> Self {
        self.list_page_size = i32::from(keys.clamp(1, 1000));
        self
    }

    /// Whether `put` hashes the bytes itself before uploading (default
    /// `true`). The server checks the SHA-256 either way; the local check
    /// also covers S3-compatible servers that ignore it. Multipart uploads
    /// are always checked locally, since S3 verifies each part, not the
    /// whole object.
    pub fn verify_sha256_locally(mut self, on: bool) -> Self {
        self.verify_sha256_locally = on;
        self
    }

    /// Builds the store. No request is made (a wrong bucket or endpoint
    /// shows on the first call), except that the default chain with no
    /// configured region looks for one, which may ask the EC2 instance
    /// metadata service.
    ///
    /// # Errors
    /// [`BlobError::Backend`] when the bucket name is empty.
    ///
    /// # Cancel safety
    /// Cancel-safe: nothing is created until it returns.
    pub async fn build(self) -> Result<S3BlobStore, BlobError> {
        if self.bucket.is_empty() {
            return Err(BlobError::backend("s3", "the bucket name is empty"));
        }
        let http = http_client(self.endpoint_url.as_deref());
        let mut config = match &self.credentials.0 {
            Source::Fixed(credentials) => aws_sdk_s3::Config::builder()
                .behavior_version(BehaviorVersion::latest())
                .credentials_provider(credentials.clone())
                .region(Region::new(
                    self.region
                        .clone()
                        .unwrap_or_else(|| FALLBACK_REGION.to_owned()),
                )),
            #[cfg(feature = "default-chain")]
            Source::DefaultChain => {
                // The credential providers may need TLS (STS, SSO endpoints)
                // even when the S3 endpoint is plain HTTP.
                let mut loader = aws_config::defaults(BehaviorVersion::latest())
                    .http_client(http_client(None))
                    .timeout_config(self.timeouts.clone())
                    .retry_config(self.retry.clone());
                if let Some(region) = &self.region {
                    loader = loader.region(Region::new(region.clone()));
                }
                aws_sdk_s3::config::Builder::from(&loader.load().await)
            }
        };
        config = config
            .http_client(http)
            .timeout_config(self.timeouts)
            .retry_config(self.retry)
            .force_path_style(self.force_path_style);
        if let Some(url) = self.endpoint_url {
            config = config.endpoint_url(url);
        }
        Ok(S3BlobStore::from_parts(
            aws_sdk_s3::Client::from_conf(config.build()),
            Settings {
                bucket: self.bucket,
                key_prefix: self.key_prefix,
                multipart_threshold: self.multipart_threshold,
                part_size: self.part_size,
                part_concurrency: self.part_concurrency,
                list_page_size: self.list_page_size,
                verify_sha256_locally: self.verify_sha256_locally,
            },
        ))
    }
}

/// Hyper with rustls on ring. An `http://` endpoint gets an empty trust
/// store: no TLS happens, so the system roots are not loaded.
fn http_client(endpoint_url: Option<&str>) -> SharedHttpClient {
    let plain = endpoint_url.is_some_and(|u| u.starts_with("http://"));
    let trust = if plain {
        TrustStore::empty()
    } else {
        TrustStore::default()
    };
    let context = TlsContext::builder()
        .with_trust_store(trust)
        .build()
        .expect("a TLS context without custom certificates always builds");
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .tls_context(context)
        .build_https()
}
