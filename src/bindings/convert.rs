//! Python values to JSON values and back, with messages that name where a bad value sits.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use pyo3::IntoPyObjectExt;
use serde_json::{Map, Number, Value};

use super::interrupts::keep_copy;
use crate::client::Error;

/// How deep a value may nest. Each level is a native stack frame here, so without a limit a
/// deep or self-containing value overflowed the stack and killed the interpreter; no platform
/// body comes near it (serde_json, on the reading side, stops at 128).
const MAX_DEPTH: usize = 256;

/// Converts a Python value to JSON. `path` names it in errors (`query_metadata['a'][2]`).
pub fn py_to_value(obj: &Bound<'_, PyAny>, path: &str) -> Result<Value, Error> {
    to_value(obj, path, &mut Vec::new())
}

/// [`py_to_value`] below the containers in `within` (the dicts and lists that hold `obj`, outermost
/// first), which catch a value that contains itself before the depth limit does.
fn to_value(obj: &Bound<'_, PyAny>, path: &str, within: &mut Vec<*mut pyo3::ffi::PyObject>) -> Result<Value, Error> {
    let container = obj.is_instance_of::<PyDict>() || obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>();
    if !container {
        return scalar_or_tolist(obj, path, within);
    }
    if within.contains(&obj.as_ptr()) {
        return Err(Error::invalid_argument(path, "contains itself, which JSON cannot express"));
    }
    if within.len() >= MAX_DEPTH {
        return Err(Error::invalid_argument(path, format!("nests deeper than {MAX_DEPTH} levels of dicts and lists")));
    }
    within.push(obj.as_ptr());
    let value = container_value(obj, path, within);
    within.pop();
    value
}

fn container_value(obj: &Bound<'_, PyAny>, path: &str, within: &mut Vec<*mut pyo3::ffi::PyObject>) -> Result<Value, Error> {
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut map = Map::with_capacity(d.len());
        for (k, v) in d.iter() {
            // to_str, not to_string: a key with a lone surrogate is refused, not sent as U+FFFD.
            let key = k
                .cast::<PyString>()
                .map_err(|_| Error::invalid_argument(path, format!("has a key {} that is not a string", type_name(&k))))?
                .to_str()
                .map_err(|_| Error::invalid_argument(path, "has a key that is a string that is not valid UTF-8"))?
                .to_string();
            let child = format!("{path}[{key:?}]");
            map.insert(key, to_value(&v, &child, within)?);
        }
        return Ok(Value::Object(map));
    }
    let mut items = Vec::new();
    for (i, item) in obj.try_iter().map_err(|_| Error::invalid_argument(path, "cannot be iterated"))?.enumerate() {
        let item = item.map_err(|e| Error::invalid_argument(path, e.to_string()))?;
        items.push(to_value(&item, &format!("{path}[{i}]"), within)?);
    }
    Ok(Value::Array(items))
}

fn scalar_or_tolist(obj: &Bound<'_, PyAny>, path: &str, within: &mut Vec<*mut pyo3::ffi::PyObject>) -> Result<Value, Error> {
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return s
            .to_str()
            .map(|s| Value::String(s.to_string()))
            .map_err(|_| Error::invalid_argument(path, "is a string that is not valid UTF-8"));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(v) = obj.extract::<i64>() {
            return Ok(Value::Number(v.into()));
        }
        if let Ok(v) = obj.extract::<u64>() {
            return Ok(Value::Number(v.into()));
        }
        return Err(Error::invalid_argument(path, "is an integer too large for JSON"));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return float(f.value(), path);
    }
    // numpy scalars and arrays, and anything else that knows how to become a list or number.
    if has_tolist(obj) {
        match obj.call_method0("tolist") {
            Ok(plain) if !plain.is(obj) && !has_tolist(&plain) => return to_value(&plain, path, within),
            Ok(_) => {}
            Err(err) => keep_copy(obj.py(), &err),
        }
    }
    let name = type_name(obj);
    let article = if name.starts_with(['a', 'e', 'i', 'o', 'u', 'A', 'E', 'I', 'O', 'U']) { "an" } else { "a" };
    Err(Error::invalid_argument(path, format!("is {article} {name}, which cannot be sent as JSON")))
}

fn has_tolist(obj: &Bound<'_, PyAny>) -> bool {
    obj.hasattr("tolist").unwrap_or_else(|err| {
        keep_copy(obj.py(), &err);
        false
    })
}

fn float(v: f64, path: &str) -> Result<Value, Error> {
    Number::from_f64(v).map(Value::Number).ok_or_else(|| {
        Error::invalid_argument(path, format!("is {v}; the platform accepts finite numbers only (no NaN or infinity)"))
    })
}

/// A `str` argument. Another type is a `TypeError` naming the argument; a str that cannot be
/// sent as UTF-8 (a lone surrogate such as `"\ud800"`) an `InvalidArgumentError`, before
/// anything is sent.
pub fn text_arg(obj: &Bound<'_, PyAny>, arg: &str) -> Result<String, TextArgError> {
    let s = obj
        .cast::<PyString>()
        .map_err(|_| TextArgError::Type(format!("{arg}: expected a str, got {}", type_name(obj))))?;
    s.to_str().map(str::to_owned).map_err(|_| {
        TextArgError::Invalid(Error::invalid_argument(
            arg,
            "contains a character that cannot be encoded as UTF-8 (a lone surrogate such as '\\ud800', \
             often from decoding bytes with errors='surrogateescape'); clean it first, e.g. \
             text.encode('utf-8', 'replace').decode('utf-8')",
        ))
    })
}

/// Why a `str` argument was refused.
pub enum TextArgError {
    Type(String),
    Invalid(Error),
}

pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "object".into())
}

/// Converts JSON to Python objects (dict, list, str, int, float, bool, None).
pub fn value_to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => b.into_bound_py_any(py)?,
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_bound_py_any(py)?
            } else if let Some(u) = n.as_u64() {
                u.into_bound_py_any(py)?
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_bound_py_any(py)?
            }
        }
        Value::String(s) => s.into_bound_py_any(py)?,
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(value_to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, value_to_py(py, v)?)?;
            }
            dict.into_any()
        }
    })
}

/// A JSON value handed back to Python as plain objects.
pub struct Json(pub Value);

impl<'py> IntoPyObject<'py> for Json {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        value_to_py(py, &self.0)
    }
}
