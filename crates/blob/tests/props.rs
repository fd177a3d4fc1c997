//! Property tests: blob keys and file-name sanitising on arbitrary input
//! never panic, never escape their prefix, and round-trip.

use korvus_blob::{sanitize_file_name, BlobKey, MAX_KEY_BYTES};
use proptest::prelude::*;

/// Bounded in CI: each property runs this many cases.
const CASES: u32 = 256;

/// Strings biased towards what breaks keys: separators, dots, controls.
fn keyish() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just("/".to_owned()),
            Just(".".to_owned()),
            Just("..".to_owned()),
            Just("\\".to_owned()),
            Just("\0".to_owned()),
            "[a-z0-9_-]{1,8}",
            any::<char>().prop_map(String::from),
        ],
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn a_key_is_valid_exactly_when_it_keeps_the_rules(text in keyish()) {
        match BlobKey::new(text.clone()) {
            Ok(key) => {
                prop_assert_eq!(key.as_str(), text.as_str());
                prop_assert!(!text.is_empty() && text.len() <= MAX_KEY_BYTES);
                prop_assert!(!text.starts_with('/') && !text.contains('\\'));
                for segment in text.split('/') {
                    prop_assert!(!segment.is_empty() && segment != "." && segment != "..");
                    prop_assert!(!segment.chars().any(char::is_control));
                }
            }
            Err(_) => {
                let breaks_a_rule = text.is_empty()
                    || text.len() > MAX_KEY_BYTES
                    || text.contains('\\')
                    || text.chars().any(char::is_control)
                    || text.split('/').any(|s| s.is_empty() || s == "." || s == "..");
                prop_assert!(breaks_a_rule, "refused a valid key {:?}", text);
            }
        }
    }

    #[test]
    fn a_sanitised_file_name_is_one_valid_segment(name in keyish()) {
        let clean = sanitize_file_name(&name);
        prop_assert!(!clean.contains('/'), "{:?} -> {:?}", name, clean);
        prop_assert!(BlobKey::new(format!("prefix/{clean}")).is_ok(), "{:?} -> {:?}", name, clean);
        prop_assert_eq!(sanitize_file_name(&clean), clean.clone(), "idempotent");
    }
}
