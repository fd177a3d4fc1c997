//! [`Gate`]: reads each request head before hyper does, so a head the
//! server cannot take gets korvus's JSON error body.
//!
//! hyper answers a head it cannot read (a URI over 64 KiB, a head over its
//! buffer, a malformed line) by itself, with an empty body, and offers no
//! hook to change that answer. So the [`Server`](crate::Server) wraps each
//! connection in a `Gate` that frames the requests (head, then as many body
//! bytes as `Content-Length` says) and hands hyper a head only once it is
//! whole and passes korvus's own limits, which are tighter than hyper's:
//! URI [`MAX_URI_BYTES`] (`414 uri_too_long`), head [`MAX_HEAD_BYTES`] and
//! 100 header fields (`431 headers_too_large`), a head httparse or the
//! `http` types refuse, or a bad `Content-Length`/`Transfer-Encoding`
//! (`400 malformed_request`). A refused head is never handed over: hyper
//! reads the end of the stream there, finishes the responses in progress
//! (the connection is half-closed, not reset) and shuts the connection
//! down, and the gate writes the answer right before the shutdown.
//!
//! A chunked request body is not framed here: from one on, the rest of
//! that connection passes as it comes (hyper's own checks, and its bare
//! answers, apply there). API clients send `Content-Length`.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use axum::http::{Method, StatusCode, Uri};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The longest request target the server takes.
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// The largest request head (request line and header fields) the server
/// takes.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The most header fields a request may have (hyper's own limit).
const MAX_HEADERS: usize = 100;
/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 8 * 1024;

/// A connection whose request heads are checked before hyper reads them.
#[derive(Debug)]
pub(crate) struct Gate<T> {
    io: T,
    /// Bytes read from the socket and not yet handed to hyper.
    buf: Vec<u8>,
    /// How many bytes at the front of `buf` hyper may have.
    ready: usize,
    state: State,
    /// Bytes of the head in progress already looked at, and whether they
    /// hold a line end: the head is parsed again only once a line ends.
    scanned: usize,
    lined: bool,
    /// The refusal to write before the shutdown, and how much of it is.
    answer: Vec<u8>,
    written: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for a whole head at `buf[ready..]`.
    Head,
    /// This many body bytes pass before the next head.
    Body(u64),
    /// Past a chunked body: everything passes.
    Through,
    /// A head was refused: after `ready` bytes hyper reads the end.
    Refused,
}

impl<T> Gate<T> {
    pub(crate) fn new(io: T) -> Self {
        Self {
            io,
            buf: Vec::new(),
            ready: 0,
            state: State::Head,
            scanned: 0,
            lined: false,
            answer: Vec::new(),
            written: 0,
        }
    }

    /// Moves what may be handed over into `ready`, judging each whole head.
    fn advance(&mut self) {
        loop {
            let rest = &self.buf[self.ready..];
            match self.state {
                State::Refused => return,
                State::Through => {
                    self.ready = self.buf.len();
                    return;
                }
                State::Body(left) => {
                    let take = left.min(rest.len() as u64);
                    self.ready += take as usize;
                    self.state = match left - take {
                        0 => State::Head,
                        left => State::Body(left),
                    };
                    if left != take {
                        return;
                    }
                }
                State::Head => {
                    // Empty lines before a request line are skipped, as
                    // hyper and httparse do.
                    let blank = rest.iter().take_while(|b| matches!(b, b'\r' | b'\n'));
                    let blank = blank.count();
                    self.ready += blank;
                    self.scanned = self.scanned.saturating_sub(blank);
                    if !self.worth_parsing() {
                        return;
                    }
                    match judge(&self.buf[self.ready..]) {
                        Judged::Partial => return,
                        Judged::Pass { head, body } => {
                            self.ready += head;
                            self.state = body;
                            (self.scanned, self.lined) = (0, false);
                        }
                        Judged::Refuse(status, code, message) => {
                            self.answer = answer(status, code, message);
                            self.buf.truncate(self.ready);
                            self.state = State::Refused;
                            return;
                        }
                    }
                }
            }
        }
    }
}

impl<T> Gate<T> {
    /// Whether the head in progress may have changed its verdict since it
    /// was last parsed: a line ended, or it grew past a limit. Parsing on
    /// every read would cost a slow client's byte-at-a-time head a parse
    /// per byte.
    fn worth_parsing(&mut self) -> bool {
        let rest = &self.buf[self.ready..];
        let fresh = &rest[self.scanned.min(rest.len())..];
        let ended = fresh.contains(&b'\n');
        self.lined |= ended;
        self.scanned = rest.len();
        ended || (!self.lined && rest.len() > MAX_URI_BYTES + 64) || rest.len() > MAX_HEAD_BYTES
    }
}

enum Judged {
    Partial,
    Pass { head: usize, body: State },
    Refuse(StatusCode, &'static str, &'static str),
}

fn too_long() -> Judged {
    Judged::Refuse(
        StatusCode::URI_TOO_LONG,
        "uri_too_long",
        "the request URI is too long",
    )
}

fn too_large() -> Judged {
    Judged::Refuse(
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "headers_too_large",
        "the request head is too large",
    )
}

fn malformed(message: &'static str) -> Judged {
    Judged::Refuse(StatusCode::BAD_REQUEST, "malformed_request", message)
}

/// Judges the head at the front of `bytes` (no leading empty line).
fn judge(bytes: &[u8]) -> Judged {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let head = match request.parse(bytes) {
        Ok(httparse::Status::Complete(head)) => head,
        Ok(httparse::Status::Partial) => {
            let line = bytes.iter().position(|&b| b == b'\n');
            return match line {
                None if bytes.len() > MAX_URI_BYTES + 64 => too_long(),
                _ if bytes.len() > MAX_HEAD_BYTES => too_large(),
                _ => Judged::Partial,
            };
        }
        Err(httparse::Error::TooManyHeaders) => return too_large(),
        Err(_) => return malformed("the request head is malformed"),
    };
    let (Some(method), Some(path), Some(version)) = (request.method, request.path, request.version)
    else {
        return malformed("the request head is malformed");
    };
    if path.len() > MAX_URI_BYTES {
        return too_long();
    }
    if head > MAX_HEAD_BYTES {
        return too_large();
    }
    if Method::from_bytes(method.as_bytes()).is_err() || Uri::try_from(path).is_err() {
        return malformed("the request line is malformed");
    }
    match framing(request.headers, version) {
        Ok(body) => Judged::Pass { head, body },
        Err(message) => malformed(message),
    }
}

/// What follows a head: `Content-Length` bytes, or (chunked) anything.
fn framing(headers: &[httparse::Header<'_>], version: u8) -> Result<State, &'static str> {
    let values = |name: &'static str| {
        headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .flat_map(|h| h.value.split(|&b| b == b','))
            .map(|v| v.trim_ascii())
    };
    if let Some(last) = values("transfer-encoding").next_back() {
        return match version {
            1 if last.eq_ignore_ascii_case(b"chunked") => Ok(State::Through),
            1 => Err("a request's last transfer coding must be chunked"),
            _ => Err("HTTP/1.0 has no transfer coding"),
        };
    }
    let mut length = None;
    for value in values("content-length") {
        let parsed = std::str::from_utf8(value)
            .ok()
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or("the Content-Length is not a number")?;
        if length.is_some_and(|l| l != parsed) {
            return Err("the Content-Length values differ");
        }
        length = Some(parsed);
    }
    Ok(match length {
        None | Some(0) => State::Head,
        Some(n) => State::Body(n),
    })
}

/// A whole response carrying the JSON error body; the connection closes.
fn answer(status: StatusCode, code: &str, message: &str) -> Vec<u8> {
    let body = crate::error::Body {
        error: message,
        code,
    };
    let body = serde_json::to_string(&body).unwrap_or_default();
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

impl<T: AsyncRead + Unpin> AsyncRead for Gate<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.ready > 0 {
                let n = this.ready.min(out.remaining());
                out.put_slice(&this.buf[..n]);
                this.buf.drain(..n);
                this.ready -= n;
                return Poll::Ready(Ok(()));
            }
            if this.state == State::Refused {
                // The end of the stream, where the refused head began.
                return Poll::Ready(Ok(()));
            }
            let start = this.buf.len();
            this.buf.resize(start + READ_CHUNK, 0);
            let mut read = ReadBuf::new(&mut this.buf[start..]);
            let polled = Pin::new(&mut this.io).poll_read(cx, &mut read);
            let got = read.filled().len();
            this.buf.truncate(start + got);
            ready!(polled)?;
            if got == 0 {
                // The peer's end: hand hyper what is left, then the end.
                this.ready = this.buf.len();
                if this.ready == 0 {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            this.advance();
        }
    }
}

impl<T: AsyncWrite + Unpin> Gate<T> {
    fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.answer.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.answer[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Gate<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_answer(cx))?;
        ready!(Pin::new(&mut this.io).poll_flush(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Feeds `input` to a gate a byte at a time; what hyper would read,
    /// and what the gate writes at the shutdown.
    async fn through(input: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let mut gate = Gate::new(server);
        let reader = async {
            let mut seen = Vec::new();
            gate.read_to_end(&mut seen).await.unwrap();
            gate.shutdown().await.unwrap();
            seen
        };
        let writer = async {
            for byte in input {
                client.write_all(&[*byte]).await.unwrap();
                tokio::task::yield_now().await;
            }
            client.shutdown().await.unwrap();
            let mut answer = Vec::new();
            client.read_to_end(&mut answer).await.unwrap();
            answer
        };
        tokio::join!(reader, writer)
    }

    #[tokio::test]
    async fn good_requests_pass_whole_even_a_byte_at_a_time() {
        let input =
            b"\r\nPOST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nGET /bGET /c HTTP/1.0\r\n\r\n";
        let (seen, answer) = through(input).await;
        assert_eq!(seen, input);
        assert!(answer.is_empty());
    }

    #[tokio::test]
    async fn a_refused_head_is_withheld_and_answered_at_the_shutdown() {
        let good = b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n".to_vec();
        let mut input = good.clone();
        input.extend_from_slice(
            b"GET /a HTTP/1.1\r\nContent-Length: -1\r\n\r\nGET /c HTTP/1.1\r\n\r\n",
        );
        let (seen, answer) = through(&input).await;
        assert_eq!(seen, good, "nothing of the refused head is handed over");
        let answer = String::from_utf8(answer).unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{answer}"
        );
        assert!(
            answer.ends_with(r#""code":"malformed_request"}"#),
            "{answer}"
        );
    }
}
