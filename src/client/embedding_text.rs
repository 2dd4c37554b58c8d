//! The embedding matrix read straight from an encoder answer's text.
//!
//! Through serde_json each number costs about 20 ns (its visitor, an f64, then a cast), and
//! skipping the matrix as a `RawValue` costs almost as much again, because serde_json decodes
//! the digits of what it skips. That was most of `embed()`'s parse: 6,144 numbers, ~125 µs.
//! Here the numbers are read by fast-float2 straight to float32 (~8 ns each).
//!
//! Only the matrix is read by hand. [`split_matrix`] walks the answer's keys and nesting (no
//! value decoded) to where `response.response` starts, parses the matrix to its closing bracket,
//! and returns the rest of the document with `[]` in the matrix's place. The caller reads that
//! rest with serde_json as before: it still judges the whole document's validity, the status,
//! the ids and the warnings. Anything this module does not recognise gives `None`, and the caller
//! reads the original text with serde_json instead, which is also what reports errors.

use memchr::memchr2;

use super::query::EmbeddingMatrix;

/// The matrix at `response.response` and the document with `[]` in its place, or `None` when the
/// answer is not a well-formed numeric matrix where the platform puts it. `rows_hint` sizes the
/// buffer (the number of channels sent, when known).
pub fn split_matrix(text: &[u8], rows_hint: Option<usize>) -> Option<(EmbeddingMatrix, Vec<u8>)> {
    let start = locate_matrix(text)?;
    let (matrix, end) = parse_matrix(text, start, rows_hint)?;
    let mut rest = Vec::with_capacity(text.len() - (end - start) + 2);
    rest.extend_from_slice(&text[..start]);
    rest.extend_from_slice(b"[]");
    rest.extend_from_slice(&text[end..]);
    Some((matrix, rest))
}

/// Where the value of `response.response` starts, if it is an array. Keys are compared as
/// written: an escaped key (`"respons\u0065"`) is not recognised, and the serde path reads it.
fn locate_matrix(text: &[u8]) -> Option<usize> {
    let mut at = skip_ws(text, 0);
    at = member_value(text, at, b"response")?;
    at = member_value(text, at, b"response")?;
    (text.get(at) == Some(&b'[')).then_some(at)
}

/// With `at` on an object's `{`, the position of the value of its first member named `key`.
/// The members before it are skipped, not decoded.
fn member_value(text: &[u8], at: usize, key: &[u8]) -> Option<usize> {
    if text.get(at) != Some(&b'{') {
        return None;
    }
    let mut at = skip_ws(text, at + 1);
    loop {
        let name_end = string_end(text, at)?;
        let name = &text[at + 1..name_end - 1];
        at = skip_ws(text, name_end);
        if text.get(at) != Some(&b':') {
            return None;
        }
        at = skip_ws(text, at + 1);
        if name == key {
            return Some(at);
        }
        at = skip_ws(text, value_end(text, at)?);
        match text.get(at) {
            Some(b',') => at = skip_ws(text, at + 1),
            _ => return None,
        }
    }
}

fn skip_ws(text: &[u8], mut at: usize) -> usize {
    while matches!(text.get(at), Some(b' ' | b'\n' | b'\r' | b'\t')) {
        at += 1;
    }
    at
}

/// With `at` on a string's opening quote, the position just past its closing quote.
fn string_end(text: &[u8], at: usize) -> Option<usize> {
    if text.get(at) != Some(&b'"') {
        return None;
    }
    let mut at = at + 1;
    loop {
        at += memchr2(b'"', b'\\', text.get(at..)?)?;
        if text[at] == b'"' {
            return Some(at + 1);
        }
        at += 2; // a backslash and the character it escapes
    }
}

/// The position just past the value starting at `at`. Containers are skipped by counting
/// brackets outside strings; scalars run to the next delimiter. Loose on purpose: serde_json
/// reads the same bytes afterwards and rejects what is not JSON.
fn value_end(text: &[u8], at: usize) -> Option<usize> {
    match *text.get(at)? {
        b'"' => string_end(text, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut at = at;
            loop {
                match *text.get(at)? {
                    b'"' => {
                        at = string_end(text, at)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(at + 1);
                        }
                    }
                    _ => {}
                }
                at += 1;
            }
        }
        _ => {
            let len = text[at..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t'))
                .unwrap_or(text.len() - at);
            Some(at + len)
        }
    }
}

/// The matrix whose `[` is at `at`: either a flat list of numbers (one channel) or a list of
/// equally long lists of numbers. Returns it and the position past its `]`.
fn parse_matrix(text: &[u8], at: usize, rows_hint: Option<usize>) -> Option<(EmbeddingMatrix, usize)> {
    let mut m = EmbeddingMatrix::default();
    let inner = skip_ws(text, at + 1);
    match *text.get(inner)? {
        b'[' => {
            m.data.reserve(rows_hint.unwrap_or(1) * super::query::EMBEDDING_DIM);
            let mut at = inner;
            loop {
                let before = m.data.len();
                at = skip_ws(text, numbers(text, at + 1, &mut m.data)?);
                let width = m.data.len() - before;
                if m.rows == 0 {
                    m.cols = width;
                } else if width != m.cols {
                    return None;
                }
                m.rows += 1;
                match *text.get(at)? {
                    b',' => at = skip_ws(text, at + 1),
                    b']' => return Some((m, at + 1)),
                    _ => return None,
                }
                if text.get(at) != Some(&b'[') {
                    return None;
                }
            }
        }
        b']' => None, // empty: left to the serde path, which reports the shape
        _ => {
            m.data.reserve(super::query::EMBEDDING_DIM);
            let end = numbers(text, at + 1, &mut m.data)?;
            m.rows = 1;
            m.cols = m.data.len();
            Some((m, end))
        }
    }
}

/// Numbers separated by commas up to a `]`, from `at` (just past the `[`). Returns the position
/// past the `]`. An empty list is refused.
fn numbers(text: &[u8], at: usize, out: &mut Vec<f32>) -> Option<usize> {
    let mut at = skip_ws(text, at);
    loop {
        let (value, len) = fast_float2::parse_partial::<f32, _>(text.get(at..)?).ok()?;
        if !value.is_finite() || !is_json_number(&text[at..at + len]) {
            return None;
        }
        out.push(value);
        at = skip_ws(text, at + len);
        match *text.get(at)? {
            b',' => at = skip_ws(text, at + 1),
            b']' => return Some(at + 1),
            _ => return None,
        }
    }
}

/// JSON's number grammar, `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, over a token that
/// fast-float2 accepted. It also takes `+1`, `.5`, `01`, `1.`, `1.e5`, `inf` and `nan`, which
/// JSON does not; its own grammar (digits, then an optional fraction, then an optional exponent
/// with digits) leaves these few checks to make. Written to look at as few bytes as possible:
/// a per-byte pass here cost as much as the parse itself.
fn is_json_number(token: &[u8]) -> bool {
    // Branch-free: embeddings are half negative, and a mispredicted branch per number showed.
    let digits = &token[usize::from(token.first() == Some(&b'-'))..];
    let well_formed = match digits {
        // The shape of nearly every embedding value: one whole digit, then a fraction.
        [b'0'..=b'9', b'.', b'0'..=b'9', ..] => true,
        _ => {
            let whole = digits.iter().take_while(|b| b.is_ascii_digit()).count();
            let fraction_ok = match digits.get(whole) {
                Some(b'.') => digits.get(whole + 1).is_some_and(u8::is_ascii_digit),
                _ => true,
            };
            whole > 0 && (whole == 1 || digits[0] != b'0') && fraction_ok
        }
    };
    well_formed && token.last().is_some_and(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> Option<(Vec<f32>, usize, usize, String)> {
        split_matrix(text.as_bytes(), None)
            .map(|(m, rest)| (m.data, m.rows, m.cols, String::from_utf8(rest).unwrap()))
    }

    #[test]
    fn nested_and_flat_matrices_are_cut_out() {
        let (data, rows, cols, rest) =
            split(r#"{"query_id":"q","response":{"prompt":"x","response":[[1, -2.5e0],[0.25,3]],"w":[]}}"#).unwrap();
        assert_eq!((data, rows, cols), (vec![1.0, -2.5, 0.25, 3.0], 2, 2));
        assert_eq!(rest, r#"{"query_id":"q","response":{"prompt":"x","response":[],"w":[]}}"#);

        let (data, rows, cols, _) = split("{ \"response\" : { \"response\" : [ 0.5 , 1E-1 ] } }").unwrap();
        assert_eq!((data, rows, cols), (vec![0.5, 0.1], 1, 2));
    }

    #[test]
    fn skips_lookalike_keys_in_strings_and_other_members() {
        let text = r#"{"a":"\"response\":{\"response\":[9]}","b":{"response":[8]},"c":[{"response":[7]}],
                      "response":{"x":"]}","response":[[1]]}}"#;
        let (data, ..) = split(text).unwrap();
        assert_eq!(data, vec![1.0]);
    }

    #[test]
    fn declines_what_is_not_a_clean_matrix() {
        for text in [
            r#"{"response":{"response":[]}}"#,
            r#"{"response":{"response":[[1,2],[3]]}}"#,
            r#"{"response":{"response":[1,[2]]}}"#,
            r#"{"response":{"response":[[1],2]}}"#,
            r#"{"response":{"response":["a"]}}"#,
            r#"{"response":{"response":[01]}}"#,
            r#"{"response":{"response":[1.]}}"#,
            r#"{"response":{"response":[.5]}}"#,
            r#"{"response":{"response":[1.e5]}}"#,
            r#"{"response":{"response":[1e]}}"#,
            r#"{"response":{"response":[-inf]}}"#,
            r#"{"response":{"response":[NaN]}}"#,
            r#"{"response":{"response":[1e39]}}"#,
            r#"{"response":{"response":[1,]}}"#,
            r#"{"response":{"response":[1 2]}}"#,
            r#"{"response":{"response":[1"#,
            r#"{"response":{"response":null}}"#,
            r#"{"response":null}"#,
            r#"{"respons\u0065":{"response":[1]}}"#,
            r#"["response"]"#,
            "",
        ] {
            assert!(split(text).is_none(), "{text}");
        }
    }

    #[test]
    fn json_number_grammar() {
        for ok in ["0", "-0", "12", "1.5", "-0.25e-3", "1E+9", "3e7"] {
            assert!(is_json_number(ok.as_bytes()), "{ok}");
        }
        for bad in ["01", "-01", "1.", ".5", "1e", "1e+", "-", "+1", "inf", "1.e3", "--1"] {
            assert!(!is_json_number(bad.as_bytes()), "{bad}");
        }
    }
}
