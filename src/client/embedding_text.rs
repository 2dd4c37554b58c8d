//! The embedding matrix read straight from an encoder answer's text (see
//! [`crate::wire::json_matrix`]): through serde_json it was most of `embed()`'s parse, 6,144
//! numbers in ~125 µs; read by hand it takes about half.
//!
//! [`split_matrix`] walks the answer's keys and nesting (no value decoded) to where
//! `response.response` starts, parses the matrix to its closing bracket, and returns the rest of
//! the document with `[]` in the matrix's place. The caller reads that rest with serde_json as
//! before: it still judges the whole document's validity, the status, the ids and the warnings.

use super::query::{EmbeddingMatrix, EMBEDDING_DIM};
use crate::wire::json_matrix::{member_value, parse_matrix, skip_ws, with_placeholders};

/// The matrix at `response.response` and the document with `[]` in its place, or `None` when the
/// answer is not a well-formed numeric matrix where the platform puts it. `rows_hint` sizes the
/// buffer (the number of channels sent, when known).
pub fn split_matrix(text: &[u8], rows_hint: Option<usize>) -> Option<(EmbeddingMatrix, Vec<u8>)> {
    let start = locate_matrix(text)?;
    // Each number takes at least two bytes of text (a digit and a comma): the hint never
    // reserves more than the answer could hold.
    let capacity = rows_hint.unwrap_or(1).saturating_mul(EMBEDDING_DIM).min(text.len() / 2);
    let (m, end) = parse_matrix::<f32>(text, start, capacity)?;
    let matrix = EmbeddingMatrix { rows: m.rows, cols: m.cols, data: m.data };
    Some((matrix, with_placeholders(text, &[(start, end)])))
}

/// Where the value of `response.response` starts, if it is an array. Keys are compared as
/// written: an escaped key (`"respons\u0065"`) is not recognised, and the serde path reads it.
fn locate_matrix(text: &[u8]) -> Option<usize> {
    let mut at = skip_ws(text, 0);
    at = member_value(text, at, b"response")?;
    at = member_value(text, at, b"response")?;
    (text.get(at) == Some(&b'[')).then_some(at)
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
}
