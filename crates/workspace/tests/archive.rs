//! `workspace.tar.gz`: packing, unpacking, storing.

use korvus_store::StoreExt as _;
use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use flate2::read::GzDecoder;
use korvus_blob::{artifact_key, BlobKey, BlobStore, MemoryBlobStore, Sha256Digest};
use korvus_store::{ArtifactKind, MemoryStore, NewIncident, NewSession, Store};
use korvus_workspace::{
    archive, archive_with, store_archive, ArchiveConfig, WorkspaceError, ARCHIVE_PATH,
    DEFAULT_ARCHIVE_MAX_BYTES,
};
use tempfile::TempDir;

use korvus_testkit::faults::BlobFault;
use korvus_testkit::fixtures::HostileWorkspace;

use crate::support::{fault_blobs, scratch};

/// Regular files below `dir`, relative path → bytes (symlinks not followed;
/// names need not be UTF-8).
fn regular_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in fs::read_dir(root.join(rel)).unwrap() {
            let entry = entry.unwrap();
            let child = rel.join(entry.file_name());
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                walk(root, &child, out);
            } else if kind.is_file() {
                out.insert(child.clone(), fs::read(root.join(&child)).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, Path::new(""), &mut out);
    out
}

#[tokio::test]
async fn the_archive_has_no_symlinks_and_unpacks_to_the_same_regular_files() {
    let s = scratch().await;
    let dir = s.dir.path();
    fs::write(dir.join("report.md"), "# Findings\n").unwrap();
    fs::create_dir_all(dir.join("out/deep/er")).unwrap();
    fs::write(dir.join("out/b.txt"), "b").unwrap();
    fs::write(dir.join("out/a.txt"), vec![0u8, 1, 2, 255]).unwrap();
    fs::write(dir.join("out/deep/er/c.txt"), "c".repeat(100_000)).unwrap();
    fs::write(dir.join("empty"), "").unwrap();
    fs::create_dir(dir.join("empty-dir")).unwrap();
    let long = format!("out/{}", "n".repeat(200));
    fs::write(dir.join(&long), "long name").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.join("passwd")).unwrap();
    std::os::unix::fs::symlink("out", dir.join("out-link")).unwrap();
    let fifo = dir.join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());

    let packed = archive(dir).await.unwrap();
    let bytes = packed.read_bytes().await.unwrap();
    assert_eq!(packed.files, 6);
    assert_eq!(packed.dirs, 4, "out, out/deep, out/deep/er, empty-dir");
    assert_eq!(packed.symlinks_left_out, 2);
    assert_eq!(packed.specials_left_out, 1);
    assert!(packed.unreadable.is_empty());
    assert!(packed.changed.is_empty());
    assert_eq!(packed.size, bytes.len() as u64);
    assert_eq!(packed.sha256, Sha256Digest::of(&bytes));

    // Entries: no symlinks or specials, sorted, relative.
    let mut tar = tar::Archive::new(GzDecoder::new(&bytes[..]));
    let mut names = Vec::new();
    for entry in tar.entries().unwrap() {
        let entry = entry.unwrap();
        let kind = entry.header().entry_type();
        assert!(kind.is_file() || kind.is_dir(), "{kind:?}");
        let path = entry.path().unwrap().into_owned();
        assert!(path.is_relative());
        names.push(path);
    }
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "entries are in sorted order");
    assert_eq!(names.len(), 10);

    // Unpacks to the same regular files, byte for byte.
    let unpacked = TempDir::new().unwrap();
    tar::Archive::new(GzDecoder::new(&bytes[..]))
        .unpack(unpacked.path())
        .unwrap();
    assert_eq!(regular_files(unpacked.path()), regular_files(dir));
    assert!(unpacked.path().join("empty-dir").is_dir());
    assert!(fs::symlink_metadata(unpacked.path().join("passwd")).is_err());

    // Deterministic: the same tree gives the same bytes.
    let again = archive(dir).await.unwrap();
    assert_eq!(again.read_bytes().await.unwrap(), bytes);
    assert_eq!(again.sha256, packed.sha256);
    // The temporary file has no name: the scratch dir holds what it held.
    assert_eq!(regular_files(dir).len(), 6);
}

#[tokio::test]
async fn a_hostile_workspace_is_archived_without_following_anything() {
    let s = scratch().await;
    let outside = TempDir::new().unwrap();
    let layout = HostileWorkspace::new().build(s.dir.path(), outside.path());

    let packed = archive(s.dir.path()).await.unwrap();
    assert_eq!(packed.symlinks_left_out, layout.symlinks.len() as u64);
    assert_eq!(packed.specials_left_out, 1, "the FIFO");
    assert!(packed.unreadable.is_empty(), "{:?}", packed.unreadable);

    // Not one byte from outside the scratch dir, anywhere in the stream.
    let mut tar_bytes = Vec::new();
    GzDecoder::new(&packed.read_bytes().await.unwrap()[..])
        .read_to_end(&mut tar_bytes)
        .unwrap();
    assert!(!tar_bytes
        .windows(layout.secret_bytes.len())
        .any(|w| w == layout.secret_bytes.as_slice()));
    assert!(!tar_bytes.windows(12).any(|w| w == b"also outside"));

    let mut tar = tar::Archive::new(&tar_bytes[..]);
    for entry in tar.entries().unwrap() {
        let kind = entry.unwrap().header().entry_type();
        assert!(kind.is_file() || kind.is_dir(), "{kind:?}");
    }

    // Every regular file — deep paths, odd names, hidden ones — round-trips.
    let unpacked = TempDir::new().unwrap();
    tar::Archive::new(&tar_bytes[..])
        .unpack(unpacked.path())
        .unwrap();
    let files = regular_files(unpacked.path());
    assert_eq!(files, regular_files(s.dir.path()));
    assert!(files.contains_key(Path::new(&layout.deep)));
    assert!(files.contains_key(Path::new(".git/config")));
}

#[tokio::test]
async fn archiving_a_missing_dir_is_an_error() {
    let tmp = TempDir::new().unwrap();
    let err = archive(&tmp.path().join("gone")).await.unwrap_err();
    assert!(matches!(err, WorkspaceError::Io { .. }), "{err:?}");
}

#[tokio::test]
async fn the_archive_is_stored_bytes_first_then_as_a_workspace_archive_row() {
    let store = MemoryStore::new();
    let blobs = MemoryBlobStore::new();
    let incident = store
        .create_incident(NewIncident {
            title: "t".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let s = scratch().await;
    let session = store
        .create_session(NewSession {
            runner: None,
            admission: Default::default(),
            lease: None,
            id: s.dir.session_id(),
            incident_id: incident.id,
            prompt: "p".into(),
            workspace_ref: None,
        })
        .await
        .unwrap();
    fs::write(s.dir.path().join("report.md"), "# r\n").unwrap();
    let packed = archive(s.dir.path()).await.unwrap();

    let row = store_archive(&store, &blobs, incident.id, session.id, 1, 1, &packed)
        .await
        .unwrap();
    assert_eq!(row.kind, ArtifactKind::WorkspaceArchive);
    assert_eq!(row.path, ARCHIVE_PATH);
    assert_eq!(row.revision, 1);
    assert_eq!(row.sha256, packed.sha256.to_hex());
    assert_eq!(row.size_bytes, packed.size);
    assert_eq!(
        row.blob_key,
        artifact_key(
            incident.id.as_uuid(),
            session.id.as_uuid(),
            row.id.as_uuid(),
            ARCHIVE_PATH
        )
        .to_string()
    );
    let blob = blobs
        .get(&BlobKey::new(row.blob_key.as_str()).unwrap())
        .await
        .unwrap();
    assert_eq!(blob.bytes, packed.read_bytes().await.unwrap());
    assert_eq!(blob.meta.content_type.as_deref(), Some("application/gzip"));
    assert_eq!(
        store.all_session_artifacts(session.id).await.unwrap(),
        [row]
    );

    // The unpacked archive holds the report.
    let mut tar = tar::Archive::new(GzDecoder::new(&blob.bytes[..]));
    let mut entry = tar.entries().unwrap().next().unwrap().unwrap();
    let mut text = String::new();
    entry.read_to_string(&mut text).unwrap();
    assert_eq!(text, "# r\n");
}

#[tokio::test]
async fn a_failed_upload_writes_no_row() {
    let store = MemoryStore::new();
    let blobs = fault_blobs();
    blobs.fault_put("", BlobFault::Fail);
    let incident = store
        .create_incident(NewIncident {
            title: "t".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let s = scratch().await;
    let session = store
        .create_session(NewSession {
            runner: None,
            admission: Default::default(),
            lease: None,
            id: s.dir.session_id(),
            incident_id: incident.id,
            prompt: "p".into(),
            workspace_ref: None,
        })
        .await
        .unwrap();
    let packed = archive(s.dir.path()).await.unwrap();
    let err = store_archive(&store, &blobs, incident.id, session.id, 1, 1, &packed)
        .await
        .unwrap_err();
    assert!(
        matches!(err, WorkspaceError::Blob { op: "stored", .. }),
        "{err:?}"
    );
    assert!(store
        .all_session_artifacts(session.id)
        .await
        .unwrap()
        .is_empty());

    // And a row the store refuses (unknown session) leaves only stray bytes.
    let blobs = MemoryBlobStore::new();
    let err = store_archive(
        &store,
        &blobs,
        incident.id,
        korvus_store::SessionId::new(),
        1,
        1,
        &packed,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, WorkspaceError::Store { .. }), "{err:?}");
    assert_eq!(blobs.list(None).await.unwrap().len(), 1);
}

/// `len` bytes that gzip cannot shrink (xorshift), so archive sizes are
/// predictable.
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

#[tokio::test]
async fn an_archive_over_its_cap_is_a_typed_error_and_nothing_is_stored() {
    let store = MemoryStore::new();
    let blobs = MemoryBlobStore::new();
    let s = scratch().await;
    fs::write(s.dir.path().join("report.md"), "# r\n").unwrap();
    fs::write(s.dir.path().join("big.bin"), noise(4 * 1024 * 1024, 7)).unwrap();
    let before = regular_files(s.dir.path());

    let config = ArchiveConfig::with_max_bytes(1024 * 1024);
    let err = archive_with(s.dir.path(), &config).await.unwrap_err();
    assert!(
        matches!(err, WorkspaceError::ArchiveTooLarge { limit } if limit == 1024 * 1024),
        "{err:?}"
    );
    assert!(err.to_string().contains("cap"), "{err}");
    // The way a caller lands an archive: only a packed one is stored.
    if let Ok(packed) = archive_with(s.dir.path(), &config).await {
        store_archive(
            &store,
            &blobs,
            korvus_store::IncidentId::new(),
            s.dir.session_id(),
            1,
            1,
            &packed,
        )
        .await
        .unwrap();
    }
    assert!(blobs.list(None).await.unwrap().is_empty());
    assert!(store
        .all_session_artifacts(s.dir.session_id())
        .await
        .unwrap()
        .is_empty());
    // No temporary file is left in the scratch dir.
    assert_eq!(regular_files(s.dir.path()), before);
}

#[tokio::test]
async fn the_cap_is_on_the_compressed_size_and_an_archive_at_it_is_kept() {
    let s = scratch().await;
    fs::write(s.dir.path().join("a.bin"), noise(100_000, 3)).unwrap();
    // Compressible: far over the cap uncompressed, far under it packed.
    fs::write(s.dir.path().join("zeros"), vec![0u8; 2_000_000]).unwrap();
    let full = archive(s.dir.path()).await.unwrap();
    assert_eq!(DEFAULT_ARCHIVE_MAX_BYTES, 256 * 1024 * 1024);
    assert!(full.size < 200_000, "{}", full.size);

    let at = archive_with(s.dir.path(), &ArchiveConfig::with_max_bytes(full.size))
        .await
        .unwrap();
    assert_eq!(at.sha256, full.sha256);
    let err = archive_with(s.dir.path(), &ArchiveConfig::with_max_bytes(full.size - 1))
        .await
        .unwrap_err();
    assert!(
        matches!(err, WorkspaceError::ArchiveTooLarge { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_streamed_archive_round_trips_through_the_blob_store() {
    let store = MemoryStore::new();
    let blobs = MemoryBlobStore::new();
    let incident = store
        .create_incident(NewIncident {
            title: "t".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let s = scratch().await;
    let session = store
        .create_session(NewSession {
            runner: None,
            admission: Default::default(),
            lease: None,
            id: s.dir.session_id(),
            incident_id: incident.id,
            prompt: "p".into(),
            workspace_ref: None,
        })
        .await
        .unwrap();
    // Larger than every buffer on the way (tar, gzip, file writer).
    fs::create_dir_all(s.dir.path().join("out/nested")).unwrap();
    fs::write(
        s.dir.path().join("out/nested/big.bin"),
        noise(3_000_000, 11),
    )
    .unwrap();
    fs::write(s.dir.path().join("report.md"), "# r\n").unwrap();

    let packed = archive(s.dir.path()).await.unwrap();
    let row = store_archive(&store, &blobs, incident.id, session.id, 1, 1, &packed)
        .await
        .unwrap();
    let blob = blobs
        .get(&BlobKey::new(row.blob_key.as_str()).unwrap())
        .await
        .unwrap();
    assert_eq!(blob.bytes.len() as u64, packed.size);
    assert_eq!(Sha256Digest::of(&blob.bytes), packed.sha256);
    let unpacked = TempDir::new().unwrap();
    tar::Archive::new(GzDecoder::new(&blob.bytes[..]))
        .unpack(unpacked.path())
        .unwrap();
    assert_eq!(regular_files(unpacked.path()), regular_files(s.dir.path()));
}
