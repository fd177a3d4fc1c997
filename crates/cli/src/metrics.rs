//! `GET /metrics` of `korvus serve`: what the session layer, the turn log
//! and the HTTP surface emitted through the `metrics` facade, rendered by
//! the Prometheus recorder `serve` installs, in Prometheus text format.

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use korvus_session::Manager;
use metrics_exporter_prometheus::PrometheusHandle;

/// The one route: reads the queue's depth (the store's, shared by every
/// replica), then renders every series.
pub(crate) fn router(manager: Manager, handle: PrometheusHandle) -> Router {
    Router::new().route(
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
    )
}
