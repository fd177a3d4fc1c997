//! [`MemoryBlobStore`]: objects in process memory.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;

use crate::{Blob, BlobError, BlobKey, BlobMeta, BlobStore, PutOptions, Result, Sha256Digest};

/// A [`BlobStore`] in memory: a sorted map from key to object.
#[derive(Debug, Default)]
pub struct MemoryBlobStore {
    objects: Mutex<BTreeMap<BlobKey, Blob>>,
}

impl MemoryBlobStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn objects(&self) -> MutexGuard<'_, BTreeMap<BlobKey, Blob>> {
        // Every operation is one map call; a poisoned map is still consistent.
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl BlobStore for MemoryBlobStore {
    async fn put(&self, key: &BlobKey, bytes: Bytes, options: PutOptions) -> Result<()> {
        if Sha256Digest::of(&bytes) != options.sha256 {
            return Err(BlobError::ChecksumMismatch {
                key: key.to_string(),
            });
        }
        let meta = BlobMeta {
            key: key.clone(),
            size: bytes.len() as u64,
            content_type: Some(options.content_type),
            sha256: Some(options.sha256),
            last_modified: Some(std::time::SystemTime::now()),
        };
        self.objects().insert(key.clone(), Blob { bytes, meta });
        Ok(())
    }

    async fn get(&self, key: &BlobKey) -> Result<Blob> {
        self.objects()
            .get(key)
            .cloned()
            .ok_or_else(|| BlobError::NotFound {
                key: key.to_string(),
            })
    }

    async fn head(&self, key: &BlobKey) -> Result<BlobMeta> {
        self.get(key).await.map(|b| b.meta)
    }

    async fn delete(&self, key: &BlobKey) -> Result<()> {
        self.objects().remove(key);
        Ok(())
    }

    async fn list<'a>(&self, prefix: Option<&'a BlobKey>) -> Result<Vec<BlobMeta>> {
        Ok(self
            .objects()
            .iter()
            .filter(|(k, _)| prefix.is_none_or(|p| k.is_under(p)))
            .map(|(_, b)| b.meta.clone())
            .collect())
    }
}
