//! The upstream's answer as the agent gets it: streamed through as it
//! comes, read by a [`Meter`] on the way, and what the call used sent to
//! the run's logger when the answer ends, fails or is dropped. A whole
//! (not streamed) answer the agent hangs up on is read to its end all the
//! same: the upstream made it and charges for it, and its usage comes
//! last, so an agent could otherwise take the text and leave the bill
//! unmetered.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::meter::{Meter, Used, MAX_HELD};

/// What one model call measured, for the logger.
#[derive(Debug)]
pub(super) enum Measured {
    /// The answer said what the call used.
    Used(Used),
    /// A successful model call the gateway could not meter whole (cut, or
    /// without usage): the path, why, and what was read before it ended.
    Unmetered {
        path: String,
        why: &'static str,
        partial: Option<Used>,
    },
}

/// The upstream's answer on its way to the agent, read by a meter; what
/// it measured is sent when the answer ends, fails or is dropped.
pub(crate) struct MeteredBody {
    /// `None` once handed to the task that reads it to its end.
    pub(super) inner: Option<Incoming>,
    pub(super) meter: Option<Meter>,
    /// A call to a model API path: one without usage is counted as not
    /// metered (another path's, a model list say, is nothing).
    pub(super) model_call: bool,
    pub(super) path: String,
    pub(super) to: mpsc::UnboundedSender<Measured>,
    /// The run's turns at reading an answer to its end; held by the
    /// task reading this one.
    drains: Arc<Semaphore>,
    /// Being read to its end after the agent hung up: not handed on again.
    draining: Option<OwnedSemaphorePermit>,
}

/// How long the rest of a whole answer the agent hung up on is read for.
/// A whole answer was made before its first byte came, so its rest comes
/// at once; the end of a run waits this long, and more, for the last
/// measurements.
pub(super) const DRAIN_WAIT: Duration = Duration::from_secs(3);

/// Whole answers of one run read to their end at once: an agent that hangs
/// up on one answer after another gets the rest counted as cut.
pub(super) const MAX_DRAINS: usize = 8;

impl MeteredBody {
    /// A body for the upstream's answer `inner`; `drains` is the run's
    /// (at most [`MAX_DRAINS`] permits).
    pub(super) fn new(
        inner: Incoming,
        meter: Option<Meter>,
        model_call: bool,
        path: String,
        to: mpsc::UnboundedSender<Measured>,
        drains: Arc<Semaphore>,
    ) -> Self {
        Self {
            inner: Some(inner),
            meter,
            model_call,
            path,
            to,
            drains,
            draining: None,
        }
    }

    /// Whether what is left of the answer is worth reading to its end:
    /// a whole answer the meter still reads, which fits what it holds.
    fn worth_draining(&self) -> bool {
        let Some(meter) = self.meter.as_ref().filter(|m| m.reads_whole()) else {
            return false;
        };
        let left = self.inner.as_ref().map_or(0, |b| b.size_hint().lower());
        meter
            .held()
            .saturating_add(usize::try_from(left).unwrap_or(usize::MAX))
            <= MAX_HELD
    }

    fn ended(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn done(&mut self, complete: bool) {
        let Some(meter) = self.meter.take() else {
            return;
        };
        let partial = meter.partial();
        let measured = match (complete, meter.finish()) {
            (true, Some(used)) => Measured::Used(used),
            (true, None) if self.model_call => Measured::Unmetered {
                path: std::mem::take(&mut self.path),
                why: "the answer had no usage",
                partial: None,
            },
            (true, None) => return,
            (false, _) if self.model_call || partial.is_some() => Measured::Unmetered {
                path: std::mem::take(&mut self.path),
                why: "the answer was cut before it ended; what it said so far is counted",
                partial,
            },
            (false, _) => return,
        };
        let _ = self.to.send(measured);
    }
}

impl Body for MeteredBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(meter), Some(data)) = (self.meter.as_mut(), frame.data_ref()) {
                    meter.feed(data);
                }
                // A body of known length ends with its last frame: hyper
                // asks no further.
                if self.ended() {
                    self.done(true);
                }
            }
            Poll::Ready(Some(Err(_))) => self.done(false),
            Poll::Ready(None) => self.done(true),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.ended()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for MeteredBody {
    fn drop(&mut self) {
        // An empty answer is over before it is polled.
        let complete = self.ended();
        if !complete && self.draining.is_none() && self.worth_draining() {
            let turn = Arc::clone(&self.drains).try_acquire_owned().ok();
            if let (Ok(runtime), Some(turn)) = (tokio::runtime::Handle::try_current(), turn) {
                let rest = Self {
                    inner: self.inner.take(),
                    meter: self.meter.take(),
                    model_call: self.model_call,
                    path: std::mem::take(&mut self.path),
                    to: self.to.clone(),
                    drains: Arc::clone(&self.drains),
                    draining: Some(turn),
                };
                runtime.spawn(drain(rest));
                return;
            }
        }
        self.done(complete);
    }
}

/// Reads the rest of a whole answer the agent hung up on, for its usage,
/// for at most [`DRAIN_WAIT`]; what it could not read counts as cut.
async fn drain(mut rest: MeteredBody) {
    let _ = tokio::time::timeout(DRAIN_WAIT, async {
        while let Some(frame) = rest.frame().await {
            // Past what the meter holds, nothing more can be measured.
            if frame.is_err() || !rest.meter.as_ref().is_some_and(Meter::reads_whole) {
                break;
            }
        }
    })
    .await;
}

impl std::fmt::Debug for MeteredBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeteredBody")
            .field("path", &self.path)
            .finish()
    }
}
