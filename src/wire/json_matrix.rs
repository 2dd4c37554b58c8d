//! Numeric matrices read straight from JSON text, for the two places where a request or an
//! answer is mostly numbers: the client's encoder answers (6,144 float32 for an (8, 1024)
//! window) and the emulator's numeric events (8,192 float64).
//!
//! Through serde_json each number costs 20-35 ns (its visitor or a `Value` per number, then a
//! cast), and skipping a matrix as a `RawValue` costs almost as much, because serde_json
//! decodes the digits of what it skips. Here fast-float2 reads each number straight to the
//! wanted type (~8 ns for a float32). Callers cut the matrix out of the text
//! ([`with_placeholders`]) and still read the rest of the document with serde_json, which
//! judges its validity; whatever these functions do not recognise gives `None`, and the caller
//! reads the original text with serde_json instead, which is also what reports errors.
//!
//! The walking functions take `at` on the first byte of a value and are loose on purpose:
//! they find positions in valid JSON, and serde_json rejects what is not JSON afterwards.

use memchr::memchr2;

/// A matrix in row-major order: `rows` lists of `cols` numbers (one list when not `nested`).
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix<T> {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<T>,
    pub nested: bool,
}

/// The number types a matrix is read into.
pub trait Number: fast_float2::FastFloat + Copy {
    fn finite(self) -> bool;
}

impl Number for f32 {
    fn finite(self) -> bool {
        self.is_finite()
    }
}

impl Number for f64 {
    fn finite(self) -> bool {
        self.is_finite()
    }
}

/// `text` with each `(start, end)` span (in order, not overlapping) replaced by `[]`.
pub fn with_placeholders(text: &[u8], spans: &[(usize, usize)]) -> Vec<u8> {
    let cut: usize = spans.iter().map(|(start, end)| end - start).sum();
    let mut out = Vec::with_capacity(text.len() - cut + 2 * spans.len());
    let mut from = 0;
    for &(start, end) in spans {
        out.extend_from_slice(&text[from..start]);
        out.extend_from_slice(b"[]");
        from = end;
    }
    out.extend_from_slice(&text[from..]);
    out
}

/// With `at` just past an object member's value, the position past the object's `}`; `None`
/// if a later member is named `unwanted` (serde keeps the last of two equal keys, and a
/// caller that stopped at the first must not guess which one counts) or the text is not an
/// object's remainder.
pub fn object_rest(text: &[u8], at: usize, unwanted: &[u8]) -> Option<usize> {
    let mut at = skip_ws(text, at);
    loop {
        match *text.get(at)? {
            b'}' => return Some(at + 1),
            b',' => {
                let name_start = skip_ws(text, at + 1);
                let name_end = string_end(text, name_start)?;
                if &text[name_start + 1..name_end - 1] == unwanted {
                    return None;
                }
                at = skip_ws(text, name_end);
                if text.get(at) != Some(&b':') {
                    return None;
                }
                at = skip_ws(text, value_end(text, skip_ws(text, at + 1))?);
            }
            _ => return None,
        }
    }
}

/// With `at` on an object's `{`, the position of the value of its first member named `key`.
/// The members before it are skipped, not decoded.
pub fn member_value(text: &[u8], at: usize, key: &[u8]) -> Option<usize> {
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

pub fn skip_ws(text: &[u8], mut at: usize) -> usize {
    while matches!(text.get(at), Some(b' ' | b'\n' | b'\r' | b'\t')) {
        at += 1;
    }
    at
}

/// With `at` on a string's opening quote, the position just past its closing quote.
pub fn string_end(text: &[u8], at: usize) -> Option<usize> {
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
pub fn value_end(text: &[u8], at: usize) -> Option<usize> {
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

/// The matrix whose `[` is at `at`: either a flat list of numbers (`nested` false, one row) or
/// a non-empty list of equally long, non-empty lists of numbers. Returns it and the position
/// past its `]`. `capacity` is how many numbers to make room for at first.
pub fn parse_matrix<T: Number>(text: &[u8], at: usize, capacity: usize) -> Option<(Matrix<T>, usize)> {
    let mut m = Matrix { rows: 0, cols: 0, data: Vec::with_capacity(capacity), nested: false };
    let inner = skip_ws(text, at + 1);
    match *text.get(inner)? {
        b'[' => {
            m.nested = true;
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
            let end = numbers(text, at + 1, &mut m.data)?;
            m.rows = 1;
            m.cols = m.data.len();
            Some((m, end))
        }
    }
}

/// Numbers separated by commas up to a `]`, from `at` (just past the `[`). Returns the position
/// past the `]`. An empty list is refused.
fn numbers<T: Number>(text: &[u8], at: usize, out: &mut Vec<T>) -> Option<usize> {
    let mut at = skip_ws(text, at);
    loop {
        let (value, len) = fast_float2::parse_partial::<T, _>(text.get(at..)?).ok()?;
        if !value.finite() || !is_json_number(&text[at..at + len]) {
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

    #[test]
    fn matrices_of_both_layouts_and_types() {
        let text = b" [ [1, 2.5] , [-3e2,4] ] tail";
        let (m, end) = parse_matrix::<f64>(text, 1, 0).unwrap();
        assert_eq!(m, Matrix { rows: 2, cols: 2, data: vec![1.0, 2.5, -300.0, 4.0], nested: true });
        assert_eq!(&text[end..], b" tail");
        let (m, _) = parse_matrix::<f32>(b"[0.1,0.2]", 0, 0).unwrap();
        assert_eq!(m, Matrix { rows: 1, cols: 2, data: vec![0.1f32, 0.2], nested: false });
        // Correctly rounded straight to the type: the float64 text of a float32 gives it back.
        let (m, _) = parse_matrix::<f32>(b"[0.10000000149011612]", 0, 0).unwrap();
        assert_eq!(m.data[0].to_bits(), 0.1f32.to_bits());
        for bad in [&b"[]"[..], b"[[]]", b"[[1],[]]", b"[[1,2],[3]]", b"[1,[2]]", b"[[1],2]", b"[1e400]", b"[1"] {
            assert!(parse_matrix::<f64>(bad, 0, 0).is_none(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn placeholders_replace_spans() {
        assert_eq!(with_placeholders(b"a[1]b[2,3]c", &[(1, 4), (5, 10)]), b"a[]b[]c");
        assert_eq!(with_placeholders(b"abc", &[]), b"abc");
    }

    #[test]
    fn object_rest_skips_members_and_refuses_a_repeated_key() {
        let text = br#"{"a":1 , "b":{"x":"}"}, "c":[1,{"d":2}]} after"#;
        let end = object_rest(text, 6, b"contents").unwrap();
        assert_eq!(&text[end..], b" after");
        assert!(object_rest(br#"{"a":1,"contents":2}"#, 6, b"contents").is_none());
        assert!(object_rest(br#"{"a":1 2}"#, 6, b"z").is_none());
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
