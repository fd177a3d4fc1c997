//! The HTTP/1 of the egress proxy: each request head on a connection
//! parsed with httparse and judged on its own, the head sent upstream
//! (origin-form, without `Proxy-*` headers, its `Host` the request's
//! authority), and the framing of request bodies, so the next head is
//! found where it starts.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::network::Destination;

/// Longest request head (request line and headers) the proxy reads.
pub(super) const MAX_HEAD: usize = 64 * 1024;
/// Most header fields in a request head.
const MAX_HEADERS: usize = 100;
/// Longest chunk-size or trailer line of a chunked body.
const MAX_LINE: usize = 8 * 1024;
/// Bytes read from the client at a time.
const READ_CHUNK: usize = 8 * 1024;

/// A proxy request: its destination and what it asks for.
#[derive(Debug)]
pub(super) struct Request {
    pub(super) method: String,
    pub(super) dest: Destination,
    pub(super) ask: Ask,
}

/// What a request asks of the proxy.
#[derive(Debug)]
pub(super) enum Ask {
    /// `CONNECT`: a tunnel for the rest of the connection.
    Connect,
    /// An absolute-form request: `head` goes upstream, then its body; after
    /// an `Upgrade` request the rest of the connection is a tunnel.
    Forward {
        head: Vec<u8>,
        body: Body,
        upgrade: bool,
    },
}

/// How a request's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Body {
    None,
    Length(u64),
    Chunked,
}

impl Request {
    /// Parses one request head (as [`Input::head`] returned it).
    pub(super) fn parse(head: &[u8]) -> Result<Self, &'static str> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(head) {
            Ok(httparse::Status::Complete(_)) => {}
            Err(httparse::Error::TooManyHeaders) => {
                return Err("korvus egress: too many header fields")
            }
            _ => return Err("korvus egress: malformed request head"),
        }
        let (Some(method), Some(target), Some(version)) =
            (request.method, request.path, request.version)
        else {
            return Err("korvus egress: malformed request head");
        };
        if method.eq_ignore_ascii_case("CONNECT") {
            let dest = target
                .parse::<Destination>()
                .map_err(|_| "korvus egress: CONNECT needs HOST:PORT")?;
            return Ok(Self {
                method: "CONNECT".to_owned(),
                dest,
                ask: Ask::Connect,
            });
        }
        let Some(rest) = target.strip_prefix("http://") else {
            return Err("korvus egress: only CONNECT and absolute http:// requests are proxied");
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.contains('@') {
            // The `Host` sent on is the authority: no user part in it.
            return Err("korvus egress: no user information in a proxied URL");
        }
        let slash = if path.starts_with('?') { "/" } else { "" };
        let dest = Destination::from_url(&format!("http://{authority}"))
            .map_err(|_| "korvus egress: bad host in the request")?;
        let body = framing(request.headers, version)?;
        let mut out = format!("{method} {slash}{path} HTTP/1.{version}\r\nHost: {authority}\r\n")
            .into_bytes();
        let mut upgrade = false;
        for h in request.headers.iter() {
            let name = h.name.to_ascii_lowercase();
            upgrade |= name == "upgrade";
            if !name.starts_with("proxy-") && name != "host" {
                out.extend_from_slice(h.name.as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(h.value);
                out.extend_from_slice(b"\r\n");
            }
        }
        out.extend_from_slice(b"\r\n");
        Ok(Self {
            method: method.to_owned(),
            dest,
            ask: Ask::Forward {
                head: out,
                body,
                upgrade,
            },
        })
    }
}

/// How the body after these headers is delimited. A request naming both a
/// `Transfer-Encoding` and a `Content-Length`, or lengths that differ, is
/// refused: the proxy and the origin could read it differently.
fn framing(headers: &[httparse::Header<'_>], version: u8) -> Result<Body, &'static str> {
    let values = |name: &'static str| {
        headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .flat_map(|h| h.value.split(|&b| b == b','))
            .map(|v| v.trim_ascii())
    };
    let lengths: Vec<&[u8]> = values("content-length").collect();
    if let Some(last) = values("transfer-encoding").next_back() {
        return match (version, lengths.is_empty()) {
            (1, true) if last.eq_ignore_ascii_case(b"chunked") => Ok(Body::Chunked),
            (1, true) => Err("korvus egress: a request's last transfer coding must be chunked"),
            (1, false) => Err("korvus egress: both Transfer-Encoding and Content-Length"),
            _ => Err("korvus egress: HTTP/1.0 has no transfer coding"),
        };
    }
    let mut length = None;
    for value in lengths {
        let parsed = std::str::from_utf8(value)
            .ok()
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or("korvus egress: the Content-Length is not a number")?;
        if length.is_some_and(|l| l != parsed) {
            return Err("korvus egress: the Content-Length values differ");
        }
        length = Some(parsed);
    }
    Ok(match length {
        None | Some(0) => Body::None,
        Some(n) => Body::Length(n),
    })
}

/// The client's side of a connection: what was read and not used yet.
#[derive(Debug)]
pub(super) struct Input<R> {
    read: R,
    buf: Vec<u8>,
}

fn invalid(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl<R: AsyncRead + Unpin> Input<R> {
    pub(super) fn new(read: R) -> Self {
        Self {
            read,
            buf: Vec::new(),
        }
    }

    /// Reads more; how much (0 at the end of the stream).
    async fn fill(&mut self) -> io::Result<usize> {
        let start = self.buf.len();
        self.buf.resize(start + READ_CHUNK, 0);
        let n = self.read.read(&mut self.buf[start..]).await;
        self.buf.truncate(start + *n.as_ref().unwrap_or(&0));
        n
    }

    /// The next request head, leading empty lines included; `None` at the
    /// end of the stream between requests. A head httparse refuses comes
    /// back as read, for [`Request::parse`] to say why.
    pub(super) async fn head(&mut self) -> io::Result<Option<Vec<u8>>> {
        let mut seen = 0;
        loop {
            // Parsed again only once a line ended: a client sending a byte
            // at a time costs one parse per line, not per byte.
            if self.buf[seen..].contains(&b'\n') {
                let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                match httparse::Request::new(&mut headers).parse(&self.buf) {
                    Ok(httparse::Status::Complete(n)) => {
                        return Ok(Some(self.buf.drain(..n).collect()))
                    }
                    Ok(httparse::Status::Partial) => {}
                    Err(_) => return Ok(Some(std::mem::take(&mut self.buf))),
                }
            }
            seen = self.buf.len();
            if seen > MAX_HEAD {
                return Err(invalid("request head too large"));
            }
            if self.fill().await? == 0 {
                return match self.buf.iter().all(|b| matches!(b, b'\r' | b'\n')) {
                    true => Ok(None),
                    false => Err(io::ErrorKind::UnexpectedEof.into()),
                };
            }
        }
    }

    /// Copies the request body `body` to `to`, exactly.
    pub(super) async fn body<W>(&mut self, body: Body, to: &mut W) -> io::Result<()>
    where
        W: AsyncWrite + Unpin,
    {
        match body {
            Body::None => Ok(()),
            Body::Length(n) => self.exactly(n, to).await,
            Body::Chunked => loop {
                let line = self.line().await?;
                let Ok(httparse::Status::Complete((_, size))) = httparse::parse_chunk_size(&line)
                else {
                    return Err(invalid("bad chunk size"));
                };
                to.write_all(&line).await?;
                if size == 0 {
                    // Trailers, up to the empty line.
                    loop {
                        let line = self.line().await?;
                        to.write_all(&line).await?;
                        if line == b"\r\n" || line == b"\n" {
                            return Ok(());
                        }
                    }
                }
                self.exactly(size, to).await?;
                let end = self.line().await?;
                if end != b"\r\n" && end != b"\n" {
                    return Err(invalid("a chunk longer than its size"));
                }
                to.write_all(&end).await?;
            },
        }
    }

    /// Copies `n` bytes to `to`: the buffered ones first.
    async fn exactly<W: AsyncWrite + Unpin>(&mut self, n: u64, to: &mut W) -> io::Result<()> {
        let buffered = n.min(self.buf.len() as u64) as usize;
        to.write_all(&self.buf[..buffered]).await?;
        self.buf.drain(..buffered);
        let left = n - buffered as u64;
        let copied = tokio::io::copy(&mut (&mut self.read).take(left), to).await?;
        match copied == left {
            true => Ok(()),
            false => Err(io::ErrorKind::UnexpectedEof.into()),
        }
    }

    /// One line, its end included.
    async fn line(&mut self) -> io::Result<Vec<u8>> {
        let mut seen = 0;
        loop {
            if let Some(at) = self.buf[seen..].iter().position(|&b| b == b'\n') {
                return Ok(self.buf.drain(..seen + at + 1).collect());
            }
            seen = self.buf.len();
            if seen > MAX_LINE {
                return Err(invalid("line too long in a chunked body"));
            }
            if self.fill().await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// The reader and what was read from it and not used yet.
    pub(super) fn into_parts(self) -> (R, Vec<u8>) {
        (self.read, self.buf)
    }

    /// Copies everything that is left to `to` (a tunnel).
    pub(super) async fn rest<W: AsyncWrite + Unpin>(mut self, to: &mut W) -> io::Result<()> {
        to.write_all(&self.buf).await?;
        self.buf.clear();
        tokio::io::copy(&mut self.read, to).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forwarded(head: &[u8]) -> (Destination, String, Body) {
        let r = Request::parse(head).unwrap();
        match r.ask {
            Ask::Forward { head, body, .. } => (r.dest, String::from_utf8(head).unwrap(), body),
            Ask::Connect => panic!("not a forward"),
        }
    }

    #[test]
    fn connect_requests_name_their_destination() {
        let r = Request::parse(b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(r.dest, Destination::new("api.openai.com", 443));
        assert!(matches!(r.ask, Ask::Connect));
        assert!(Request::parse(b"CONNECT api.openai.com HTTP/1.1\r\n\r\n").is_err());
    }

    #[test]
    fn absolute_requests_go_upstream_in_origin_form_without_proxy_headers() {
        let (dest, head, body) = forwarded(
            b"POST http://127.0.0.1:9/v1/responses?x=1 HTTP/1.1\r\nHost: elsewhere.example\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: b\r\nAccept: */*\r\nContent-Length: 3\r\n\r\n",
        );
        assert_eq!(dest, Destination::new("127.0.0.1", 9));
        assert_eq!(
            head,
            "POST /v1/responses?x=1 HTTP/1.1\r\nHost: 127.0.0.1:9\r\nAccept: */*\r\nContent-Length: 3\r\n\r\n"
        );
        assert_eq!(body, Body::Length(3));
        let (dest, head, body) = forwarded(b"GET http://h?q HTTP/1.0\r\n\r\n");
        assert_eq!(dest, Destination::new("h", 80));
        assert!(
            head.starts_with("GET /?q HTTP/1.0\r\nHost: h\r\n"),
            "{head}"
        );
        assert_eq!(body, Body::None);
        let chunked = b"POST http://h/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        assert_eq!(forwarded(chunked).2, Body::Chunked);
    }

    #[test]
    fn other_requests_are_bad() {
        for head in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"GET https://h/ HTTP/1.1\r\n\r\n",
            b"GET http://h/ HTTP/1.1 extra\r\n\r\n",
            b"\xff\r\n\r\n",
            // Framings the proxy and the origin could read differently.
            b"POST http://h/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            b"POST http://h/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            b"POST http://h/ HTTP/1.1\r\nContent-Length: +3\r\n\r\n",
            b"POST http://h/ HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        ] {
            assert!(
                Request::parse(head).is_err(),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }
}
