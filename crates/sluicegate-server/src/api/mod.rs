//! The decision API's handlers: `/v1/check`, `/v1/limits`, `/v1/overrides`, `/v1/policies`,
//! health, OpenAPI.

pub mod admin;
pub mod answer;
pub mod check;
pub mod error;
pub mod health;
pub mod limits;
pub mod openapi;
pub mod overrides;
pub mod plain_body;
pub mod policies;
pub mod settle;
pub mod token;
pub mod types;

pub use error::{ApiError, ErrorBody};

/// Largest accepted request body, bytes (the contract's 64 KiB).
pub const MAX_BODY: usize = 64 * 1024;

/// Most requests in one batch.
pub const MAX_BATCH: usize = 1000;
