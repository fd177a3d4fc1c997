//! Integration tests of korvus-store: the full `korvus-testkit` Store and
//! Coordination contracts against [`MemoryStore`](korvus_store::MemoryStore), and
//! `MockStore` under the provided methods.

mod mock;

mod memory_contract {
    use std::sync::Arc;

    korvus_testkit::store_contract_tests!(async { Arc::new(korvus_store::MemoryStore::new()) });
    korvus_testkit::coordination_contract_tests!(async {
        Arc::new(korvus_store::MemoryStore::new())
    });
    korvus_testkit::budgets_contract_tests!(async { Arc::new(korvus_store::MemoryStore::new()) });

    #[tokio::test]
    async fn run_all_on_one_shared_store() {
        // The suite's cases must not interfere with each other on one store.
        let store = korvus_store::MemoryStore::new();
        korvus_testkit::store::run_all(&store).await;
        korvus_testkit::coordination::run_all(&store).await;
        korvus_testkit::budgets::run_all(&store).await;
    }
}
