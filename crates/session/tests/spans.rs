//! A run seen through a `tracing` subscriber: one root span `run` with the
//! session, incident, revision and fence, and one child span per phase,
//! entered in the order of the run.
//!
//! The recorder is the process's global subscriber (installed once): a
//! subscriber set for one thread only can miss spans whose callsites
//! another test registered meanwhile. Spans of other tests are recorded
//! too and told apart by the run's session id; each span gets a number of
//! its own, since the registry reuses span ids.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::support::{settled, writing, Env};

/// A span as it was created.
#[derive(Debug, Clone)]
struct Seen {
    number: u64,
    name: &'static str,
    parent: Option<u64>,
    fields: BTreeMap<String, String>,
}

/// The number a span was given when created.
struct Number(u64);

/// Records every span created and the numbers of the spans entered.
#[derive(Clone, Default)]
struct Recorder {
    next: Arc<AtomicU64>,
    created: Arc<Mutex<Vec<Seen>>>,
    entered: Arc<Mutex<Vec<u64>>>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let parent = span
            .parent()
            .and_then(|p| p.extensions().get::<Number>().map(|n| n.0));
        span.extensions_mut().insert(Number(number));
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let seen = Seen {
            number,
            name: attrs.metadata().name(),
            parent,
            fields,
        };
        self.created.lock().unwrap().push(seen);
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(n) = ctx
            .span(id)
            .and_then(|s| s.extensions().get::<Number>().map(|n| n.0))
        {
            self.entered.lock().unwrap().push(n);
        }
    }
}

fn recorder() -> &'static Recorder {
    static RECORDER: OnceLock<Recorder> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder = Recorder::default();
        let subscriber = tracing_subscriber::registry().with(recorder.clone());
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in this test binary");
        recorder
    })
}

#[tokio::test]
async fn a_run_is_one_root_span_with_a_child_per_phase_in_order() {
    let recorder = recorder();
    let env = Env::new().await;
    let manager = env.builder(writing(&[("a.txt", "a")])).build();
    let session = manager.create(env.request("go")).await.unwrap();
    let row = settled(&manager, &session).await;
    assert!(row.status.is_terminal(), "{row:?}");
    manager.stop().await;

    let created = recorder.created.lock().unwrap().clone();
    let id = session.id.to_string();
    let runs: Vec<&Seen> = created
        .iter()
        .filter(|s| s.name == "run" && s.fields.get("session_id") == Some(&id))
        .collect();
    assert_eq!(runs.len(), 1, "one run span of the session: {runs:#?}");
    let run = runs[0];
    assert_eq!(run.parent, None, "the run span is a root");
    let field = |name: &str| run.fields.get(name).cloned().unwrap_or_default();
    assert_eq!(field("incident_id"), env.incident.id.to_string());
    assert_eq!(field("revision"), "1");
    assert_eq!(field("fence"), row.fence.to_string());

    let children: BTreeMap<u64, &'static str> = created
        .iter()
        .filter(|s| s.parent == Some(run.number))
        .map(|s| (s.number, s.name))
        .collect();
    let mut order: Vec<&'static str> = Vec::new();
    for number in recorder.entered.lock().unwrap().iter() {
        if let Some(name) = children.get(number) {
            if !order.contains(name) {
                order.push(name);
            }
        }
    }
    assert_eq!(order, ["prepare", "execute", "land", "settle", "cleanup"]);
}
