//! End-to-end tests of the `korvus` binary, spawned as a process.

mod support;
mod webdriver;

mod browser;
mod budget;
mod cancel;
mod closure;
mod context;
mod counters;
mod demo;
mod dialects;
mod environment;
mod errors;
mod examples;
mod handoff;
mod host;
mod metrics;
mod openapi;
mod ops;
mod papercuts;
mod private;
mod prune;
mod queue;
mod replicas;
mod replicas_hosts;
mod report;
mod resume;
mod root_agent;
mod salvage;
mod sandbox;
mod serve;
mod serve_crash;
mod services;
mod sigint;
mod terminal;
mod webhooks;
