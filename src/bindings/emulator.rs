//! `sensorium._core.EmulatorServer`: the emulator as a Python object. Argument conversion and
//! waiting only; the behaviour lives in `crate::emulator`.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::bindings::convert::py_to_value;
use crate::bindings::runtime;
use crate::emulator::{Catalogue, Emulator, EmulatorOptions, FaultAction, FaultRule, LensStatusStyle, ListStyle, Role};

#[pyclass(name = "EmulatorServer", module = "sensorium._core", frozen)]
pub struct EmulatorServer {
    emulator: Emulator,
}

fn seconds(value: f64, name: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| PyValueError::new_err(format!("{name} must be a non-negative number of seconds, got {value}")))
}

fn parse_host(host: &str) -> PyResult<IpAddr> {
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    host.parse()
        .map_err(|_| PyValueError::new_err(format!("host must be an IP address or 'localhost', got {host:?}")))
}

/// A catalogue from a Python list of ids and `{"id", "family"}` dicts; `None` stays `None`.
fn catalogue(models: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Catalogue>> {
    let Some(models) = models.filter(|m| !m.is_none()) else { return Ok(None) };
    let value = py_to_value(models, "models").map_err(|e| PyValueError::new_err(e.to_string()))?;
    Catalogue::from_json(&value).map(Some).map_err(PyValueError::new_err)
}

/// A fault rule from Python arguments, with their ranges checked.
#[allow(clippy::too_many_arguments)]
fn fault_rule(
    method: Option<String>,
    path: String,
    status: Option<u16>,
    retry_after: Option<f64>,
    delay: Option<f64>,
    action: Option<&str>,
    times: Option<u32>,
    probability: f64,
) -> PyResult<FaultRule> {
    let action = action
        .map(|a| a.parse::<FaultAction>().map_err(PyValueError::new_err))
        .transpose()?;
    if let Some(s) = status {
        if !(100..=599).contains(&s) {
            return Err(PyValueError::new_err(format!("status must be an HTTP status (100-599), got {s}")));
        }
    }
    if !(0.0..=1.0).contains(&probability) {
        return Err(PyValueError::new_err(format!("probability must be from 0 to 1, got {probability}")));
    }
    let delay = delay.map(|d| seconds(d, "delay")).transpose()?;
    Ok(FaultRule { method, path, status, retry_after, delay, action, times, probability })
}

#[pymethods]
impl EmulatorServer {
    #[new]
    #[pyo3(signature = (port=0, host="127.0.0.1", query_delay=0.0, max_upload_bytes=None, api_key=None, upload_part_size=None, upload_url_ttl=None, models=None, work_duration=None, page_size=None, session_ttl_sec=None, lens_heartbeat_interval=None, lens_status_style="enum", list_style="cursor", rate_limit=None, max_query_size_mb=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        port: u16,
        host: &str,
        query_delay: f64,
        max_upload_bytes: Option<u64>,
        api_key: Option<String>,
        upload_part_size: Option<u64>,
        upload_url_ttl: Option<f64>,
        models: Option<&Bound<'_, PyAny>>,
        work_duration: Option<f64>,
        page_size: Option<usize>,
        session_ttl_sec: Option<f64>,
        lens_heartbeat_interval: Option<f64>,
        lens_status_style: &str,
        list_style: &str,
        rate_limit: Option<f64>,
        max_query_size_mb: Option<f64>,
    ) -> PyResult<Self> {
        let list_style = list_style.parse::<ListStyle>().map_err(PyValueError::new_err)?;
        for (name, value) in [("rate_limit", rate_limit), ("max_query_size_mb", max_query_size_mb)] {
            if value.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
                return Err(PyValueError::new_err(format!("{name} must be a positive number, got {value:?}")));
            }
        }
        if page_size.is_some_and(|n| !(1..=1000).contains(&n)) {
            return Err(PyValueError::new_err("page_size must be from 1 to 1000"));
        }
        let defaults = EmulatorOptions::default();
        if upload_part_size == Some(0) {
            return Err(PyValueError::new_err("upload_part_size must be at least 1 byte"));
        }
        let opts = EmulatorOptions {
            host: parse_host(host)?,
            port,
            query_delay: seconds(query_delay, "query_delay")?,
            max_upload_bytes: max_upload_bytes.unwrap_or(defaults.max_upload_bytes),
            api_key,
            upload_part_size: upload_part_size.unwrap_or(defaults.upload_part_size),
            upload_url_ttl: match upload_url_ttl {
                Some(t) => seconds(t, "upload_url_ttl")?,
                None => defaults.upload_url_ttl,
            },
            models: catalogue(models)?,
            work_duration: match work_duration {
                Some(t) => seconds(t, "work_duration")?,
                None => defaults.work_duration,
            },
            page_size,
            session_ttl: match session_ttl_sec {
                Some(t) => seconds(t, "session_ttl_sec")?,
                None => defaults.session_ttl,
            },
            lens_heartbeat_interval: match lens_heartbeat_interval {
                Some(t) if t > 0.0 => seconds(t, "lens_heartbeat_interval")?,
                Some(t) => return Err(PyValueError::new_err(format!("lens_heartbeat_interval must be above 0 seconds, got {t}"))),
                None => defaults.lens_heartbeat_interval,
            },
            lens_status_style: lens_status_style.parse::<LensStatusStyle>().map_err(PyValueError::new_err)?,
            list_style,
            rate_limit,
            max_query_size_mb,
        };
        let emulator = runtime::wait(py, "Emulator()", async move {
            Emulator::start(opts)
                .await
                .map_err(|e| PyOSError::new_err(format!("could not start the sensorium emulator: {e}")))
        })?;
        Ok(EmulatorServer { emulator })
    }

    #[getter]
    fn base_url(&self) -> String {
        self.emulator.base_url()
    }

    #[getter]
    fn port(&self) -> u16 {
        self.emulator.port()
    }

    #[getter]
    fn api_key(&self) -> String {
        self.emulator.api_key()
    }

    #[pyo3(signature = (org=None, role="admin", models=None))]
    fn new_api_key(&self, org: Option<&str>, role: &str, models: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
        let role = role.parse::<Role>().map_err(PyValueError::new_err)?;
        Ok(self.emulator.new_api_key(org, role, catalogue(models)?))
    }

    /// The default catalogue as `{"id", "family"}` dicts, in listing order.
    #[staticmethod]
    fn default_models<'py>(py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        Catalogue::default()
            .entries()
            .iter()
            .map(|e| {
                let d = PyDict::new(py);
                d.set_item("id", &e.id)?;
                d.set_item("family", e.family.name())?;
                Ok(d)
            })
            .collect()
    }

    #[pyo3(signature = (method, path, status=None, retry_after=None, delay=None, action=None, times=Some(1), probability=1.0))]
    #[allow(clippy::too_many_arguments)]
    fn inject(
        &self,
        method: Option<String>,
        path: String,
        status: Option<u16>,
        retry_after: Option<f64>,
        delay: Option<f64>,
        action: Option<&str>,
        times: Option<u32>,
        probability: f64,
    ) -> PyResult<()> {
        self.emulator.inject(fault_rule(method, path, status, retry_after, delay, action, times, probability)?);
        Ok(())
    }

    #[pyo3(signature = (part_number, *, status=None, action=None, delay=None, times=Some(1)))]
    fn inject_upload_part(
        &self,
        part_number: u32,
        status: Option<u16>,
        action: Option<&str>,
        delay: Option<f64>,
        times: Option<u32>,
    ) -> PyResult<()> {
        if status.is_none() && action.is_none() && delay.is_none() {
            return Err(PyValueError::new_err("inject_upload_part needs a status, an action or a delay"));
        }
        let rule = fault_rule(None, String::new(), status, None, delay, action, times, 1.0)?;
        self.emulator.inject_upload_part(part_number, rule);
        Ok(())
    }

    fn expire_upload_urls(&self) {
        self.emulator.expire_upload_urls();
    }

    fn expire_output_urls(&self) {
        self.emulator.expire_output_urls();
    }

    fn clear_faults(&self) {
        self.emulator.clear_faults();
    }

    #[pyo3(signature = (error_msg, times=1))]
    fn fail_queries(&self, error_msg: &str, times: u32) {
        self.emulator.fail_queries(error_msg, times);
    }

    #[pyo3(signature = (kind, *, error=None, failed_inputs=None))]
    fn fail_next_job(&self, kind: &str, error: Option<String>, failed_inputs: Option<Vec<String>>) -> PyResult<()> {
        self.emulator.fail_next_job(kind, error, failed_inputs.unwrap_or_default()).map_err(PyValueError::new_err)
    }

    #[pyo3(signature = (seconds))]
    fn lag_agent_status(&self, seconds: f64) -> PyResult<()> {
        self.emulator.lag_agent_status(self::seconds(seconds, "seconds")?);
        Ok(())
    }

    #[pyo3(signature = (every))]
    fn drop_streams(&self, every: Option<u64>) -> PyResult<()> {
        if every == Some(0) {
            return Err(PyValueError::new_err("every must be a positive number of events, or None"));
        }
        self.emulator.drop_streams(every);
        Ok(())
    }

    #[pyo3(signature = (style))]
    fn set_lens_status_style(&self, style: &str) -> PyResult<()> {
        self.emulator.set_lens_status_style(style.parse::<LensStatusStyle>().map_err(PyValueError::new_err)?);
        Ok(())
    }

    fn close_idle_connections(&self) {
        self.emulator.close_idle_connections();
    }

    #[pyo3(signature = (seconds))]
    fn set_query_delay(&self, seconds: f64) -> PyResult<()> {
        self.emulator.set_query_delay(self::seconds(seconds, "seconds")?);
        Ok(())
    }

    fn requests<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.emulator
            .requests()
            .into_iter()
            .map(|r| {
                let d = PyDict::new(py);
                d.set_item("method", r.method)?;
                d.set_item("path", r.path)?;
                d.set_item("query", r.query)?;
                let headers = PyDict::new(py);
                for (name, value) in r.headers {
                    headers.set_item(name, value)?;
                }
                d.set_item("headers", headers)?;
                d.set_item("attempt", r.attempt)?;
                d.set_item("org", r.org)?;
                d.set_item("body", r.body.map(|b| PyBytes::new(py, &b)))?;
                d.set_item("body_len", r.body_len)?;
                d.set_item("status", r.status)?;
                Ok(d)
            })
            .collect()
    }

    fn clear_requests(&self) {
        self.emulator.clear_requests();
    }

    /// Stops the server, closes its connections and removes its data. Safe to call twice.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        let emulator = self.emulator.clone();
        runtime::wait(py, "Emulator.stop", async move {
            emulator.shutdown().await;
            Ok(())
        })
    }

    fn __repr__(&self) -> String {
        format!("EmulatorServer(base_url={:?})", self.emulator.base_url())
    }
}
