//! The client, in pure Rust (no pyo3): configuration, transport, retries, errors, pagination
//! and one module per surface.

pub mod certificate;
pub mod config;
pub mod embed_many;
pub mod error;
pub mod error_body;
pub mod fork;
pub mod lanes;
pub mod pacing;
pub mod path_segment;
pub mod proxy;
pub mod retry;
pub mod secret;
pub mod transport;
pub mod upload;
pub mod upload_claim;

pub use config::ClientConfig;
pub use error::{ApiError, Error};
pub use transport::{Call, RequestBody, Transport};

pub mod embedding_text;
pub mod endpoint;
pub mod files;
pub mod pagination;
pub mod query;
pub mod resume_state;
pub mod sse;
pub mod stored_content;
pub mod websocket;
