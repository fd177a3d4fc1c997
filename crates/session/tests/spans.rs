//! A run seen through a `tracing` subscriber: one root span `run` with the
//! session, incident, revision and fence, and one child span per phase,
//! entered in the order of the run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

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
    name: &'static str,
    parent: Option<&'static str>,
    fields: BTreeMap<String, String>,
}

/// Records every span created and the names of the spans entered, in order.
#[derive(Clone, Default)]
struct Recorder {
    created: Arc<Mutex<Vec<(u64, Seen)>>>,
    entered: Arc<Mutex<Vec<(u64, &'static str)>>>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent = ctx
            .span(id)
            .and_then(|span| span.parent().map(|p| p.name()));
        let seen = Seen {
            name: attrs.metadata().name(),
            parent,
            fields,
        };
        self.created.lock().unwrap().push((id.into_u64(), seen));
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            self.entered
                .lock()
                .unwrap()
                .push((id.into_u64(), span.name()));
        }
    }
}

#[tokio::test]
async fn a_run_is_one_root_span_with_a_child_per_phase_in_order() {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    let _guard = tracing::subscriber::set_default(subscriber);

    let env = Env::new().await;
    let manager = env.builder(writing(&[("a.txt", "a")])).build();
    let session = manager.create(env.request("go")).await.unwrap();
    let row = settled(&manager, &session).await;
    assert!(row.status.is_terminal(), "{row:?}");
    manager.stop().await;

    let created = recorder.created.lock().unwrap().clone();
    let runs: Vec<&(u64, Seen)> = created.iter().filter(|(_, s)| s.name == "run").collect();
    assert_eq!(runs.len(), 1, "one run span: {created:#?}");
    let (_, run) = runs[0];
    assert_eq!(run.parent, None, "the run span is a root");
    let field = |name: &str| run.fields.get(name).cloned().unwrap_or_default();
    assert_eq!(field("session_id"), session.id.to_string());
    assert_eq!(field("incident_id"), env.incident.id.to_string());
    assert_eq!(field("revision"), "1");
    assert_eq!(field("fence"), row.fence.to_string());

    let children: Vec<u64> = created
        .iter()
        .filter(|(_, s)| s.parent == Some("run"))
        .map(|(id, _)| *id)
        .collect();
    let mut order: Vec<&'static str> = Vec::new();
    for (id, name) in recorder.entered.lock().unwrap().iter() {
        if children.contains(id) && !order.contains(name) {
            order.push(name);
        }
    }
    assert_eq!(order, ["prepare", "execute", "land", "settle", "cleanup"]);
}
