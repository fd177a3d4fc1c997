//! Benchmark 18: the turn-log download streams. A `JsonlLog` of 1,000,000
//! events (20,000 under `--quick`) downloaded over HTTP by 8 clients at
//! once from `korvus-http` on 127.0.0.1: the peak resident memory the
//! downloads add, per download, and the bytes each client got against
//! `korvus export`'s (`JsonlExport`), compared by length and checksum.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use korvus_log::{Access, JsonlExport, LogId, TurnLog};
use korvus_session::Manager;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::fixtures::{leased_session, logs_and_incident, long_log};
use crate::large::{reset_peak, status_mib};
use crate::report::{Goal, Row};
use crate::runners::ParkedRunner;
use crate::sql::ms;
use crate::Bench;

const DOWNLOADS: usize = 8;

pub(crate) async fn export_download(b: &mut Bench) -> Result<Vec<Row>> {
    let events = if b.quick { 20_000 } else { 1_000_000 };
    let (logs, store, incident) = logs_and_incident(&b.work.join("export"), "export").await?;
    let id = leased_session(&*store, incident, "long".into()).await?.id;
    let log_id = LogId::from_uuid(id.as_uuid());
    let fill = Instant::now();
    long_log(&logs, log_id, events).await?;
    let fill_secs = fill.elapsed().as_secs_f64();
    // The reference: what `korvus export` writes, checksummed as it streams.
    let reader = logs.open(log_id, Access::Read).await?;
    let mut export = JsonlExport::new(&reader);
    let mut reference = Checksum::default();
    while let Some(chunk) = export.next_chunk().await? {
        reference.add(&chunk);
    }
    let manager = Manager::builder(store, Arc::new(ParkedRunner { barrier: None }))
        .turn_log(logs)
        .build();
    let router = korvus_http::Api::default()
        .view(false)
        .router(manager.clone());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let port = listener.local_addr()?.port();
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    reset_peak()?;
    let before = status_mib("VmRSS:")?;
    let t = Instant::now();
    let path = format!("/api/sessions/{id}/log");
    let got = futures::future::try_join_all((0..DOWNLOADS).map(|_| download(port, &path))).await?;
    let took = ms(t.elapsed());
    let peak = status_mib("VmHWM:")?;
    server.abort();
    manager.stop().await;
    for sum in &got {
        if *sum != reference {
            bail!("a download differs from the export: {sum:?} against {reference:?}");
        }
    }
    let per_download = (peak - before) / DOWNLOADS as f64;
    b.details.insert(
        "18_export".into(),
        serde_json::json!({
            "events": events, "bytes": reference.len, "fill_secs": fill_secs,
            "downloads_ms": took, "rss_before_mib": before, "peak_mib": peak,
        }),
    );
    Ok(vec![Row::paired(
        format!("18 log export of {events} events, {DOWNLOADS} downloads at once: peak RSS growth per download"),
        "MiB of log per download",
        "(VmHWM − VmRSS before) / downloads",
        "MiB",
        &[(reference.len as f64 / f64::from(1 << 20), per_download)],
        Goal::ValueAtMost {
            max: 16.0,
            ratio_max: None,
        },
    )
    .note(format!(
        "JsonlLog, korvus-http on 127.0.0.1 in the bench process, HTTP/1.0 clients reading to the end; \
         every download equals korvus export's bytes (length and checksum); the {DOWNLOADS} downloads took {took:.0} ms"
    ))])
}

/// A byte count and FNV-1a checksum, the same whatever the chunking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Checksum {
    len: u64,
    hash: u64,
}

impl Default for Checksum {
    fn default() -> Self {
        Self {
            len: 0,
            hash: 0xcbf2_9ce4_8422_2325,
        }
    }
}

impl Checksum {
    fn add(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.hash = (self.hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.len += bytes.len() as u64;
    }
}

/// One download over HTTP/1.0 (the body ends with the connection), checked
/// as it arrives; nothing is kept.
async fn download(port: u16, path: &str) -> Result<Checksum> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut head = Vec::new();
    let mut sum = Checksum::default();
    let mut in_body = false;
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        if in_body {
            sum.add(&buf[..n]);
            continue;
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            let status = std::str::from_utf8(&head[..end]).context("head")?;
            if !status.starts_with("HTTP/1.0 200") && !status.starts_with("HTTP/1.1 200") {
                bail!("download answered {}", status.lines().next().unwrap_or(""));
            }
            sum.add(&head[end + 4..]);
            in_body = true;
            head = Vec::new();
        }
    }
    if !in_body {
        bail!("the download ended before its body");
    }
    Ok(sum)
}
