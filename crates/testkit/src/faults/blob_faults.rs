//! [`FaultBlobStore`]: a [`BlobStore`] wrapper that counts puts and fails
//! or hangs chosen puts and gets.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use korvus_blob::{
    Blob, BlobBody, BlobError, BlobKey, BlobMeta, BlobReader, BlobStore, PutFileOptions,
    PutOptions, Result, Sha256Digest,
};

/// What a faulty `put` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobFault {
    /// Return `BlobError::Backend`.
    Fail,
    /// Never return.
    Hang,
    /// For `get_stream`: the stream yields this many bytes, then fails
    /// with an I/O error (elsewhere: as [`BlobFault::Fail`]).
    FailAfter(u64),
    /// For `get_stream`: the stream yields this many bytes, then never
    /// yields again (elsewhere: as [`BlobFault::Hang`]).
    HangAfter(u64),
}

#[derive(Debug, Default)]
struct State {
    put_faults: Vec<(String, BlobFault)>,
    get_faults: Vec<(String, BlobFault)>,
    barrier_fault: Option<BlobFault>,
    barriers: usize,
    puts: HashMap<BlobKey, usize>,
    put_order: Vec<BlobKey>,
}

/// A [`BlobStore`] wrapper that counts puts per key and fails or hangs
/// puts and gets of keys containing chosen text.
#[derive(Debug, Clone)]
pub struct FaultBlobStore {
    inner: Arc<dyn BlobStore>,
    state: Arc<Mutex<State>>,
}

impl FaultBlobStore {
    /// Wraps `inner`; nothing fails until told.
    pub fn new(inner: Arc<dyn BlobStore>) -> Self {
        Self {
            inner,
            state: Arc::default(),
        }
    }

    /// Puts of keys containing `needle` do `fault` (`""` matches every key).
    pub fn fault_put(&self, needle: &str, fault: BlobFault) {
        self.state
            .lock()
            .unwrap()
            .put_faults
            .push((needle.to_owned(), fault));
    }

    /// Clears every fault set so far: the store works again (the cause
    /// is gone), counts kept.
    pub fn clear_faults(&self) {
        let mut state = self.state.lock().unwrap();
        state.put_faults.clear();
        state.get_faults.clear();
        state.barrier_fault = None;
    }

    /// Every [`BlobStore::barrier`] from now on does `fault`.
    pub fn fault_barrier(&self, fault: BlobFault) {
        self.state.lock().unwrap().barrier_fault = Some(fault);
    }

    /// Successful barriers so far.
    pub fn barriers(&self) -> usize {
        self.state.lock().unwrap().barriers
    }

    /// Gets of keys containing `needle` do `fault`.
    pub fn fault_get(&self, needle: &str, fault: BlobFault) {
        self.state
            .lock()
            .unwrap()
            .get_faults
            .push((needle.to_owned(), fault));
    }

    /// Successful puts of `key` so far.
    pub fn puts_of(&self, key: &BlobKey) -> usize {
        self.state
            .lock()
            .unwrap()
            .puts
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// Every successful put, in completion order.
    pub fn put_order(&self) -> Vec<BlobKey> {
        self.state.lock().unwrap().put_order.clone()
    }

    /// Total successful puts.
    pub fn total_puts(&self) -> usize {
        self.state.lock().unwrap().put_order.len()
    }

    fn record_put(&self, key: &BlobKey) {
        let mut state = self.state.lock().unwrap();
        *state.puts.entry(key.clone()).or_default() += 1;
        state.put_order.push(key.clone());
    }

    async fn apply(faults: Option<BlobFault>, key: &BlobKey) -> Result<()> {
        match faults {
            None => Ok(()),
            Some(BlobFault::Fail | BlobFault::FailAfter(_)) => Err(BlobError::backend(
                "fault-blob",
                format!("injected failure for {key}"),
            )),
            Some(BlobFault::Hang | BlobFault::HangAfter(_)) => std::future::pending().await,
        }
    }

    fn find(list: &[(String, BlobFault)], key: &BlobKey) -> Option<BlobFault> {
        list.iter()
            .find(|(needle, _)| key.as_str().contains(needle.as_str()))
            .map(|(_, f)| *f)
    }
}

/// A stream that yields `left` bytes of `inner`, then fails or hangs.
struct Midway {
    inner: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
    left: u64,
    fail: bool,
}

impl tokio::io::AsyncRead for Midway {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.left == 0 {
            return if self.fail {
                std::task::Poll::Ready(Err(std::io::Error::other("injected read failure")))
            } else {
                std::task::Poll::Pending
            };
        }
        let room = buf
            .remaining()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let mut limited = tokio::io::ReadBuf::new(&mut buf.initialize_unfilled()[..room]);
        let polled = self.inner.as_mut().poll_read(cx, &mut limited);
        let n = limited.filled().len();
        if let std::task::Poll::Ready(Ok(())) = polled {
            buf.advance(n);
            self.left -= n as u64;
        }
        polled
    }
}

#[async_trait]
impl BlobStore for FaultBlobStore {
    async fn put(&self, key: &BlobKey, bytes: Bytes, options: PutOptions) -> Result<()> {
        let fault = Self::find(&self.state.lock().unwrap().put_faults, key);
        Self::apply(fault, key).await?;
        self.inner.put(key, bytes, options).await?;
        self.record_put(key);
        Ok(())
    }

    async fn put_stream(&self, key: &BlobKey, body: BlobBody, options: PutOptions) -> Result<()> {
        let fault = Self::find(&self.state.lock().unwrap().put_faults, key);
        Self::apply(fault, key).await?;
        self.inner.put_stream(key, body, options).await?;
        self.record_put(key);
        Ok(())
    }

    async fn put_file(
        &self,
        key: &BlobKey,
        file: std::fs::File,
        len: u64,
        options: PutFileOptions,
    ) -> Result<Sha256Digest> {
        let fault = Self::find(&self.state.lock().unwrap().put_faults, key);
        Self::apply(fault, key).await?;
        let digest = self.inner.put_file(key, file, len, options).await?;
        self.record_put(key);
        Ok(digest)
    }

    async fn barrier(&self) -> Result<()> {
        let fault = self.state.lock().unwrap().barrier_fault;
        if let Some(fault) = fault {
            match fault {
                BlobFault::Fail | BlobFault::FailAfter(_) => {
                    return Err(BlobError::backend("fault-blob", "injected barrier failure"))
                }
                BlobFault::Hang | BlobFault::HangAfter(_) => std::future::pending().await,
            }
        }
        self.inner.barrier().await?;
        self.state.lock().unwrap().barriers += 1;
        Ok(())
    }

    async fn get(&self, key: &BlobKey) -> Result<Blob> {
        let fault = Self::find(&self.state.lock().unwrap().get_faults, key);
        Self::apply(fault, key).await?;
        self.inner.get(key).await
    }

    async fn get_stream(&self, key: &BlobKey) -> Result<BlobReader> {
        let fault = Self::find(&self.state.lock().unwrap().get_faults, key);
        let midway = match fault {
            Some(BlobFault::FailAfter(n)) => Some((n, true)),
            Some(BlobFault::HangAfter(n)) => Some((n, false)),
            other => {
                Self::apply(other, key).await?;
                None
            }
        };
        let reader = self.inner.get_stream(key).await?;
        Ok(match midway {
            None => reader,
            Some((left, fail)) => BlobReader {
                meta: reader.meta,
                body: Box::pin(Midway {
                    inner: reader.body,
                    left,
                    fail,
                }),
            },
        })
    }

    async fn head(&self, key: &BlobKey) -> Result<BlobMeta> {
        self.inner.head(key).await
    }

    async fn delete(&self, key: &BlobKey) -> Result<()> {
        self.inner.delete(key).await
    }

    async fn list<'a>(&self, prefix: Option<&'a BlobKey>) -> Result<Vec<BlobMeta>> {
        self.inner.list(prefix).await
    }
}
