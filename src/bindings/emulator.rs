//! `sensorium._core.EmulatorServer`: the emulator as a Python object. Argument conversion and
//! waiting only; the behaviour lives in `crate::emulator`.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyOverflowError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::bindings::convert::py_to_value;
use crate::bindings::runtime;
use crate::emulator::{
    Catalogue, Emulator, EmulatorOptions, FaultAction, FaultRule, LensStatusStyle, ListStyle, Role, FAULT_STATUSES,
};

#[pyclass(name = "EmulatorServer", module = "sensorium._core", frozen)]
pub struct EmulatorServer {
    emulator: Emulator,
}

fn seconds(value: f64, name: &str) -> PyResult<Duration> {
    // A Duration holds up to u64::MAX seconds (about 1.8e19): 1e20 is refused too, so say so.
    Duration::try_from_secs_f64(value).map_err(|_| {
        PyValueError::new_err(format!("{name} must be a number of seconds from 0 to 1.8e19, got {value}"))
    })
}

/// A time that must pass before something happens again: 0 would make it happen all the time
/// (a lens session expire at once, a heartbeat never stop).
fn positive_seconds(value: f64, name: &str) -> PyResult<Duration> {
    // NaN fails this too (it is not above 0).
    if value.is_nan() || value <= 0.0 {
        return Err(PyValueError::new_err(format!("{name} must be above 0 seconds, got {value}")));
    }
    seconds(value, name)
}

/// A Python int as given, for the arguments whose range is checked here: PyO3's own conversion
/// to an unsigned type raises a bare `OverflowError` for -1 or 2**70, naming neither the argument
/// nor the range. `None` is an int beyond 128 bits. Other types keep PyO3's `TypeError`, which
/// names the argument.
#[derive(Clone, Copy)]
struct IntArg(Option<i128>);

impl<'a, 'py> FromPyObject<'a, 'py> for IntArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        match obj.extract::<i128>() {
            Ok(n) => Ok(IntArg(Some(n))),
            Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => Ok(IntArg(None)),
            Err(e) => Err(e),
        }
    }
}

/// The allowed values of an integer argument, as its error message states them.
enum Range {
    FromTo(i128, i128),
    /// At least the first; the second is the ceiling of the Rust type, rarely worth stating.
    AtLeast(i128, i128),
}

/// `value` when it is in `range`, else a `ValueError` naming the argument and the range.
fn ranged<T: TryFrom<i128>>(value: IntArg, name: &str, range: Range) -> PyResult<T> {
    let (Range::FromTo(lo, hi) | Range::AtLeast(lo, hi)) = range;
    if let Some(n) = value.0.filter(|n| (lo..=hi).contains(n)) {
        if let Ok(n) = T::try_from(n) {
            return Ok(n);
        }
    }
    let allowed = match range {
        Range::FromTo(lo, hi) => format!("from {lo} to {hi}"),
        Range::AtLeast(lo, _) if value.0.is_some_and(|n| n < lo) => format!("at least {lo}"),
        Range::AtLeast(_, hi) => format!("at most {hi}"),
    };
    let got = value.0.map_or_else(|| "an int beyond 128 bits".to_string(), |n| n.to_string());
    Err(PyValueError::new_err(format!("{name} must be an integer {allowed}, got {got}")))
}

/// `ranged` for an optional argument.
fn ranged_opt<T: TryFrom<i128>>(value: Option<IntArg>, name: &str, range: Range) -> PyResult<Option<T>> {
    value.map(|v| ranged(v, name, range)).transpose()
}

const U32_MAX: i128 = u32::MAX as i128;
const U64_MAX: i128 = u64::MAX as i128;

/// A key the emulator can recognise when it comes back: it travels as `Authorization: Bearer
/// <key>`, where an empty key, one with spaces or control characters (trimmed or refused on the
/// way) or with non-ASCII characters never arrives as given, and the emulator would answer its
/// own key with 401. The message never shows the key.
fn check_api_key(key: &str) -> PyResult<()> {
    if key.is_empty() {
        return Err(PyValueError::new_err("api_key is empty; give visible ASCII characters, or None for a random key"));
    }
    // The clients refuse the same keys, in the same words.
    match crate::client::secret::ApiKey::new(key).unusable() {
        Some(why) => Err(PyValueError::new_err(format!("api_key: {why}"))),
        None => Ok(()),
    }
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

/// A fault rule from Python arguments, refused (naming the argument) when it could never apply.
#[allow(clippy::too_many_arguments)]
fn fault_rule(
    who: &str,
    method: Option<String>,
    path: String,
    status: Option<IntArg>,
    retry_after: Option<f64>,
    delay: Option<f64>,
    action: Option<&str>,
    times: Option<IntArg>,
    probability: f64,
) -> PyResult<FaultRule> {
    let action = action
        .map(|a| a.parse::<FaultAction>().map_err(PyValueError::new_err))
        .transpose()?;
    let statuses = Range::FromTo((*FAULT_STATUSES.start()).into(), (*FAULT_STATUSES.end()).into());
    let status = ranged_opt(status, "status", statuses)?;
    let times = ranged_opt(times, "times", Range::AtLeast(1, U32_MAX))?;
    // 0 would be a rule that never applies, which a test meant to fault would pass without it.
    if !(probability > 0.0 && probability <= 1.0) {
        return Err(PyValueError::new_err(format!("probability must be more than 0 and at most 1, got {probability}")));
    }
    let delay = delay.map(|d| seconds(d, "delay")).transpose()?;
    let retry_after = retry_after.map(|d| seconds(d, "retry_after")).transpose()?;
    let rule = FaultRule { method, path, status, retry_after, delay, action, times, probability };
    rule.check(who).map_err(PyValueError::new_err)?;
    Ok(rule)
}

impl EmulatorServer {
    /// The emulator, for a control that changes what it will do: after `stop` no request
    /// reaches it, so the control would succeed and change nothing.
    fn live(&self) -> PyResult<&Emulator> {
        if self.emulator.is_stopped() {
            return Err(PyRuntimeError::new_err(
                "the emulator is stopped: its controls change nothing any more; start a new Emulator()",
            ));
        }
        Ok(&self.emulator)
    }
}

#[pymethods]
impl EmulatorServer {
    #[new]
    #[pyo3(signature = (port=IntArg(Some(0)), host="127.0.0.1", query_delay=0.0, max_upload_bytes=None, api_key=None, upload_part_size=None, upload_url_ttl=None, models=None, work_duration=None, page_size=None, session_ttl_sec=None, lens_heartbeat_interval=None, lens_status_style="enum", list_style="cursor", rate_limit=None, max_query_size_mb=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        port: IntArg,
        host: &str,
        query_delay: f64,
        max_upload_bytes: Option<IntArg>,
        api_key: Option<String>,
        upload_part_size: Option<IntArg>,
        upload_url_ttl: Option<f64>,
        models: Option<&Bound<'_, PyAny>>,
        work_duration: Option<f64>,
        page_size: Option<IntArg>,
        session_ttl_sec: Option<f64>,
        lens_heartbeat_interval: Option<f64>,
        lens_status_style: &str,
        list_style: &str,
        rate_limit: Option<f64>,
        max_query_size_mb: Option<f64>,
    ) -> PyResult<Self> {
        let list_style = list_style.parse::<ListStyle>().map_err(PyValueError::new_err)?;
        for (name, value) in [("rate_limit", rate_limit), ("max_query_size_mb", max_query_size_mb)] {
            if let Some(v) = value.filter(|v| !(v.is_finite() && *v > 0.0)) {
                return Err(PyValueError::new_err(format!("{name} must be a positive number, got {v}")));
            }
        }
        let page_size = ranged_opt(page_size, "page_size", Range::FromTo(1, crate::emulator::MAX_PAGE_SIZE as i128))?;
        if let Some(key) = &api_key {
            check_api_key(key)?;
        }
        let defaults = EmulatorOptions::default();
        let opts = EmulatorOptions {
            host: parse_host(host)?,
            port: ranged(port, "port", Range::FromTo(0, u16::MAX.into()))?,
            query_delay: seconds(query_delay, "query_delay")?,
            max_upload_bytes: ranged_opt(max_upload_bytes, "max_upload_bytes", Range::AtLeast(0, U64_MAX))?
                .unwrap_or(defaults.max_upload_bytes),
            api_key,
            upload_part_size: ranged_opt(upload_part_size, "upload_part_size", Range::AtLeast(1, U64_MAX))?
                .unwrap_or(defaults.upload_part_size),
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
                Some(t) => positive_seconds(t, "session_ttl_sec")?,
                None => defaults.session_ttl,
            },
            lens_heartbeat_interval: match lens_heartbeat_interval {
                Some(t) => positive_seconds(t, "lens_heartbeat_interval")?,
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
        Ok(self.live()?.new_api_key(org, role, catalogue(models)?))
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

    #[pyo3(signature = (method, path, status=None, retry_after=None, delay=None, action=None, times=Some(IntArg(Some(1))), probability=1.0))]
    #[allow(clippy::too_many_arguments)]
    fn inject(
        &self,
        method: Option<String>,
        path: String,
        status: Option<IntArg>,
        retry_after: Option<f64>,
        delay: Option<f64>,
        action: Option<&str>,
        times: Option<IntArg>,
        probability: f64,
    ) -> PyResult<()> {
        let rule = fault_rule("inject", method, path, status, retry_after, delay, action, times, probability)?;
        self.live()?.inject(rule);
        Ok(())
    }

    #[pyo3(signature = (part_number, *, status=None, action=None, delay=None, times=Some(IntArg(Some(1)))))]
    fn inject_upload_part(
        &self,
        part_number: IntArg,
        status: Option<IntArg>,
        action: Option<&str>,
        delay: Option<f64>,
        times: Option<IntArg>,
    ) -> PyResult<()> {
        let max_parts = crate::emulator::MAX_UPLOAD_PARTS as i128;
        let part_number = ranged(part_number, "part_number", Range::FromTo(1, max_parts))?;
        // The path is the part's own (set by `inject_upload_part`); "/" stands in to pass the check.
        let rule = fault_rule("inject_upload_part", None, "/".to_string(), status, None, delay, action, times, 1.0)?;
        self.live()?.inject_upload_part(part_number, rule);
        Ok(())
    }

    fn expire_upload_urls(&self) -> PyResult<()> {
        self.live()?.expire_upload_urls();
        Ok(())
    }

    fn expire_output_urls(&self) -> PyResult<()> {
        self.live()?.expire_output_urls();
        Ok(())
    }

    fn clear_faults(&self) {
        self.emulator.clear_faults();
    }

    #[pyo3(signature = (error_msg, times=IntArg(Some(1))))]
    fn fail_queries(&self, error_msg: &str, times: IntArg) -> PyResult<()> {
        // 0 has a use: it takes back failures still pending.
        let times = ranged(times, "times", Range::AtLeast(0, U32_MAX))?;
        self.live()?.fail_queries(error_msg, times);
        Ok(())
    }

    #[pyo3(signature = (kind, *, error=None, failed_inputs=None, outcome=None))]
    fn fail_next_job(&self, kind: &str, error: Option<String>, failed_inputs: Option<Vec<String>>, outcome: Option<String>) -> PyResult<()> {
        self.live()?.fail_next_job(kind, error, failed_inputs.unwrap_or_default(), outcome).map_err(PyValueError::new_err)
    }

    #[pyo3(signature = (seconds))]
    fn lag_agent_status(&self, seconds: f64) -> PyResult<()> {
        self.live()?.lag_agent_status(self::seconds(seconds, "seconds")?);
        Ok(())
    }

    #[pyo3(signature = (every))]
    fn drop_streams(&self, every: Option<IntArg>) -> PyResult<()> {
        let every = ranged_opt(every, "every", Range::AtLeast(1, U64_MAX))?;
        self.live()?.drop_streams(every);
        Ok(())
    }

    #[pyo3(signature = (style))]
    fn set_lens_status_style(&self, style: &str) -> PyResult<()> {
        self.live()?.set_lens_status_style(style.parse::<LensStatusStyle>().map_err(PyValueError::new_err)?);
        Ok(())
    }

    fn close_idle_connections(&self) -> PyResult<()> {
        self.live()?.close_idle_connections();
        Ok(())
    }

    #[pyo3(signature = (seconds))]
    fn set_query_delay(&self, seconds: f64) -> PyResult<()> {
        self.live()?.set_query_delay(self::seconds(seconds, "seconds")?);
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
