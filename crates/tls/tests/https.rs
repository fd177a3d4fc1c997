//! The client against the scripted model server over HTTPS, trusting
//! exactly the server's throwaway authority, another one, or none.

use http_body_util::BodyExt as _;
use korvus_model_stub::{Script, StubServer, TestCa};
use korvus_tls::{http, Bytes, Full, HttpsClient, Roots, TlsError};

fn responses_request(base: &str) -> http::Request<Full<Bytes>> {
    let body = r#"{"input": [{"type": "message", "role": "user", "content": "go"}]}"#;
    http::Request::post(format!("{base}/v1/responses"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap()
}

#[tokio::test]
async fn a_client_trusting_the_servers_authority_gets_its_answer() {
    let ca = TestCa::new().unwrap();
    let stub = StubServer::start_tls(Script::default(), &ca).await.unwrap();
    let client = HttpsClient::new(&Roots::only().with(ca.ca_der().clone())).unwrap();
    let answer = client
        .send(responses_request(&stub.base_url()))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let body = answer.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("exec_command"), "{body}");
    assert_eq!(stub.requests().len(), 1);
}

#[tokio::test]
async fn a_certificate_from_another_authority_is_refused_before_any_request() {
    let ca = TestCa::new().unwrap();
    let stub = StubServer::start_tls(Script::default(), &ca).await.unwrap();
    let other = TestCa::new().unwrap();
    let client = HttpsClient::new(&Roots::only().with(other.ca_der().clone())).unwrap();
    let err = client
        .send(responses_request(&stub.base_url()))
        .await
        .unwrap_err();
    assert!(matches!(err, TlsError::Request(_)), "{err}");
    assert!(err.to_string().contains("certificate"), "{err}");
    assert!(stub.requests().is_empty(), "nothing reached the server");
}

#[tokio::test]
async fn no_roots_at_all_is_a_typed_error_and_plain_http_still_works() {
    let err = HttpsClient::new(&Roots::only()).unwrap_err();
    assert!(matches!(err, TlsError::Roots(_)), "{err}");
    let ca = TestCa::new().unwrap();
    let plain = StubServer::start(Script::default()).await.unwrap();
    let client = HttpsClient::new(&Roots::only().with(ca.ca_der().clone())).unwrap();
    let answer = client
        .send(responses_request(&plain.base_url()))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
}

#[test]
fn roots_read_a_pem_bundle_and_refuse_what_is_not_one() {
    let ca = TestCa::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("ca.pem");
    std::fs::write(&pem, ca.ca_pem()).unwrap();
    let roots = Roots::only().with_pem_file(&pem).unwrap();
    assert_eq!(roots, Roots::only().with(ca.ca_der().clone()));
    std::fs::write(&pem, "not a certificate").unwrap();
    assert!(matches!(
        Roots::only().with_pem_file(&pem),
        Err(TlsError::Roots(why)) if why.contains("no certificate")
    ));
    assert!(Roots::only()
        .with_pem_file(&dir.path().join("absent.pem"))
        .is_err());
}

#[tokio::test]
async fn a_host_given_an_address_is_reached_there_and_checked_by_its_name() {
    let ca = TestCa::new().unwrap();
    let stub = StubServer::start_tls(Script::default(), &ca).await.unwrap();
    let port = stub.addr().port();
    let roots = Roots::only().with(ca.ca_der().clone());
    // The stub's certificate names 127.0.0.1 and localhost: a name it
    // does not carry is refused even at the right address.
    let named =
        HttpsClient::resolving(&roots, &[("localhost".into(), [127, 0, 0, 1].into())]).unwrap();
    let answer = named
        .send(responses_request(&format!("https://localhost:{port}")))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let wrong =
        HttpsClient::resolving(&roots, &[("other.test".into(), [127, 0, 0, 1].into())]).unwrap();
    assert!(wrong
        .send(responses_request(&format!("https://other.test:{port}")))
        .await
        .is_err());
}
