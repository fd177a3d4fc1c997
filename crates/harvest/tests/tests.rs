//! Integration tests of korvus-harvest: containment, the persist
//! phase's orderings and its fault matrix, on
//! memory and filesystem backends, one module per topic. The persist phase
//! on PostgreSQL + S3 is tested in `korvus-e2e`.

mod support;

mod checkpoint;
mod containment;
mod persist_phase;
mod report;
mod streamed;
mod sweep;
