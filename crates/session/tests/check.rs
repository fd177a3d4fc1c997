//! `Manager::check`: each backend a run needs is tried before an agent
//! starts, and the first that cannot do its part is named.

use korvus_session::SessionError;
use korvus_testkit::faults::{BlobFault, StoreFault, StoreOp};
use korvus_workspace::ScratchRoot;

use crate::support::{writing, Env};

#[tokio::test]
async fn a_manager_whose_backends_work_passes_and_leaves_no_probe_behind() {
    let env = Env::new().await;
    let manager = env.builder(writing(&[])).build();
    manager.check().await.unwrap();
    assert_eq!(env.blobs.total_puts(), 1, "one probe object");
    use korvus_blob::BlobStore as _;
    assert!(
        env.blobs.list(None).await.unwrap().is_empty(),
        "the probe is deleted"
    );
    assert_eq!(
        std::fs::read_dir(env.root.path()).unwrap().count(),
        0,
        "the probe dir is removed"
    );
    manager.stop().await;
}

#[tokio::test]
async fn a_blob_store_that_refuses_writes_is_named() {
    let env = Env::new().await;
    env.blobs.fault_put("probes/", BlobFault::Fail);
    let manager = env.builder(writing(&[])).build();
    match manager.check().await {
        Err(SessionError::NotReady { part, reason }) => {
            assert_eq!(part, "blob store");
            assert!(!reason.is_empty());
        }
        other => panic!("expected NotReady, got {other:?}"),
    }
    manager.stop().await;
}

#[tokio::test]
async fn a_store_that_cannot_be_written_is_named() {
    let env = Env::new().await;
    env.store.fault(StoreOp::Heartbeat, StoreFault::Fail);
    let manager = env.builder(writing(&[])).build();
    match manager.check().await {
        Err(SessionError::NotReady { part, .. }) => assert_eq!(part, "store"),
        other => panic!("expected NotReady, got {other:?}"),
    }
    manager.stop().await;
}

#[tokio::test]
async fn a_scratch_root_that_is_gone_is_named() {
    let env = Env::new().await;
    let missing = env.root.path().join("gone");
    let manager = env
        .builder(writing(&[]))
        .scratch_root(ScratchRoot::supplied(&missing))
        .build();
    match manager.check().await {
        Err(SessionError::NotReady { part, reason }) => {
            assert_eq!(part, "scratch root");
            assert!(reason.contains(&missing.display().to_string()), "{reason}");
        }
        other => panic!("expected NotReady, got {other:?}"),
    }
    manager.stop().await;
}
