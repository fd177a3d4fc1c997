//! A minimal S3 stand-in on 127.0.0.1 for what moto does not do: it
//! verifies `x-amz-checksum-sha256` the way AWS S3 does (`400 BadDigest`),
//! and it can fail `UploadPart` to exercise the abort of a multipart upload.
//! It speaks just enough HTTP/1.1 for the SDK: one request after another on
//! a connection, bodies with `Content-Length`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use korvus_blob::Sha256Digest;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the stub does with an `UploadPart`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parts {
    /// Verify it like any other PUT.
    Accept,
    /// Answer `500 InternalError`.
    Fail,
}

/// One request the stub received.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) method: String,
    pub(crate) target: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) status: u16,
}

impl Seen {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A running stub; stops when dropped.
#[derive(Debug)]
pub(crate) struct Stub {
    pub(crate) endpoint: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl Stub {
    pub(crate) async fn start(parts: Parts) -> Stub {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let log = Arc::clone(&log);
                tokio::spawn(serve(stream, parts, log));
            }
        });
        Stub {
            endpoint: format!("http://{addr}"),
            seen,
            task,
        }
    }

    /// Every request so far, in order.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(stream: TcpStream, parts: Parts, log: Arc<Mutex<Vec<Seen>>>) {
    let mut stream = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let mut words = line.split_whitespace();
        let method = words.next().unwrap_or_default().to_owned();
        let target = words.next().unwrap_or_default().to_owned();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if stream.read_line(&mut h).await.unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((name, value)) = h.split_once(':') {
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
            }
        }
        let find = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let length: usize = find("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        if stream.read_exact(&mut body).await.is_err() {
            return;
        }
        let (status, reply) = answer(
            &method,
            &target,
            find("x-amz-checksum-sha256"),
            &body,
            parts,
        );
        log.lock().unwrap().push(Seen {
            method,
            target,
            headers,
            status,
        });
        let reason = match status {
            200 => "OK",
            204 => "No Content",
            400 => "Bad Request",
            500 => "Internal Server Error",
            _ => "Not Implemented",
        };
        let head = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n\
             Content-Length: {}\r\nETag: \"stub-etag\"\r\nx-amz-request-id: stub\r\n\r\n",
            reply.len()
        );
        let stream = stream.get_mut();
        if stream.write_all(head.as_bytes()).await.is_err()
            || stream.write_all(reply.as_bytes()).await.is_err()
        {
            return;
        }
    }
}

fn error(code: &str, message: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
         <Message>{message}</Message><RequestId>stub</RequestId><HostId>stub</HostId></Error>"
    )
}

fn answer(
    method: &str,
    target: &str,
    checksum: Option<String>,
    body: &[u8],
    parts: Parts,
) -> (u16, String) {
    let query = target.split_once('?').map_or("", |(_, q)| q);
    let has = |param: &str| query.split('&').any(|p| p.split('=').next() == Some(param));
    match method {
        "POST" if has("uploads") => (
            200,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<InitiateMultipartUploadResult>\
             <Bucket>b</Bucket><Key>k</Key><UploadId>stub-upload</UploadId>\
             </InitiateMultipartUploadResult>"
                .to_owned(),
        ),
        "DELETE" if has("uploadId") => (204, String::new()),
        "PUT" if has("partNumber") && parts == Parts::Fail => (
            500,
            error("InternalError", "We encountered an internal error."),
        ),
        "PUT" => {
            let actual = BASE64.encode(Sha256Digest::of(body).as_bytes());
            match checksum {
                Some(sent) if sent != actual => (
                    400,
                    error(
                        "BadDigest",
                        "The SHA256 you specified did not match the calculated checksum.",
                    ),
                ),
                _ => (200, String::new()),
            }
        }
        _ => (501, error("NotImplemented", "The stub does not do this.")),
    }
}
