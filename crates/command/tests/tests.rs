//! Integration tests of `CommandRunner`, driven through a real `Manager`
//! (memory store, log and blobs; a real scratch root; real processes).

mod support;

mod blocking;
mod budget;
mod dialects;
mod drain;
mod exit_codes;
mod gateway;
mod host;
mod kill;
mod limits;
mod network;
mod protocol;
mod sandbox;
mod vault;
