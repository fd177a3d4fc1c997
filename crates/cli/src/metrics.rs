//! `GET /metrics` of `korvus serve`: what the session layer, the turn log
//! and the HTTP surface emitted through the `metrics` facade, rendered by
//! the Prometheus recorder `serve` installs, in Prometheus text format.

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use korvus_http::ApiError;
use korvus_session::Manager;
use std::time::Duration;

use anyhow::{Context, Result};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Buckets of every `*_seconds` histogram, in seconds: from a store
/// write (milliseconds) to a long run (an hour).
const BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    3600.0,
];

/// How often the recorder's histograms are drained, scraped or not.
const UPKEEP: Duration = Duration::from_secs(5);

/// Installs the process's Prometheus recorder: histograms with
/// [`BUCKETS`] (summaries cannot be added up across replicas), drained
/// every [`UPKEEP`] by a task of its own so an unscraped server holds no
/// growing samples.
pub(crate) fn install() -> Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
        .context("invalid histogram buckets")?
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(UPKEEP);
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// The one route: reads the queue's depth (the store's, shared by every
/// replica), then renders every series. A wrong method answers the API's
/// JSON `405 method_not_allowed`; [`alone`] adds its `404 no_route` when
/// the route is served on its own listener (beside the API, the API's
/// fallback answers).
pub(crate) fn router(manager: Manager, handle: PrometheusHandle) -> Router {
    let routed = Router::new().route(
        "/metrics",
        get(move || {
            let (manager, handle) = (manager.clone(), handle.clone());
            async move {
                if let Err(e) = manager.observe_queue().await {
                    tracing::warn!(error = %e, "queue depth not read for /metrics");
                }
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    handle.render(),
                )
                    .into_response()
            }
        }),
    );
    routed.method_not_allowed_fallback(|| async {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "method not allowed on this route",
        )
    })
}

/// `router` on a listener of its own: anything but `/metrics` is the
/// API's JSON `404 no_route`.
pub(crate) fn alone(router: Router) -> Router {
    router.fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no_route", "no such route") })
}
