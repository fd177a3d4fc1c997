//! `docs/architecture.md`'s code map describes every workspace member.
//!
//! The code map is the text from the line `## Code map` to the next `## `
//! heading. An entry is a `### ` heading whose first code span is a package
//! name (`` ### `korvus-store` ``), and runs to the next `### ` heading.
//! The rules:
//!
//! - every workspace member has an entry;
//! - every entry names a workspace member or a crate of the layer table (a
//!   crate about to be written may be described before it exists);
//! - every entry states its rule in a line starting with
//!   `**Architecture invariant:**`.

use super::layers::layer_of;

/// The code map's problems, in words.
pub(crate) fn violations(members: &[String], doc: &str) -> Vec<String> {
    let Some(map) = section(doc) else {
        return vec!["docs/architecture.md has no `## Code map` section".to_owned()];
    };
    let entries = entries(map);
    let mut out = Vec::new();
    for member in members {
        if !entries.iter().any(|e| e.name == *member) {
            out.push(format!(
                "workspace member {member} has no entry (### `{member}`) in docs/architecture.md's code map"
            ));
        }
    }
    for entry in &entries {
        if !members.contains(&entry.name) && layer_of(&entry.name).is_none() {
            out.push(format!(
                "docs/architecture.md's code map describes {}, which is neither a workspace member nor on a layer",
                entry.name
            ));
        }
        if !entry.has_invariant {
            out.push(format!(
                "the code map entry of {} has no **Architecture invariant:** line",
                entry.name
            ));
        }
    }
    out
}

struct Entry {
    name: String,
    has_invariant: bool,
}

fn section(doc: &str) -> Option<&str> {
    let start = doc
        .match_indices("## Code map\n")
        .find(|(i, _)| *i == 0 || doc[..*i].ends_with('\n'))
        .map(|(i, m)| i + m.len())?;
    let rest = &doc[start..];
    let end = rest.find("\n## ").map_or(rest.len(), |i| i + 1);
    Some(&rest[..end])
}

fn entries(map: &str) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for line in map.lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            let name = heading.split('`').nth(1).unwrap_or(heading).trim();
            out.push(Entry {
                name: name.to_owned(),
                has_invariant: false,
            });
        } else if line.starts_with("**Architecture invariant:**") {
            if let Some(last) = out.last_mut() {
                last.has_invariant = true;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "# Architecture\n\n## Entry points\n\n### `korvus-ghost`\n\n\
        ## Code map\n\n### `korvus-store`\n\nRows.\n\n**Architecture invariant:** none below.\n\n\
        ### `xtask`\n\nTools.\n\n**Architecture invariant:** no korvus crate.\n\n\
        ## Cross-cutting concerns\n\n### `korvus-log`\n";

    fn members(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_complete_code_map_passes() {
        let found = violations(&members(&["korvus-store", "xtask"]), DOC);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_member_missing_from_the_code_map_is_caught() {
        // korvus-log has a heading, but outside the code map section.
        let found = violations(&members(&["korvus-store", "korvus-log", "xtask"]), DOC);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("korvus-log"), "{found:?}");
    }

    #[test]
    fn an_entry_for_no_crate_is_caught_but_a_planned_crate_is_fine() {
        let doc = DOC.replace(
            "## Cross-cutting",
            "### `korvus-gone`\n\n**Architecture invariant:** x.\n\n\
             ### `korvus-e2e`\n\n**Architecture invariant:** y.\n\n## Cross-cutting",
        );
        let found = violations(&members(&["korvus-store", "xtask"]), &doc);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("korvus-gone"), "{found:?}");
    }

    #[test]
    fn an_entry_without_an_invariant_is_caught() {
        let doc = DOC.replace("**Architecture invariant:** no korvus crate.", "");
        let found = violations(&members(&["korvus-store", "xtask"]), &doc);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("xtask"), "{found:?}");
    }

    #[test]
    fn a_doc_without_a_code_map_is_caught() {
        let found = violations(&members(&["xtask"]), "# Architecture\n");
        assert_eq!(found.len(), 1, "{found:?}");
    }
}
