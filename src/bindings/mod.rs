//! pyo3 glue only: Python classes over `client/` and `emulator/`, numpy conversion, GIL
//! release, signal checks and async bridging. No protocol logic lives here.

pub mod client;
pub mod convert;
pub mod embed_many;
pub mod exiting;
pub mod interrupts;
pub mod logging;
pub mod errors;
pub mod numeric;
pub mod results;
pub mod runtime;
pub mod stream;
pub mod emulator;
