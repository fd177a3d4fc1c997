//! [`BlobError`]: what a [`BlobStore`](crate::BlobStore) call can fail with.

/// Errors of the blob seam. Match on variants, never on message text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlobError {
    /// No object at this key.
    #[error("blob {key} not found")]
    NotFound {
        /// The key.
        key: String,
    },
    /// The key breaks a [`BlobKey`](crate::BlobKey) rule; nothing was done.
    #[error("invalid blob key {key:?}: {reason}")]
    InvalidKey {
        /// The refused key (escaped, cut to 200 characters).
        key: String,
        /// The broken rule.
        reason: &'static str,
    },
    /// The bytes do not match the SHA-256 given to `put`; nothing was stored.
    #[error("blob {key} does not match its SHA-256 digest")]
    ChecksumMismatch {
        /// The key.
        key: String,
    },
    /// The body of a [`put_stream`](crate::BlobStore::put_stream) could not
    /// be read; nothing was stored.
    #[error("reading the body of blob {key} failed")]
    Body {
        /// The key.
        key: String,
        /// The reader's error.
        #[source]
        source: std::io::Error,
    },
    /// The backend failed (I/O, network, server error).
    #[error("{backend} blob backend failed")]
    Backend {
        /// Which backend, e.g. `fs` or `s3`.
        backend: &'static str,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl BlobError {
    /// `true` when the same call may succeed if tried again: a backend
    /// failure (the network, the server, a full disk), unless it is an I/O
    /// error no retry cures (permission denied, invalid input or data,
    /// unsupported, a missing path). A missing object, a bad key, a
    /// checksum mismatch and an unreadable body are `false`.
    pub fn is_transient(&self) -> bool {
        let BlobError::Backend { source, .. } = self else {
            return false;
        };
        !matches!(
            source
                .downcast_ref::<std::io::Error>()
                .map(std::io::Error::kind),
            Some(
                std::io::ErrorKind::PermissionDenied
                    | std::io::ErrorKind::InvalidInput
                    | std::io::ErrorKind::InvalidData
                    | std::io::ErrorKind::Unsupported
                    | std::io::ErrorKind::NotFound,
            )
        )
    }

    /// Shorthand for [`BlobError::Backend`].
    pub fn backend(
        backend: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        BlobError::Backend {
            backend,
            source: source.into(),
        }
    }
}

/// `Result` with [`BlobError`] as the default error.
pub type Result<T, E = BlobError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_backend_failure_a_retry_may_cure_is_transient() {
        let io = |kind| BlobError::backend("fs", std::io::Error::from(kind));
        assert!(io(std::io::ErrorKind::TimedOut).is_transient());
        assert!(io(std::io::ErrorKind::StorageFull).is_transient());
        assert!(BlobError::backend("s3", "503 slow down").is_transient());
        assert!(!io(std::io::ErrorKind::PermissionDenied).is_transient());
        assert!(!BlobError::NotFound { key: "k".into() }.is_transient());
    }
}
