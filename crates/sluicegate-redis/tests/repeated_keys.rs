//! A script call whose requests name one key several times decides each on the state the
//! one before it left: the script reads back its own writes unless the client vouched that
//! every key of the call is distinct (`!`, script/mod.rs `unique_keys`). A client that
//! vouched wrongly would admit every request of the call on the same stale state.

use std::time::Duration;

use futures_util::future::join_all;
use sluicegate_core::{AlgorithmKind, CheckRequest, Store};
use sluicegate_testkit::{RedisServer, redis, shared_policy};

#[tokio::test]
async fn a_key_repeated_in_one_call_is_decided_in_turn() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = redis::store(&server.url(), "repeat").await;
    for kind in [
        AlgorithmKind::TokenBucket,
        AlgorithmKind::FixedWindow,
        AlgorithmKind::Gcra,
    ] {
        let p = [shared_policy("p", kind, 5, Duration::from_secs(3600))];
        // One batch: the same key 20 times among distinct others (one call of 40).
        let others: Vec<String> = (0..20).map(|i| format!("other-{i}")).collect();
        let mut batch = Vec::new();
        for other in &others {
            batch.push(CheckRequest::new(&p, "same", 1));
            batch.push(CheckRequest::new(&p, other, 1));
        }
        let verdicts = store.check_batch(&batch).await;
        let admitted = verdicts
            .iter()
            .step_by(2)
            .filter(|v| v.as_ref().unwrap().allowed)
            .count();
        assert_eq!(admitted, 5, "{kind}: batch");
        assert!(
            verdicts
                .iter()
                .skip(1)
                .step_by(2)
                .all(|v| v.as_ref().unwrap().allowed)
        );

        // Concurrent single checks, coalesced into shared calls.
        let checks = (0..20).map(|_| store.check(CheckRequest::new(&p, "single", 1)));
        let admitted = join_all(checks)
            .await
            .into_iter()
            .filter(|v| v.as_ref().unwrap().allowed)
            .count();
        assert_eq!(admitted, 5, "{kind}: coalesced");
    }
}
