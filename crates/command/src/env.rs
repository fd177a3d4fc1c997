//! [`EnvPolicy`]: which environment variables of the embedding process an
//! agent sees; and the agent's private `HOME` and `TMPDIR` ([`PrivateDirs`]).
//!
//! An agent is untrusted code steered by untrusted text, so by default it
//! sees only a small core of variables ([`CORE_VARS`]) minus anything that
//! looks like a secret ([`DEFAULT_EXCLUDES`]); the embedder opts in to more.
//! Resolution, in order:
//!
//! 1. start from the parent's environment per [`Inherit`];
//! 2. drop names matching the default excludes (unless
//!    [`EnvPolicy::keep_default_excludes`] is `false`), then those matching
//!    [`EnvPolicy::exclude`];
//! 3. when [`EnvPolicy::include_only`] is set, keep only matching names;
//! 4. add the [`EnvPolicy::pass`] names from the parent, and the
//!    [`EnvPolicy::set`] values — both override every exclude, since an
//!    agent may need its own `*_API_KEY`.
//!
//! The runner then sets `HOME` and `TMPDIR` to private per-run directories
//! and the `KORVUS_*` protocol variables; those win over everything.
//! Patterns are matched case-insensitively; `*` matches any run of
//! characters.

use std::collections::BTreeMap;
use std::ffi::OsString;

/// The variables [`Inherit::Core`] keeps.
pub const CORE_VARS: &[&str] = &["PATH", "LANG", "TZ", "USER", "SHELL", "TERM"];

/// Names never passed unless named by [`EnvPolicy::pass`] or
/// [`EnvPolicy::set`].
pub const DEFAULT_EXCLUDES: &[&str] = &[
    "*KEY*",
    "*SECRET*",
    "*TOKEN*",
    "*PASSWORD*",
    "*CREDENTIAL*",
    "DATABASE_URL",
    "KORVUS_DATABASE_URL",
    "AWS_*",
];

/// Which of the parent's variables are the starting point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Inherit {
    /// Every variable (then filtered).
    All,
    /// Only [`CORE_VARS`] (then filtered). The default.
    #[default]
    Core,
    /// None: only what [`EnvPolicy::pass`] and [`EnvPolicy::set`] add.
    None,
}

impl std::str::FromStr for Inherit {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "all" => Ok(Inherit::All),
            "core" => Ok(Inherit::Core),
            "none" => Ok(Inherit::None),
            other => Err(format!("`{other}` is not one of all, core, none")),
        }
    }
}

/// Which environment variables an agent gets.
///
/// [`EnvPolicy::resolve`] applies it, in this order: the starting point
/// ([`Inherit`]); the default excludes ([`DEFAULT_EXCLUDES`], unless
/// `keep_default_excludes` is `false`) and `exclude`; `include_only`; then
/// `pass` and `set`, which override every exclude. Patterns match
/// case-insensitively, `*` matching any run of characters.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EnvPolicy {
    /// The starting point.
    pub inherit: Inherit,
    /// Apply [`DEFAULT_EXCLUDES`] (default `true`).
    pub keep_default_excludes: bool,
    /// More name patterns to drop.
    pub exclude: Vec<String>,
    /// When not empty, only names matching one of these patterns stay.
    pub include_only: Vec<String>,
    /// Names passed from the parent whatever the excludes say.
    pub pass: Vec<String>,
    /// Variables set to a value, whatever the excludes say.
    pub set: Vec<(OsString, OsString)>,
}

impl Default for EnvPolicy {
    fn default() -> Self {
        Self {
            inherit: Inherit::Core,
            keep_default_excludes: true,
            exclude: Vec::new(),
            include_only: Vec::new(),
            pass: Vec::new(),
            set: Vec::new(),
        }
    }
}

impl EnvPolicy {
    /// The environment for an agent from the parent's `vars`, sorted by
    /// name (before `HOME`, `TMPDIR` and the `KORVUS_*` variables).
    ///
    /// ```
    /// use korvus_command::{EnvPolicy, Inherit};
    ///
    /// let parent = [("PATH", "/bin"), ("GITHUB_TOKEN", "t"), ("MY_API_KEY", "k"), ("EDITOR", "vi")]
    ///     .map(|(k, v)| (k.into(), v.into()));
    /// let mut policy = EnvPolicy::default();
    /// policy.pass = vec!["MY_API_KEY".into()];
    /// let names: Vec<String> = policy
    ///     .resolve(parent)
    ///     .into_iter()
    ///     .map(|(k, _)| k.to_string_lossy().into_owned())
    ///     .collect();
    /// assert_eq!(names, ["MY_API_KEY", "PATH"]);
    /// ```
    pub fn resolve(
        &self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        let parent: Vec<(OsString, OsString)> = vars.into_iter().collect();
        let mut out: BTreeMap<OsString, OsString> = BTreeMap::new();
        for (name, value) in &parent {
            let text = name.to_string_lossy();
            let inherited = match self.inherit {
                Inherit::All => true,
                Inherit::Core => CORE_VARS.iter().any(|c| c.eq_ignore_ascii_case(&text)),
                Inherit::None => false,
            };
            let excluded = (self.keep_default_excludes && matches_any(DEFAULT_EXCLUDES, &text))
                || matches_any(&self.exclude, &text);
            let included = self.include_only.is_empty() || matches_any(&self.include_only, &text);
            if inherited && !excluded && included {
                out.insert(name.clone(), value.clone());
            }
        }
        for name in &self.pass {
            let found = parent.iter().find(|(k, _)| k.to_string_lossy() == *name);
            if let Some((k, v)) = found {
                out.insert(k.clone(), v.clone());
            }
        }
        for (k, v) in &self.set {
            out.insert(k.clone(), v.clone());
        }
        out.into_iter().collect()
    }
}

/// A variable of korvus's own: from the runner's environment source
/// when it has one (the last value wins, as in an environment), else from
/// this process's environment. What korvus reads secrets from (the model
/// key, a vault credential), never the agent.
pub(crate) fn lookup(source: Option<&[(OsString, OsString)]>, name: &str) -> Option<OsString> {
    match source {
        Some(vars) => vars
            .iter()
            .rev()
            .find(|(k, _)| k.as_os_str() == std::ffi::OsStr::new(name))
            .map(|(_, v)| v.clone()),
        None => std::env::var_os(name),
    }
}

fn matches_any<S: AsRef<str>>(patterns: &[S], name: &str) -> bool {
    patterns.iter().any(|p| glob(p.as_ref(), name))
}

/// Case-insensitive match of `name` against `pattern`, where `*` matches
/// any run of characters (also none).
///
/// It compares bytes after ASCII-uppercasing both, which never slices a
/// string: both are UTF-8, and a UTF-8 literal found in UTF-8 text starts
/// and ends on char boundaries, so bytes agree with chars here.
fn glob(pattern: &str, name: &str) -> bool {
    let pattern = pattern.to_ascii_uppercase();
    let name = name.to_ascii_uppercase();
    let mut parts = pattern.as_bytes().split(|&b| b == b'*');
    let first = parts.next().unwrap_or_default();
    let Some(rest) = name.as_bytes().strip_prefix(first) else {
        return false;
    };
    let others: Vec<&[u8]> = parts.collect();
    let Some((last, middles)) = others.split_last() else {
        // No `*`: the whole name is the literal.
        return rest.is_empty();
    };
    // The suffix is taken off after the prefix, so the two never overlap.
    let Some(mut rest) = rest.strip_suffix(*last) else {
        return false;
    };
    for middle in middles.iter().filter(|m| !m.is_empty()) {
        match rest.windows(middle.len()).position(|w| w == *middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

/// The agent's private `HOME` and `TMPDIR`, inside its scratch dir.
pub(crate) struct PrivateDirs {
    pub(crate) home: std::path::PathBuf,
    pub(crate) tmp: std::path::PathBuf,
}

impl PrivateDirs {
    pub(crate) async fn make(scratch: &std::path::Path) -> Result<Self, crate::CommandError> {
        let dirs = Self {
            home: scratch.join(korvus_workspace::AGENT_HOME),
            tmp: scratch.join(korvus_workspace::AGENT_TMP),
        };
        for path in [&dirs.home, &dirs.tmp] {
            tokio::fs::create_dir_all(path).await.map_err(|source| {
                crate::CommandError::PrivateDir {
                    path: path.clone(),
                    source,
                }
            })?;
        }
        Ok(dirs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    fn names(out: &[(OsString, OsString)]) -> Vec<String> {
        out.iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect()
    }

    const PARENT: &[(&str, &str)] = &[
        ("PATH", "/usr/bin"),
        ("HOME", "/root"),
        ("LANG", "C.UTF-8"),
        ("EDITOR", "vi"),
        ("GITHUB_TOKEN", "ghp"),
        ("aws_secret_access_key", "s"),
        ("AWS_REGION", "eu"),
        ("DATABASE_URL", "postgres://u:pw@h/db"),
        ("KORVUS_DATABASE_URL", "postgres://u:pw@h/db"),
        ("OPENAI_API_KEY", "sk"),
        ("DB_PASSWORD", "pw"),
        ("GCP_CREDENTIALS", "c"),
    ];

    #[test]
    fn globs_match_case_insensitively() {
        assert!(glob("*KEY*", "openai_api_key"));
        assert!(glob("AWS_*", "aws_region"));
        assert!(glob("*", ""));
        assert!(glob("A*B*C", "AxxBxxC"));
        assert!(!glob("A*B*C", "AxxCxxB"));
        assert!(!glob("AWS_*", "MY_AWS_X"));
        assert!(glob("DATABASE_URL", "database_url"));
        assert!(!glob("DATABASE_URL", "DATABASE_URLS"));
        assert!(!glob("AB*BA", "ABA"));
        assert!(!glob("*_KEY", "ÄAÖ"));
        assert!(glob("*Ä*", "xÄy"));
        assert!(glob("ä*", "ä_KEY"));
        assert!(!glob("ä*", "Ä_KEY"), "only ASCII letters fold");
        assert!(glob("A**B", "AB"));
    }

    #[test]
    fn a_non_ascii_name_resolves_without_panicking() {
        let policy = EnvPolicy {
            inherit: Inherit::All,
            exclude: vec!["*_KEY".into()],
            ..EnvPolicy::default()
        };
        let out = policy.resolve(vars(&[("ÄAÖ", "1"), ("Ö_KEY", "2")]));
        assert_eq!(names(&out), ["ÄAÖ"]);
    }

    /// The reference: a plain backtracking match over chars, ASCII letters
    /// folded, `*` matching any run of chars.
    fn reference(pattern: &[char], name: &[char]) -> bool {
        match pattern.split_first() {
            None => name.is_empty(),
            Some(('*', rest)) => (0..=name.len()).any(|skip| reference(rest, &name[skip..])),
            Some((p, rest)) => name
                .split_first()
                .is_some_and(|(n, tail)| p.eq_ignore_ascii_case(n) && reference(rest, tail)),
        }
    }

    /// Text from a small alphabet (so patterns often match) mixed with any
    /// Unicode scalar.
    fn text(star: bool) -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let small = if star { "[aAkK_Ää*]" } else { "[aAkK_Ää]" };
        prop::collection::vec(
            prop_oneof![small, any::<char>().prop_map(String::from)],
            0..10,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        #[test]
        fn glob_never_panics_and_agrees_with_the_reference(
            pattern in text(true),
            name in text(false),
        ) {
            let chars = |s: &str| s.chars().collect::<Vec<char>>();
            proptest::prop_assert_eq!(
                glob(&pattern, &name),
                reference(&chars(&pattern), &chars(&name))
            );
        }
    }

    #[test]
    fn the_default_is_core_without_secrets() {
        let out = EnvPolicy::default().resolve(vars(PARENT));
        assert_eq!(names(&out), ["LANG", "PATH"]);
    }

    #[test]
    fn all_still_drops_everything_that_looks_like_a_secret() {
        let policy = EnvPolicy {
            inherit: Inherit::All,
            ..EnvPolicy::default()
        };
        let out = names(&policy.resolve(vars(PARENT)));
        assert_eq!(out, ["EDITOR", "HOME", "LANG", "PATH"]);
    }

    #[test]
    fn pass_and_set_override_the_excludes_and_none_starts_empty() {
        let policy = EnvPolicy {
            inherit: Inherit::None,
            pass: vec!["OPENAI_API_KEY".into(), "MISSING".into()],
            set: vec![("MY_TOKEN".into(), "mine".into())],
            ..EnvPolicy::default()
        };
        let out = policy.resolve(vars(PARENT));
        assert_eq!(names(&out), ["MY_TOKEN", "OPENAI_API_KEY"]);
        assert_eq!(out[0].1, "mine");
    }

    #[test]
    fn exclude_and_include_only_narrow_further() {
        let policy = EnvPolicy {
            inherit: Inherit::All,
            exclude: vec!["edit*".into()],
            include_only: vec!["*A*".into(), "PATH".into()],
            ..EnvPolicy::default()
        };
        assert_eq!(names(&policy.resolve(vars(PARENT))), ["LANG", "PATH"]);
    }

    #[test]
    fn inherit_parses_from_text() {
        assert_eq!("CORE".parse::<Inherit>(), Ok(Inherit::Core));
        assert_eq!("all".parse::<Inherit>(), Ok(Inherit::All));
        assert_eq!("none".parse::<Inherit>(), Ok(Inherit::None));
        assert!("some".parse::<Inherit>().is_err());
    }
}
