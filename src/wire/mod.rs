//! serde types for the platform's JSON, one file per surface. Shared by the client and the
//! emulator; conformance is tested against literal fixtures written from the spec's tables.

pub mod errors;
pub mod files;
pub mod json_matrix;
pub mod models;
pub mod query;
pub mod page;
pub mod uploads;

#[cfg(test)]
mod conformance;
