//! The emulator: a local test double of the platform (axum), in pure Rust (no pyo3).
