//! sensorium's native core. The Python package `sensorium` wraps the `_core` module.

pub mod bindings;
pub mod client;
pub mod emulator;
pub mod wire;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<bindings::emulator::EmulatorServer>()?;
    Ok(())
}
