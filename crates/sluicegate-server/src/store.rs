//! Opening the store the configuration names.

use std::sync::Arc;

use sluicegate_core::{MemoryStore, Store};

use crate::config::{Backend, StoreConfig};

/// An opened store; `memory` is set for the in-memory one (reloads prune it).
pub struct OpenedStore {
    /// The store every decision goes to.
    pub store: Arc<dyn Store>,
    /// The same store, typed, when it is in memory.
    pub memory: Option<Arc<MemoryStore>>,
}

/// Opens the configured store. A Redis that is merely down is not an error: decisions
/// follow `on_store_error` until it answers.
pub async fn open(config: &StoreConfig) -> Result<OpenedStore, String> {
    match config.backend {
        Backend::Memory => {
            let memory = Arc::new(MemoryStore::new(config.max_keys));
            Ok(OpenedStore {
                store: Arc::clone(&memory) as Arc<dyn Store>,
                memory: Some(memory),
            })
        }
        Backend::Redis => Err("the Redis store is not wired into this build yet".to_owned()),
    }
}
