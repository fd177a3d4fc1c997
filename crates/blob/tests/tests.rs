//! Integration tests of korvus-blob: the `korvus-testkit` BlobStore contract
//! against both backends, and the filesystem backend's containment.

mod props;

mod memory_contract {

    korvus_testkit::blob_contract_tests!(async {
        std::sync::Arc::new(korvus_blob::MemoryBlobStore::new())
    });
}

mod fs_contract {
    use std::ops::Deref;

    use korvus_blob::FsBlobStore;

    /// A store in its own temporary directory, removed on drop.
    pub(crate) struct Fixture {
        pub(crate) store: FsBlobStore,
        pub(crate) dir: tempfile::TempDir,
    }

    impl Deref for Fixture {
        type Target = FsBlobStore;
        fn deref(&self) -> &FsBlobStore {
            &self.store
        }
    }

    pub(crate) async fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        Fixture {
            store: FsBlobStore::open(dir.path().join("blobs")).unwrap(),
            dir,
        }
    }

    korvus_testkit::blob_contract_tests!(fixture());
}

mod fs_containment {
    use bytes::Bytes;
    use korvus_blob::{BlobError, BlobKey, BlobStore, PutOptions};

    use super::fs_contract::fixture;

    #[tokio::test]
    async fn planted_symlinks_cannot_reach_outside_the_root() {
        let fx = fixture().await;
        let outside = fx.dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"do not read").unwrap();
        let objects = fx.store.root().join("objects");
        // A symlinked file and a symlinked directory, both pointing outside.
        std::os::unix::fs::symlink(outside.join("secret"), objects.join("leak")).unwrap();
        std::os::unix::fs::symlink(&outside, objects.join("dir")).unwrap();

        let leak = BlobKey::new("leak").unwrap();
        let got = fx.get(&leak).await;
        assert!(
            !matches!(&got, Ok(b) if &b.bytes[..] == b"do not read"),
            "read through a symlink: {got:?}"
        );
        assert!(fx.head(&leak).await.is_err());

        let through = BlobKey::new("dir/new").unwrap();
        let body = Bytes::from_static(b"escape");
        let put = fx
            .put(
                &through,
                body.clone(),
                PutOptions::for_bytes("text/plain", &body),
            )
            .await;
        assert!(put.is_err(), "wrote through a symlinked directory");
        assert!(!outside.join("new").exists());
        assert!(fx.get(&BlobKey::new("dir/secret").unwrap()).await.is_err());

        // Listing does not follow symlinks either.
        let listed = fx.list(None).await.unwrap();
        assert!(listed.is_empty(), "{listed:?}");
        assert_eq!(
            std::fs::read(outside.join("secret")).unwrap(),
            b"do not read"
        );
    }

    #[tokio::test]
    async fn put_leaves_no_temporary_files() {
        let fx = fixture().await;
        for i in 0..10 {
            let key = BlobKey::new(format!("a/{i}")).unwrap();
            let body = Bytes::from(vec![i as u8; 1000]);
            fx.put(&key, body.clone(), PutOptions::for_bytes("x/y", &body))
                .await
                .unwrap();
        }
        let tmp = std::fs::read_dir(fx.store.root().join("tmp"))
            .unwrap()
            .count();
        assert_eq!(tmp, 0);
        // A failed put (checksum) leaves nothing either.
        let key = BlobKey::new("bad").unwrap();
        let err = fx
            .put(
                &key,
                Bytes::from_static(b"x"),
                PutOptions::for_bytes("x/y", b"y"),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, BlobError::ChecksumMismatch { .. }));
        assert_eq!(
            std::fs::read_dir(fx.store.root().join("tmp"))
                .unwrap()
                .count(),
            0
        );
    }

    #[tokio::test]
    async fn objects_are_plain_files_an_operator_can_read() {
        let fx = fixture().await;
        let key = BlobKey::new("incidents/i/report.md").unwrap();
        let body = Bytes::from_static(b"# Report\n");
        fx.put(
            &key,
            body.clone(),
            PutOptions::for_bytes("text/markdown", &body),
        )
        .await
        .unwrap();
        let on_disk = std::fs::read(fx.store.root().join("objects/incidents/i/report.md")).unwrap();
        assert_eq!(on_disk, b"# Report\n");
    }
}
