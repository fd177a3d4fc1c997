//! The webhook deliverer against a receiver on loopback: every event of the
//! outbox arrives signed, a refused attempt is retried with the same id,
//! and an event is delivered once the receiver accepts it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use korvus_http::webhook::{Deliverer, WebhookConfig, WebhookSecret};
use korvus_store::{
    exit_reason, Counters, MemoryStore, NewIncident, NewSession, Outbox, SessionId, SessionStatus,
    Settlement, Store,
};
use tokio_util::sync::CancellationToken;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// What the receiver got: per `webhook-id`, each attempt's body.
type Received = Arc<Mutex<BTreeMap<String, Vec<serde_json::Value>>>>;

/// A receiver that checks every signature and refuses the first
/// `refuse` requests with 503.
async fn receiver(refuse: usize) -> (String, Received) {
    let received: Received = Arc::default();
    let seen = Arc::new(Mutex::new(0usize));
    let secret = WebhookSecret::parse(SECRET).unwrap();
    let store = Arc::clone(&received);
    let app = Router::new().route(
        "/hook",
        post(move |headers: HeaderMap, body: String| {
            let (store, seen, secret) = (Arc::clone(&store), Arc::clone(&seen), secret.clone());
            async move {
                let h = |n: &str| headers.get(n).unwrap().to_str().unwrap().to_owned();
                let (id, ts) = (h("webhook-id"), h("webhook-timestamp"));
                let expected = secret.sign(&id, ts.parse().unwrap(), body.as_bytes());
                assert_eq!(h("webhook-signature"), expected, "signature of {id}");
                let json: serde_json::Value = serde_json::from_str(&body).unwrap();
                store.lock().unwrap().entry(id).or_default().push(json);
                let mut n = seen.lock().unwrap();
                *n += 1;
                if *n <= refuse {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    StatusCode::NO_CONTENT
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, received)
}

fn settlement(status: SessionStatus, reason: &str) -> Settlement {
    Settlement {
        fence: 1,
        status,
        exit_reason: Some(reason.into()),
        counters: Counters::default(),
    }
}

#[tokio::test]
async fn every_event_arrives_signed_and_a_refused_one_is_retried_with_its_id() {
    let store = Arc::new(MemoryStore::new());
    let inc = store
        .create_incident(NewIncident {
            title: "hooks".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        let s = store
            .create_session(NewSession {
                runner: None,
                admission: Default::default(),
                lease: None,
                id: SessionId::new(),
                incident_id: inc.id,
                prompt: format!("run {i}"),
                workspace_ref: None,
            })
            .await
            .unwrap();
        let done = if i == 4 {
            settlement(SessionStatus::Running, exit_reason::AWAITING_USER)
        } else {
            settlement(SessionStatus::Completed, "completed")
        };
        store.settle_session(s.id, done).await.unwrap();
        ids.push(s.id);
    }
    let (url, received) = receiver(2).await;
    let mut config = WebhookConfig::new(url, WebhookSecret::parse(SECRET).unwrap());
    config.poll = Duration::from_millis(20);
    config.backoff = Duration::from_millis(10);
    let outbox: Arc<dyn Outbox> = store.clone();
    let deliverer = Deliverer::new(Arc::clone(&outbox), config).unwrap();
    let stop = CancellationToken::new();
    let running = tokio::spawn(deliverer.run(stop.clone()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while outbox.undelivered().await.unwrap() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "not all delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    running.await.unwrap();

    let got = received.lock().unwrap().clone();
    assert_eq!(got.len(), 5, "one id per event: {got:?}");
    let attempts: usize = got.values().map(Vec::len).sum();
    assert_eq!(attempts, 7, "two refused attempts were made again");
    for (id, bodies) in &got {
        assert!(
            bodies.windows(2).all(|w| w[0] == w[1]),
            "{id}: one body per event"
        );
        let body = &bodies[0];
        let session: SessionId = body["data"]["session_id"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(ids.contains(&session));
        let waiting = session == ids[4];
        assert_eq!(
            body["type"],
            if waiting {
                "session.waiting"
            } else {
                "session.ended"
            }
        );
        let kind = if waiting { "waiting" } else { "ended" };
        assert_eq!(id, &format!("{session}.1.1.{kind}"));
        assert_eq!(body["data"]["fence"], 1);
        assert_eq!(body["data"]["incident_id"], inc.id.to_string());
    }
}

/// Against a mocked outbox: a refused attempt is given back by its
/// claimer with the backoff of its attempt count, and never marked
/// delivered.
#[tokio::test]
async fn a_refused_attempt_is_given_back_with_the_backoff_of_its_attempts() {
    use korvus_store::{MockOutbox, OutboxEvent, OutboxKey, OutboxKind};
    let (url, received) = receiver(usize::MAX).await;
    let key = OutboxKey {
        session_id: SessionId::new(),
        revision: 2,
        fence: 3,
        kind: OutboxKind::Ended,
    };
    let event = OutboxEvent {
        key,
        incident_id: korvus_store::IncidentId::new(),
        status: SessionStatus::Failed,
        exit_reason: Some("agent_error".into()),
        occurred_at: chrono::Utc::now(),
        attempts: 3,
    };
    let mut outbox = MockOutbox::new();
    outbox
        .expect_claim_events()
        .times(1)
        .returning(move |_, limit, ttl| {
            assert_eq!((limit, ttl), (8, Duration::from_secs(30)));
            Ok(vec![event.clone()])
        });
    outbox
        .expect_mark_failed()
        .withf(move |k, _, retry_in, error| {
            // The third attempt's ceiling is 40 ms; the wait is jittered
            // between half of it and all of it.
            let jittered =
                (Duration::from_millis(20)..=Duration::from_millis(40)).contains(retry_in);
            *k == key && jittered && error.contains("503")
        })
        .times(1)
        .returning(|_, _, _, _| Ok(()));
    outbox.expect_mark_delivered().never();
    let mut config = WebhookConfig::new(url, WebhookSecret::parse(SECRET).unwrap());
    config.backoff = Duration::from_millis(10);
    let deliverer = Deliverer::new(Arc::new(outbox), config).unwrap();
    assert_eq!(deliverer.deliver_due().await.unwrap(), 1);
    let got = received.lock().unwrap().clone();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        vec![&format!("{}.2.3.ended", key.session_id)]
    );
}
