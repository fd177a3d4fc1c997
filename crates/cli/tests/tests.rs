//! End-to-end tests of the `korvus` binary, spawned as a process.

mod support;

mod demo;
mod errors;
mod services;
mod sigint;
