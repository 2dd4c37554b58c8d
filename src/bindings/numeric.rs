//! numpy at the boundary: a channel-first window written straight into JSON numbers (no
//! Python float per element), and embeddings read into a float32 array built in Rust.

use numpy::ndarray::{s, Array2, ArrayView2, Axis, Ix2};
use numpy::{
    dtype, PyArray2, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::prelude::*;

use bytes::Bytes;

use super::interrupts::keep_copy;
use crate::client::query::{BodyTemplate, EmbeddingMatrix};
use crate::client::Error;

/// A numeric window serialised as a whole `data.numeric_array` event:
/// `{"type":"data.numeric_array","event_data":{"contents":[[ch0...],[ch1...]]}}`.
pub struct ChannelsJson {
    pub json: Vec<u8>,
    pub channels: usize,
    pub window: usize,
}

const EVENT_PREFIX: &[u8] = br#"{"type":"data.numeric_array","event_data":{"contents":"#;
const EVENT_SUFFIX: &[u8] = b"}}";

/// Serialises a numpy array shaped (channels, window) or (window,), of any real dtype and any
/// memory layout, into one buffer holding the whole event. `arg` names the argument in errors.
pub fn channels_json(obj: &Bound<'_, PyAny>, arg: &str) -> Result<ChannelsJson, Error> {
    let mut written = written(obj, arg, Wrap::default(), false)?;
    let json = written.bodies.pop().unwrap_or_default();
    Ok(ChannelsJson { json, channels: written.channels, window: written.window })
}

/// A window written as one buffer, or as one per channel (each a window of that channel
/// alone).
struct Written {
    bodies: Vec<Vec<u8>>,
    channels: usize,
    window: usize,
}

/// Bytes written before and after the event, in the same buffer: a request body around its one
/// event costs no second copy of the event (20 kB for a 1024-point float64 channel).
#[derive(Debug, Clone, Copy, Default)]
struct Wrap<'a> {
    head: &'a [u8],
    tail: &'a [u8],
}

/// A whole encoder request around the window as its one event, written in one buffer; and how
/// many channels the window has.
pub fn request_body(obj: &Bound<'_, PyAny>, arg: &str, template: &BodyTemplate) -> Result<(Bytes, usize), Error> {
    let (mut bodies, channels) = request_bodies(obj, arg, template, false)?;
    Ok((bodies.pop().unwrap_or_default(), channels))
}

/// [`request_body`], or with `per_channel` one request body per channel of the window (a 1-D
/// window is one channel); and how many channels the window has. The array is checked and
/// borrowed once for all its channels, rather than indexed from Python per channel.
pub fn request_bodies(
    obj: &Bound<'_, PyAny>,
    arg: &str,
    template: &BodyTemplate,
    per_channel: bool,
) -> Result<(Vec<Bytes>, usize), Error> {
    let wrap = Wrap { head: template.head(), tail: template.tail() };
    let written = written(obj, arg, wrap, per_channel)?;
    Ok((written.bodies.into_iter().map(Bytes::from).collect(), written.channels))
}

/// The event of `obj` with `wrap.head` before it and `wrap.tail` after it: in one buffer, or
/// with `per_channel` in one buffer per channel.
fn written(obj: &Bound<'_, PyAny>, arg: &str, wrap: Wrap<'_>, per_channel: bool) -> Result<Written, Error> {
    let array = obj
        .cast::<PyUntypedArray>()
        .map_err(|_| Error::invalid_argument(arg, "must be a numpy array"))?;
    let shape = array.shape();
    // Only for error messages: formatting it on every call cost more than the checks.
    let shape_text = || format!("({})", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "));
    if !(1..=2).contains(&shape.len()) {
        return Err(Error::invalid_argument(
            arg,
            format!(
                "must be shaped (channels, window) or (window,); got a {}-D array of shape {}",
                shape.len(),
                shape_text()
            ),
        ));
    }
    if shape.contains(&0) {
        return Err(Error::invalid_argument(arg, format!("is empty (shape {}); a window needs at least one value per channel", shape_text())));
    }
    if !is_aligned(array) {
        // Arrays rebuilt from a byte buffer (pickle protocol 5, Dask's transfer between workers)
        // may start at an odd address; numpy's copy is aligned, and reading it is what is safe.
        let copy = obj.call_method0("copy").map_err(|e| {
            keep_copy(obj.py(), &e);
            Error::invalid_argument(arg, e.to_string())
        })?;
        return written(&copy, arg, wrap, per_channel);
    }
    let descr = array.dtype();
    let kind = descr.kind();
    let py = obj.py();
    macro_rules! try_as {
        ($t:ty, $write:ident) => {
            if descr.is_equiv_to(&dtype::<$t>(py)) {
                let typed = obj.cast::<PyArrayDyn<$t>>().map_err(|e| Error::invalid_argument(arg, e.to_string()))?;
                let readonly = typed.try_readonly().map_err(|e| Error::invalid_argument(arg, e.to_string()))?;
                let view = as_2d(readonly.as_array(), arg)?;
                return write_view(view, arg, wrap, $write, per_channel, shape.len() == 1);
            }
        };
    }
    match kind {
        b'f' => {
            try_as!(f64, write_f64);
            try_as!(f32, write_f32);
            // float16, longdouble: widen to float64 through numpy, then write.
            let wide = obj
                .call_method1("astype", ("float64",))
                .map_err(|e| Error::invalid_argument(arg, e.to_string()))?;
            written(&wide, arg, wrap, per_channel)
        }
        b'i' | b'u' => {
            try_as!(i64, write_int);
            try_as!(i32, write_int);
            try_as!(i16, write_int);
            try_as!(i8, write_int);
            try_as!(u64, write_int);
            try_as!(u32, write_int);
            try_as!(u16, write_int);
            try_as!(u8, write_int);
            let wide = obj
                .call_method1("astype", ("int64",))
                .map_err(|e| Error::invalid_argument(arg, e.to_string()))?;
            written(&wide, arg, wrap, per_channel)
        }
        _ => {
            let name = descr.str().map(|s| s.to_string()).unwrap_or_else(|_| "?".into());
            Err(Error::invalid_argument(
                arg,
                format!("has dtype {name}, which is not a real number type; convert it with .astype('float32')"),
            ))
        }
    }
}

fn is_aligned(array: &Bound<'_, PyUntypedArray>) -> bool {
    // SAFETY: `array` is a live numpy array (checked by the cast), so its object header is valid
    // to read while we hold the GIL.
    let flags = unsafe { (*array.as_array_ptr()).fields.flags };
    flags & numpy::npyffi::flags::NPY_ARRAY_ALIGNED != 0
}

fn as_2d<'a, T>(view: numpy::ndarray::ArrayViewD<'a, T>, arg: &str) -> Result<ArrayView2<'a, T>, Error> {
    let view = if view.ndim() == 1 { view.insert_axis(Axis(0)) } else { view };
    view.into_dimensionality::<Ix2>()
        .map_err(|e| Error::invalid_argument(arg, format!("cannot be read as (channels, window): {e}")))
}

fn write_view<T: Copy>(
    view: ArrayView2<'_, T>,
    arg: &str,
    wrap: Wrap<'_>,
    write: impl Fn(&mut Vec<u8>, T) -> bool + Copy,
    per_channel: bool,
    flat: bool,
) -> Result<Written, Error> {
    let (channels, window) = view.dim();
    let bodies = if per_channel {
        (0..channels)
            .map(|c| write_channels(view.slice(s![c..c + 1, ..]), c, flat, arg, wrap, write))
            .collect::<Result<_, _>>()?
    } else {
        vec![write_channels(view, 0, flat, arg, wrap, write)?]
    };
    Ok(Written { bodies, channels, window })
}

/// Writes the channels of `view`, which are channels `first..` of a window; `flat` when the
/// caller gave it 1-D, so error messages name a position as the caller's array has it (an
/// index, or a channel and an index).
fn write_channels<T: Copy>(
    view: ArrayView2<'_, T>,
    first: usize,
    flat: bool,
    arg: &str,
    wrap: Wrap<'_>,
    write: impl Fn(&mut Vec<u8>, T) -> bool + Copy,
) -> Result<Vec<u8>, Error> {
    let (channels, window) = view.dim();
    // Sized for the longest text of every number plus its comma, and SHORT spare for the last
    // `push_short`, so the buffer never regrows: a regrowth copies everything written so far
    // (160 kB for an (8, 1024) float64 window), and sizing for the average (~20 bytes) did that
    // on most windows. Capacity beyond what is written is never touched, so costs no memory.
    let mut out = Vec::with_capacity(
        wrap.head.len()
            + EVENT_PREFIX.len()
            + channels * (window * (LONGEST + 1) + 2)
            + 2
            + EVENT_SUFFIX.len()
            + wrap.tail.len()
            + SHORT,
    );
    out.extend_from_slice(wrap.head);
    out.extend_from_slice(EVENT_PREFIX);
    out.push(b'[');
    for (c, row) in view.rows().into_iter().enumerate() {
        if c > 0 {
            out.push(b',');
        }
        out.push(b'[');
        for (i, value) in row.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            if !write(&mut out, *value) {
                let what = if flat { format!("index {i}") } else { format!("channel {}, index {i}", first + c) };
                return Err(Error::invalid_argument(
                    arg,
                    format!("holds a NaN or infinite value at {what}; the platform accepts finite numbers only"),
                ));
            }
        }
        out.push(b']');
    }
    out.push(b']');
    out.extend_from_slice(EVENT_SUFFIX);
    out.extend_from_slice(wrap.tail);
    Ok(out)
}

fn write_f64(out: &mut Vec<u8>, v: f64) -> bool {
    if !v.is_finite() {
        return false;
    }
    push_short(out, zmij::Buffer::new().format_finite(v).as_bytes());
    true
}

fn write_f32(out: &mut Vec<u8>, v: f32) -> bool {
    if !v.is_finite() {
        return false;
    }
    push_short(out, zmij::Buffer::new().format_finite(v).as_bytes());
    true
}

fn write_int<T: itoa::Integer>(out: &mut Vec<u8>, v: T) -> bool {
    push_short(out, itoa::Buffer::new().format(v).as_bytes());
    true
}

/// The longest number text written: zmij's float64 (`-2.2250738585072014e-308`, 24 bytes);
/// itoa's i64 and u64 take at most 20.
const LONGEST: usize = 24;

/// What [`push_short`] reserves before each copy: its copies move 4, 8 or 16 bytes at a time.
const SHORT: usize = 32;

/// Appends one number's text (at most [`SHORT`] bytes). `extend_from_slice` calls libc's
/// memcpy for a length known only at run time, and that call was 11 % of `embed()`'s CPU
/// (8,192 of them per (8, 1024) window); two fixed-size copies that overlap in the middle do
/// the same work inline.
#[inline(always)]
fn push_short(out: &mut Vec<u8>, text: &[u8]) {
    let len = text.len();
    debug_assert!(len <= SHORT);
    out.reserve(SHORT);
    // SAFETY: `reserve` leaves at least SHORT >= len writable bytes after `out.len()`; every
    // copy below reads inside `text` (offsets from 0 and from len - n, with n <= len) and
    // writes inside `out[out.len()..out.len() + len]`; and `set_len` covers exactly those len
    // bytes, all of which the copies wrote.
    unsafe {
        let dst = out.as_mut_ptr().add(out.len());
        let src = text.as_ptr();
        match len {
            16.. => copy_ends::<16>(src, dst, len),
            8..=15 => copy_ends::<8>(src, dst, len),
            4..=7 => copy_ends::<4>(src, dst, len),
            1..=3 => {
                *dst = *src;
                *dst.add(len / 2) = *src.add(len / 2);
                *dst.add(len - 1) = *src.add(len - 1);
            }
            0 => {}
        }
        out.set_len(out.len() + len);
    }
}

/// Copies `len` bytes (N <= len <= 2N) as the first N and the last N, which overlap.
///
/// # Safety
/// `src` must be readable and `dst` writable for `len` bytes, and they must not overlap.
#[inline(always)]
unsafe fn copy_ends<const N: usize>(src: *const u8, dst: *mut u8, len: usize) {
    std::ptr::copy_nonoverlapping(src, dst, N);
    std::ptr::copy_nonoverlapping(src.add(len - N), dst.add(len - N), N);
}

/// The embedding matrix as a (rows, cols) float32 array that owns the parsed buffer.
pub fn embeddings_array<'py>(py: Python<'py>, m: EmbeddingMatrix) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let array = Array2::from_shape_vec((m.rows, m.cols), m.data)
        .map_err(|e| super::errors::internal_error("building the embeddings array", &e.to_string()))?;
    Ok(PyArray2::from_owned_array(py, array))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_texts_of_every_length_are_appended_whole() {
        let source: Vec<u8> = (b'a'..=b'z').chain(b'0'..=b'9').take(SHORT).collect();
        for len in 0..=SHORT {
            let mut out = b"head,".to_vec();
            out.shrink_to_fit(); // the first push must grow the buffer
            push_short(&mut out, &source[..len]);
            push_short(&mut out, &source[..len]);
            let mut expected = b"head,".to_vec();
            expected.extend_from_slice(&source[..len]);
            expected.extend_from_slice(&source[..len]);
            assert_eq!(out, expected, "length {len}");
        }
    }

    #[test]
    fn numbers_are_written_as_their_shortest_text() {
        let mut out = Vec::new();
        for v in [0.0, -0.0, 1.5, -2.5e-300, f64::MAX, f64::MIN_POSITIVE, 0.1 + 0.2] {
            out.clear();
            assert!(write_f64(&mut out, v));
            assert_eq!(std::str::from_utf8(&out).unwrap().parse::<f64>().unwrap().to_bits(), v.to_bits());
        }
        out.clear();
        assert!(write_int(&mut out, i64::MIN));
        assert_eq!(out, i64::MIN.to_string().as_bytes());
        assert!(!write_f32(&mut out, f32::NAN));
    }
}
