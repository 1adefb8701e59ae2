//! Concurrent load on stores, for the "admits exactly the limit" tests.

use std::sync::Arc;

use sluicegate_core::{CheckRequest, Policy, Store};

/// `tasks` tasks on each store, each sending `attempts` requests of cost 1 for `key` under
/// `policies`, all released at once by a barrier. Returns how many were admitted.
pub async fn storm<S: Store + 'static>(
    stores: &[Arc<S>],
    policies: &[Arc<Policy>],
    key: &str,
    tasks: usize,
    attempts: usize,
) -> usize {
    let start = Arc::new(tokio::sync::Barrier::new(stores.len() * tasks));
    let mut handles = Vec::new();
    for store in stores {
        for _ in 0..tasks {
            let (store, policies, key, start) = (
                Arc::clone(store),
                policies.to_vec(),
                key.to_owned(),
                Arc::clone(&start),
            );
            handles.push(tokio::spawn(async move {
                start.wait().await;
                let mut admitted = 0;
                for _ in 0..attempts {
                    let verdict = store
                        .check(CheckRequest::new(&policies, &key, 1))
                        .await
                        .expect("the store answers");
                    admitted += usize::from(verdict.allowed);
                }
                admitted
            }));
        }
    }
    let mut admitted = 0;
    for handle in handles {
        admitted += handle.await.expect("storm task");
    }
    admitted
}
