//! The integration tests of korvus-http: the router on the embedded default
//! (SQLite rows and turn logs, blobs in files), driven with
//! `tower::ServiceExt::oneshot` and, for event streams, a real listener.

mod support;

mod downloads;
mod errors;
mod events;
mod guard;
mod openapi;
mod pages;
mod prune;
mod routes;
mod server;
mod view;
mod webhook;
