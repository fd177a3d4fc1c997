//! The upstream's answer as the agent gets it: streamed through as it
//! comes, read by a [`Meter`] on the way, and what the call used sent to
//! the run's logger when the answer ends, fails or is dropped.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::sync::mpsc;

use super::meter::{Meter, Used};

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
    pub(super) inner: Incoming,
    pub(super) meter: Option<Meter>,
    /// A call to a model API path: one without usage is counted as not
    /// metered (another path's, a model list say, is nothing).
    pub(super) model_call: bool,
    pub(super) path: String,
    pub(super) to: mpsc::UnboundedSender<Measured>,
}

impl MeteredBody {
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
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(meter), Some(data)) = (self.meter.as_mut(), frame.data_ref()) {
                    meter.feed(data);
                }
                // A body of known length ends with its last frame: hyper
                // asks no further.
                if self.inner.is_end_stream() {
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
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for MeteredBody {
    fn drop(&mut self) {
        // An empty answer is over before it is polled.
        let complete = self.inner.is_end_stream();
        self.done(complete);
    }
}

impl std::fmt::Debug for MeteredBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeteredBody")
            .field("path", &self.path)
            .finish()
    }
}
