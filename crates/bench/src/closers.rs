//! Benchmark 7: the interrupted-turn closers a reopen computes from the
//! whole turn log must stay linear in the log's length.
//!
//! The baseline is the same computation on a log a tenth as long, times
//! ten: a linear pass gives a ratio near 1, a quadratic one near 10.

use std::hint::black_box;
use std::time::Instant;

use anyhow::Result;
use korvus_log::{Event, EventKind};
use korvus_session::testing::interrupted_turn_closers;

use crate::report::{Goal, Row};
use crate::Bench;

/// A log of `n` events: one open turn, tool calls of which every other one
/// has its result.
fn log_of(n: usize) -> Vec<Event> {
    let mut log = vec![Event::new(EventKind::TurnStart { turn: 1 })];
    let mut id = 0;
    while log.len() < n {
        let call_id = format!("c{id}");
        log.push(Event::new(EventKind::ToolCall {
            call_id: call_id.clone(),
            tool: "sh".into(),
            input: Default::default(),
        }));
        if id % 2 == 0 {
            log.push(Event::new(EventKind::ToolResult {
                call_id,
                ok: true,
                output: Default::default(),
            }));
        }
        id += 1;
    }
    log
}

fn time_ms(log: &[Event]) -> f64 {
    let started = Instant::now();
    black_box(interrupted_turn_closers(black_box(log)));
    started.elapsed().as_secs_f64() * 1000.0
}

pub(crate) fn closers(b: &mut Bench) -> Result<Vec<Row>> {
    let (small, big, runs) = if b.quick {
        (4_000, 40_000, 3)
    } else {
        (40_000, 400_000, 7)
    };
    let (small_log, big_log) = (log_of(small), log_of(big));
    let scale = (big / small) as f64;
    let mut pairs = Vec::with_capacity(runs);
    for run in 0..runs {
        // A and B alternate which goes first.
        let (base, ours) = if run % 2 == 0 {
            let base = time_ms(&small_log) * scale;
            (base, time_ms(&big_log))
        } else {
            let ours = time_ms(&big_log);
            (time_ms(&small_log) * scale, ours)
        };
        pairs.push((base, ours));
    }
    Ok(vec![Row::paired(
        format!("7 interrupted-turn closers, {big} events"),
        format!("{} × the closers of {small} events", big / small),
        format!("the closers of {big} events"),
        "ms",
        &pairs,
        // Linear means 1× in theory; the larger log's working set misses
        // the caches more (measured 1.7–1.9×). A quadratic pass gives 10×.
        Goal::RatioAtMost { max: 3.0 },
    )
    .note(
        "linear in the log's length: a quadratic pass would give about 10×",
    )])
}
