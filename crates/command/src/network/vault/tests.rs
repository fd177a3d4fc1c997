//! The vault's header rewriting and arming rules.

use super::*;

fn armed() -> Armed {
    let (tx, _rx) = mpsc::channel(8);
    let dest = Destination::new("api.example.test", 80);
    Vault::new()
        .credential(Credential::from_env(dest.clone(), "Authorization", "V").over_plain_http())
        .trusting(Roots::only().with(korvus_model_stub::TestCa::new().unwrap().ca_der().clone()))
        .arm(
            &[dest],
            Some(&[(OsString::from("V"), OsString::from("Bearer real"))]),
            tx,
        )
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_plain_request_gets_the_bound_header_in_place_of_the_agents() {
    let armed = armed();
    let bound = armed
        .bound(&Destination::new("API.example.test", 80))
        .unwrap();
    let head = b"GET /x HTTP/1.1\r\nHost: api.example.test\r\nauthorization: Bearer korvus-vault-placeholder\r\nAccept: */*\r\n\r\n";
    let out = String::from_utf8(armed.rewrite_head(head, bound)).unwrap();
    assert_eq!(
        out,
        "GET /x HTTP/1.1\r\nHost: api.example.test\r\nAccept: */*\r\nauthorization: Bearer real\r\n\r\n"
    );
    assert!(armed
        .bound(&Destination::new("api.example.test", 81))
        .is_none());
}

#[test]
fn credentials_outside_the_policy_or_without_a_value_fail_the_run() {
    let (tx, _rx) = mpsc::channel(8);
    let dest = Destination::new("api.example.test", 443);
    let vault = Vault::new().credential(Credential::from_env(dest.clone(), "x-token", "V"));
    let err = vault
        .arm(&[], Some(&[]), tx.clone())
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not allow"), "{err}");
    let err = vault.arm(&[dest], Some(&[]), tx).unwrap_err().to_string();
    assert!(err.contains("V is not set"), "{err}");
}
