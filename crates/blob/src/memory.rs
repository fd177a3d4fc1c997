//! [`MemoryBlobStore`]: objects in process memory.

use std::collections::BTreeMap;
use std::ops::Bound;
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

    async fn list_page<'a>(
        &self,
        prefix: Option<&'a BlobKey>,
        after: Option<&'a BlobKey>,
        limit: usize,
    ) -> Result<Vec<BlobMeta>> {
        let objects = self.objects();
        // Keys under `p` are `p` and those from `p/` on (`p-x` sorts in
        // between): start at the later of `p` and the cursor, stop at the
        // first key past `p/` that is not under it.
        let start = match (prefix, after) {
            (Some(p), Some(a)) if a < p => Bound::Included(p),
            (_, Some(a)) => Bound::Excluded(a),
            (Some(p), None) => Bound::Included(p),
            (None, None) => Bound::Unbounded,
        };
        let block_end = prefix.map(|p| format!("{p}/"));
        Ok(objects
            .range::<BlobKey, _>((start, Bound::Unbounded))
            .take_while(|(k, _)| match (prefix, &block_end) {
                (Some(p), Some(end)) => k.is_under(p) || k.as_str() <= end.as_str(),
                _ => true,
            })
            .filter(|(k, _)| prefix.is_none_or(|p| k.is_under(p)))
            .take(limit)
            .map(|(_, b)| b.meta.clone())
            .collect())
    }

    async fn delete_many(&self, keys: &[BlobKey]) -> Vec<(BlobKey, BlobError)> {
        let mut objects = self.objects();
        for key in keys {
            objects.remove(key);
        }
        Vec::new()
    }
}
