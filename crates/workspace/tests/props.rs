//! Property tests: workspace paths and context paths on arbitrary input
//! never panic, never leave the scratch dir, and round-trip.

use korvus_workspace::{context_path, WorkspacePath, CONTEXT_DIR};
use proptest::prelude::*;

/// Bounded in CI: each property runs this many cases.
const CASES: u32 = 256;

fn pathish() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just("/".to_owned()),
            Just(".".to_owned()),
            Just("..".to_owned()),
            Just("\\".to_owned()),
            Just("\0".to_owned()),
            "[a-z0-9._-]{1,8}",
            any::<char>().prop_map(String::from),
        ],
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn a_valid_workspace_path_stays_inside_and_round_trips(text in pathish()) {
        if let Ok(path) = WorkspacePath::new(text.clone()) {
            prop_assert_eq!(path.as_str(), text.as_str());
            prop_assert!(!text.starts_with('/'));
            prop_assert!(path.segments().all(|s| !s.is_empty() && s != "." && s != ".."));
            prop_assert!(std::path::Path::new(path.as_str()).is_relative());
        }
    }

    #[test]
    fn a_context_path_is_always_one_file_under_context(n in any::<u32>(), name in pathish()) {
        let path = context_path(n, &name);
        prop_assert!(WorkspacePath::new(path.as_str()).is_ok(), "{:?}", path);
        prop_assert_eq!(path.segments().count(), 2);
        prop_assert!(path.is_under(&WorkspacePath::new(CONTEXT_DIR).unwrap()));
        prop_assert_eq!(context_path(n, &name), path, "deterministic");
    }
}
