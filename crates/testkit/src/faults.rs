//! Fault-injecting wrappers: real backends that fail where a test says so.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use korvus_log::{
    Access, Event, FlushError, LogError, LogHandle, LogHeader, LogId, LogIo, LogStat, Result,
    TurnLog, Writers,
};

/// Shared switches of a [`FailingLog`].
#[derive(Debug, Default)]
struct LogFaults {
    fail_flush: HashSet<LogId>,
    flushed: Vec<LogId>,
    /// Per log: the next tries of an append that fail before storing.
    fail_appends: std::collections::HashMap<LogId, (u32, bool)>,
    /// Per log: the next tries of an append that store, then fail.
    lose_acks: std::collections::HashMap<LogId, u32>,
}

/// What the next append try of a log does under a [`FailingLog`].
enum AppendFault {
    None,
    FailBefore { transient: bool },
    LoseAck,
}

impl LogFaults {
    fn next_append(&mut self, id: LogId) -> AppendFault {
        if let Some((left, transient)) = self.fail_appends.get_mut(&id) {
            if *left > 0 {
                *left -= 1;
                return AppendFault::FailBefore {
                    transient: *transient,
                };
            }
        }
        if let Some(left) = self.lose_acks.get_mut(&id) {
            if *left > 0 {
                *left -= 1;
                return AppendFault::LoseAck;
            }
        }
        AppendFault::None
    }
}

/// A [`TurnLog`] wrapper whose handles fail `flush` or append tries for
/// chosen logs; every other call goes to the wrapped service. It keeps its own writer registry,
/// so its service-wide [`flush`](FailingLog::flush) sweeps its own handles
/// with the same [`Writers`] machinery backends use.
pub struct FailingLog<'a> {
    inner: &'a dyn TurnLog,
    writers: Writers,
    faults: Arc<Mutex<LogFaults>>,
}

impl fmt::Debug for FailingLog<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailingLog")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<'a> FailingLog<'a> {
    /// Wraps `inner`; nothing fails until told.
    pub fn new(inner: &'a dyn TurnLog) -> Self {
        Self {
            inner,
            writers: Writers::new(),
            faults: Arc::default(),
        }
    }

    /// From now on, flushing the log `id` fails.
    pub fn fail_flush(&self, id: LogId) {
        self.faults.lock().unwrap().fail_flush.insert(id);
    }

    /// The next `tries` append tries of log `id` fail before storing
    /// anything, with a transient or a permanent error. A [`LogHandle`]
    /// retries transient ones itself, up to
    /// [`APPEND_ATTEMPTS`](korvus_log::APPEND_ATTEMPTS) tries per append.
    pub fn fail_appends(&self, id: LogId, tries: u32, transient: bool) {
        self.faults
            .lock()
            .unwrap()
            .fail_appends
            .insert(id, (tries, transient));
    }

    /// The next `tries` append tries of log `id` store their events, then
    /// fail with a transient error, as if the acknowledgement was lost.
    pub fn lose_acks(&self, id: LogId, tries: u32) {
        self.faults.lock().unwrap().lose_acks.insert(id, tries);
    }

    /// Logs whose flush succeeded, in order.
    pub fn flushed(&self) -> Vec<LogId> {
        self.faults.lock().unwrap().flushed.clone()
    }

    fn wrap(&self, handle: LogHandle) -> Result<LogHandle> {
        let header = handle.header().clone();
        let access = handle.access();
        let io = Arc::new(FailingIo {
            inner: handle,
            faults: Arc::clone(&self.faults),
        });
        Ok(match access {
            Access::Read => LogHandle::reader(header, io),
            Access::Write => LogHandle::writer(header.clone(), io, self.writers.claim(header.id)?),
        })
    }

    /// [`TurnLog::create`] through the wrapper.
    ///
    /// # Errors
    /// As the wrapped service.
    pub async fn create(&self, header: LogHeader) -> Result<LogHandle> {
        let handle = self.inner.create(header).await?;
        self.wrap(handle)
    }

    /// [`TurnLog::open`] through the wrapper.
    ///
    /// # Errors
    /// As the wrapped service.
    pub async fn open(&self, id: LogId, access: Access) -> Result<LogHandle> {
        let handle = self.inner.open(id, access).await?;
        self.wrap(handle)
    }

    /// [`TurnLog::flush`] over this wrapper's handles.
    ///
    /// # Errors
    /// Every failing log.
    pub async fn flush(&self) -> std::result::Result<(), FlushError> {
        self.writers.flush_all().await
    }
}

#[async_trait]
impl TurnLog for FailingLog<'static> {
    async fn create(&self, header: LogHeader) -> Result<LogHandle> {
        FailingLog::create(self, header).await
    }

    async fn open(&self, id: LogId, access: Access) -> Result<LogHandle> {
        FailingLog::open(self, id, access).await
    }

    async fn stat(&self, id: LogId) -> Result<LogStat> {
        self.inner.stat(id).await
    }

    async fn list(&self) -> Result<Vec<LogId>> {
        self.inner.list().await
    }

    async fn delete(&self, id: LogId) -> Result<()> {
        // This wrapper's own writers first: the inner service does not
        // know them.
        let _claim = self.writers.claim(id)?;
        self.inner.delete(id).await
    }

    async fn flush(&self) -> std::result::Result<(), FlushError> {
        FailingLog::flush(self).await
    }
}

#[derive(Debug)]
struct FailingIo {
    inner: LogHandle,
    faults: Arc<Mutex<LogFaults>>,
}

#[async_trait]
impl LogIo for FailingIo {
    async fn read(&self, offset: u64, len: Option<u64>) -> Result<Vec<Event>> {
        self.inner.read(offset, len).await
    }

    async fn event_count(&self) -> Result<u64> {
        self.inner.len().await
    }

    async fn claim(&self, epoch: u64) -> Result<()> {
        self.inner.claim_epoch(epoch).await
    }

    async fn append(&self, at: u64, events: &[Event]) -> Result<()> {
        let id = self.inner.id();
        let fault = self.faults.lock().unwrap().next_append(id);
        let injected = |what: &str| format!("injected append failure for {id}: {what}");
        match fault {
            AppendFault::None => self.inner.append_at(at, events).await,
            AppendFault::FailBefore { transient: true } => Err(LogError::transient(
                "failing-log",
                injected("nothing stored"),
            )),
            AppendFault::FailBefore { transient: false } => Err(LogError::permanent(
                "failing-log",
                injected("nothing stored"),
            )),
            AppendFault::LoseAck => {
                self.inner.append_at(at, events).await?;
                Err(LogError::transient(
                    "failing-log",
                    injected("stored, acknowledgement lost"),
                ))
            }
        }
    }

    async fn flush(&self) -> Result<()> {
        let id = self.inner.id();
        if self.faults.lock().unwrap().fail_flush.contains(&id) {
            return Err(LogError::backend(
                "failing-log",
                format!("injected flush failure for {id}"),
            ));
        }
        self.inner.flush().await?;
        self.faults.lock().unwrap().flushed.push(id);
        Ok(())
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

pub use self::blob_faults::{BlobFault, FaultBlobStore};
pub use self::store_faults::{FaultStore, StoreFault, StoreOp};

mod store_faults;

mod blob_faults {
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

        async fn put_stream(
            &self,
            key: &BlobKey,
            body: BlobBody,
            options: PutOptions,
        ) -> Result<()> {
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
}
