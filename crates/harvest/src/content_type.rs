//! [`content_type_for`]: the MIME type a harvested file is stored with.

/// What sessions commonly write, by lower-case extension. Checked before
/// `mime_guess`, so these answers never depend on its version.
const TABLE: &[(&str, &str)] = &[
    ("md", "text/markdown"),
    ("markdown", "text/markdown"),
    ("txt", "text/plain"),
    ("log", "text/plain"),
    ("json", "application/json"),
    ("jsonl", "application/x-ndjson"),
    ("csv", "text/csv"),
    ("tsv", "text/tab-separated-values"),
    ("yaml", "application/yaml"),
    ("yml", "application/yaml"),
    ("toml", "application/toml"),
    ("xml", "application/xml"),
    ("html", "text/html"),
    ("htm", "text/html"),
    ("svg", "image/svg+xml"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("pdf", "application/pdf"),
    ("gz", "application/gzip"),
    ("tar", "application/x-tar"),
    ("zip", "application/zip"),
    ("diff", "text/x-diff"),
    ("patch", "text/x-diff"),
    ("sh", "text/x-shellscript"),
    ("py", "text/x-python"),
    ("rs", "text/x-rust"),
    ("sql", "application/sql"),
];

/// The fallback for anything unknown.
pub const OCTET_STREAM: &str = "application/octet-stream";

/// The content type of a workspace path: the explicit table above, then
/// `mime_guess`'s compiled-in table, then `application/octet-stream`.
///
/// It never reads host files (such as `/etc/mime.types`), so the answer is
/// the same on every machine.
///
/// ```
/// use korvus_harvest::content_type_for;
///
/// assert_eq!(content_type_for("report.md"), "text/markdown");
/// assert_eq!(content_type_for("out/DATA.CSV"), "text/csv");
/// assert_eq!(content_type_for("no-extension"), "application/octet-stream");
/// ```
pub fn content_type_for(path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    let Some((_, ext)) = name.rsplit_once('.') else {
        return OCTET_STREAM.to_owned();
    };
    let ext = ext.to_ascii_lowercase();
    if let Some((_, ct)) = TABLE.iter().find(|(e, _)| *e == ext) {
        return (*ct).to_owned();
    }
    mime_guess::from_ext(&ext)
        .first_raw()
        .unwrap_or(OCTET_STREAM)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_pinned() {
        let expected = [
            ("report.md", "text/markdown"),
            ("notes.txt", "text/plain"),
            ("run.log", "text/plain"),
            ("data.json", "application/json"),
            ("rows.csv", "text/csv"),
            ("conf.yaml", "application/yaml"),
            ("conf.yml", "application/yaml"),
            ("page.html", "text/html"),
            ("chart.png", "image/png"),
            ("photo.JPG", "image/jpeg"),
            ("doc.pdf", "application/pdf"),
            ("workspace.tar.gz", "application/gzip"),
            ("fix.patch", "text/x-diff"),
            ("Makefile", OCTET_STREAM),
            (".hidden", OCTET_STREAM),
            ("weird.zzzunknown", OCTET_STREAM),
        ];
        for (path, ct) in expected {
            assert_eq!(content_type_for(path), ct, "{path}");
        }
    }

    #[test]
    fn mime_guess_fills_in_behind_the_table() {
        assert_eq!(content_type_for("a.mp4"), "video/mp4");
        assert_eq!(content_type_for("a.css"), "text/css");
    }
}
