//! What a manager's runs emit through the `metrics` facade, rendered by a
//! Prometheus recorder installed for this test only: a completed run and
//! a cancelled one give the documented series with the expected counts,
//! and no label carries an id.

use std::collections::BTreeMap;
use std::time::Duration;

use korvus_runner::{ExitReason, RunOutcome};
use korvus_session::metrics as m;
use metrics_exporter_prometheus::PrometheusBuilder;

use crate::support::{settled, writing, Env, ScriptRunner};

/// `name{labels} value` lines of a Prometheus text page, by series.
fn series(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

#[tokio::test]
async fn a_completed_and_a_cancelled_run_are_counted_without_ids() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _guard = metrics::set_default_local_recorder(&recorder);

    let env = Env::new().await;
    let done = env
        .builder(writing(&[("report.md", "# Report\n"), ("a.txt", "a")]))
        .build();
    let first = done.create(env.request("go")).await.unwrap();
    settled(&done, &first).await;
    let waits = env
        .builder(ScriptRunner::new(|ctx, _| async move {
            ctx.cancel.cancelled().await;
            Ok(RunOutcome::new(ExitReason::CANCELLED, Default::default())
                .with_author_finished(false))
        }))
        .build();
    let second = waits.create(env.request("wait")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    waits.cancel(second.id).await.unwrap();
    settled(&waits, &second).await;
    done.stop().await;
    waits.stop().await;

    let text = handle.render();
    let got = series(&text);
    let value = |s: &str| {
        got.get(s)
            .copied()
            .unwrap_or_else(|| panic!("no {s} in\n{text}"))
    };
    assert_eq!(value(m::RUNS_STARTED), 2.0);
    assert_eq!(value(m::RUNS_ACTIVE), 0.0);
    assert_eq!(
        value(&format!("{}{{exit_reason=\"completed\"}}", m::SETTLED)),
        1.0
    );
    assert_eq!(
        value(&format!("{}{{exit_reason=\"cancelled\"}}", m::SETTLED)),
        1.0
    );
    assert_eq!(value(&format!("{}{{via=\"local\"}}", m::CANCELS)), 1.0);
    assert_eq!(value(&format!("{}_count", m::CANCEL_SECONDS)), 1.0);
    assert_eq!(value(&format!("{}_count", m::RUN_SECONDS)), 2.0);
    for phase in ["prepare", "execute", "land", "settle", "cleanup"] {
        let count = value(&format!("{}_count{{phase=\"{phase}\"}}", m::PHASE_SECONDS));
        assert_eq!(count, 2.0, "phase {phase}");
    }
    // report.md and a.txt of the first run; the cancelled run wrote none.
    assert_eq!(value(m::PERSIST_FILES), 2.0, "{text}");
    let report = "# Report\n";
    assert_eq!(value(m::PERSIST_BYTES), (report.len() + 1) as f64);
    assert_eq!(value(&format!("{}_count", m::PERSIST_SECONDS)), 2.0);
    for id in [
        first.id.to_string(),
        second.id.to_string(),
        env.incident.id.to_string(),
    ] {
        assert!(!text.contains(&id), "an id in a label:\n{text}");
    }
}
