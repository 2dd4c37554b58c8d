//! sensorium's native core. The Python package `sensorium` wraps the `_core` module.

pub mod bindings;
pub mod client;
pub mod emulator;
pub mod wire;

#[cfg(test)]
mod fuzz;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The statuses the retry rule retries, for the Python code that follows the same rule
    // (`wait` riding out failed polls) instead of keeping a copy of the list.
    m.add("RETRYABLE_STATUSES", client::error::RETRYABLE_STATUSES.to_vec())?;
    // The prefix of a download's temporary files, which the names a server lists must not take.
    m.add("DOWNLOAD_PARTIAL_PREFIX", client::files::PARTIAL_PREFIX)?;
    m.add_class::<bindings::client::CoreClient>()?;
    m.add_class::<bindings::results::QueryResult>()?;
    m.add_class::<bindings::results::Embeddings>()?;
    m.add_class::<bindings::results::NumericEvent>()?;
    m.add_class::<bindings::results::Progress>()?;
    m.add_class::<bindings::stream::EventFeed>()?;
    m.add_class::<bindings::stream::StreamEvent>()?;
    m.add_class::<bindings::stream::LensSocket>()?;
    m.add_class::<bindings::embed_many::EmbedBatch>()?;
    m.add_function(wrap_pyfunction!(bindings::logging::reset_logging, m)?)?;
    m.add_function(wrap_pyfunction!(bindings::errors::panic_for_tests, m)?)?;
    bindings::logging::install(m.py());
    bindings::exiting::install(m)?;
    bindings::errors::install_panic_hook();
    m.add_class::<bindings::emulator::EmulatorServer>()?;
    Ok(())
}
