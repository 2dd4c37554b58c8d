//! The Files surface: per-organization storage on the emulator's temp dir, uploads, listings
//! with cursors, downloads and deletes.

pub(crate) mod cursor;
pub(crate) mod direct;
pub(crate) mod listing;
pub(crate) mod routes;
pub(crate) mod store;
pub(crate) mod upload;
