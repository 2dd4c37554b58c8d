//! Property-based fuzzing of every parser that reads bytes from the network: header values
//! (`Retry-After`, `retry-after-ms`), error bodies of every shape, query and encoder answers,
//! page envelopes, upload answers and the upload plan built from them, and the emulator's own
//! request parser. Each target feeds structure-aware JSON (trees built from the field names the
//! platform uses) and raw bytes, and checks that nothing panics and that what comes out keeps
//! its promises (bounded messages, shapes as documented).
//!
//! `cargo test --lib fuzz` runs each target with proptest's default case count; for a real run:
//! `PROPTEST_CASES=10000000 cargo test --release --lib fuzz -- --test-threads 2`.

use std::time::Duration;

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Map, Number, Value};

use crate::client::error::{ApiError, Error, SUMMARY_LIMIT};
use crate::client::pagination::normalize_page;
use crate::client::query::{output_texts, parse_embeddings, read_fast, EncoderResponse, EMBEDDING_DIM};
use crate::client::retry::{parse_retry_after, RetryPolicy};
use crate::client::secret::ApiKey;
use crate::client::upload::{check_plan, part_ranges};
use crate::wire::query::QueryResponse;
use crate::wire::uploads::{CompleteResponse, InitiateResponse, PartUrlsResponse};

/// Field names the platform's answers use, so generated trees hit the parsers' real branches.
const FIELD_NAMES: &[&str] = &[
    "response", "status", "query_id", "error_msg", "error_messages", "warning_messages", "errors",
    "detail", "code", "message", "suggestion", "error_uid", "data", "has_more", "next_cursor",
    "prev_cursor", "upload_id", "parts", "part_number", "url", "offset", "length", "part_size",
    "num_parts", "type", "event_data", "is_valid", "error_messages", "file_uid", "total_bytes",
];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(FIELD_NAMES).prop_map(str::to_string),
        1 => "[a-z_]{0,8}",
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(|n| Value::Number(n.into())),
        any::<u64>().prop_map(|n| Value::Number(n.into())),
        any::<f64>().prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        (0u32..1000).prop_map(|n| Value::Number(n.into())),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        ".{0,24}".prop_map(Value::String),
        proptest::sample::select(&["completed", "failed", "sk-SECRET-123", ""][..]).prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(4, 48, 8, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..8).prop_map(Value::Array),
            btree_map(key(), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A body as a server might send it: JSON text, its prefix (cut mid-way), or raw bytes.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => json().prop_map(|v| v.to_string().into_bytes()),
        1 => (json(), any::<prop::sample::Index>()).prop_map(|(v, cut)| {
            let text = v.to_string().into_bytes();
            let at = cut.index(text.len() + 1);
            text[..at].to_vec()
        }),
        1 => vec(any::<u8>(), 0..128),
    ]
}

/// An encoder answer with rows of arbitrary lengths, the shape the embedding parser reads.
fn encoder_answer() -> impl Strategy<Value = Vec<u8>> {
    let row = vec(-1e3f32..1e3, 0..4).prop_map(|r| Value::Array(r.into_iter().map(|f| serde_json::json!(f)).collect()));
    (vec(row, 0..4), proptest::option::of(json()), any::<bool>()).prop_map(|(rows, extra, failed)| {
        let mut answer = serde_json::json!({"status": if failed { "failed" } else { "completed" }, "response": {"response": rows}});
        if let (Some(extra), Some(map)) = (extra, answer.as_object_mut()) {
            map.insert("extra".into(), extra);
        }
        answer.to_string().into_bytes()
    })
}

/// An encoder answer written as text the way servers vary it: members in any order (with
/// lookalike `response` keys in strings and in other members), any whitespace, and each float32
/// as its shortest text, as the float64 text of the same value, or in exponent form. Returns the
/// text and the matrix it holds.
fn encoder_answer_text() -> impl Strategy<Value = (Vec<u8>, Vec<Vec<f32>>)> {
    let number = (any::<f32>().prop_filter("finite", |f| f.is_finite()), 0u8..3).prop_map(|(f, style)| {
        let text = match style {
            0 => zmij::Buffer::new().format_finite(f).to_string(),
            1 => zmij::Buffer::new().format_finite(f as f64).to_string(),
            _ => format!("{f:e}"),
        };
        (f, text)
    });
    let ws = proptest::sample::select(vec!["", " ", "\n  ", "\t"]);
    let rows = (1usize..4, 1usize..6).prop_flat_map(move |(rows, cols)| vec(vec(number.clone(), cols), rows));
    let others = proptest::sample::subsequence(vec![
        r#""query_id":"q-\"response\":[1]""#,
        r#""status":"completed""#,
        r#""warning_messages":["response"]"#,
        r#""prompt":{"response":[[2]],"x":"]}"}"#,
        r#""generation_latency":0.25"#,
    ], 0..4);
    (rows, others, any::<bool>(), ws, any::<proptest::sample::Index>()).prop_map(|(rows, others, flat, ws, at)| {
        let flat = flat && rows.len() == 1;
        let row_text = |row: &Vec<(f32, String)>| {
            format!("[{ws}{}{ws}]", row.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>().join(&format!("{ws},{ws}")))
        };
        let matrix = if flat {
            row_text(&rows[0])
        } else {
            format!("[{}]", rows.iter().map(row_text).collect::<Vec<_>>().join(","))
        };
        let mut inner: Vec<String> = others.iter().map(|s| s.to_string()).collect();
        inner.insert(at.index(inner.len() + 1), format!("\"response\"{ws}:{ws}{matrix}"));
        let mut outer: Vec<String> = others.iter().map(|s| s.to_string()).collect();
        outer.insert(at.index(outer.len() + 1), format!("\"response\":{{{ws}{}{ws}}}", inner.join(",")));
        let text = format!("{ws}{{{}}}{ws}", outer.join(&format!(",{ws}")));
        let values = rows.iter().map(|r| r.iter().map(|(f, _)| *f).collect()).collect();
        (text.into_bytes(), values)
    })
}

/// `/query` bodies with numeric events as clients write them, then often damaged: events of
/// other kinds among them, members in any order, repeated keys, and one byte changed.
fn numeric_query_body() -> impl Strategy<Value = Vec<u8>> {
    let number = prop_oneof![
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| zmij::Buffer::new().format_finite(f).to_string()),
        (-1000i64..1000).prop_map(|i| i.to_string()),
        proptest::sample::select(vec!["1e400", "-0", "01", "1.", "NaN", "\"2\"", "true", "[1]", "1e-400"]).prop_map(str::to_string),
    ];
    let channel = vec(number, 0..5).prop_map(|n| format!("[{}]", n.join(",")));
    let contents = prop_oneof![
        4 => vec(channel, 0..4).prop_map(|c| format!("[{}]", c.join(" , "))),
        1 => Just(r#""text""#.to_string()),
        1 => Just("[1,2]".to_string()),
    ];
    let kind = proptest::sample::select(vec!["data.numeric_array", "data.numeric_array", "data.text", "data.base64_img_array", "nope"]);
    let event = (kind, contents, any::<bool>(), any::<bool>()).prop_map(|(kind, contents, type_last, twice)| {
        let data = if twice { format!(r#"{{"contents":[[7]],"contents":{contents}}}"#) } else { format!(r#"{{"contents":{contents}}}"#) };
        if type_last {
            format!(r#"{{"event_data":{data},"type":"{kind}"}}"#)
        } else {
            format!(r#"{{"type":"{kind}","event_data":{data}}}"#)
        }
    });
    let model = proptest::sample::select(vec!["Encoder::encoder_embeddings_01", "Reasoner::c2_4_7b_251215a172f6d7"]);
    (vec(event, 0..4), model, any::<bool>(), proptest::option::of((any::<proptest::sample::Index>(), any::<u8>())))
        .prop_map(|(events, model, events_first, damage)| {
            let events = format!(r#""events":[{}]"#, events.join(","));
            let rest = format!(r#""model":"{model}","query":"""#);
            let mut body = if events_first { format!("{{{events},{rest}}}") } else { format!("{{{rest},{events}}}") }.into_bytes();
            if let Some((at, byte)) = damage {
                let i = at.index(body.len());
                body[i] = byte;
            }
            body
        })
}

/// Number tokens of the shape `json_matrix::plain_decimal` reads: random digits, and decimals
/// at, just above and just below a point halfway between two float32s (where rounding through
/// float64 first would go wrong if unchecked), each followed by a delimiter.
fn plain_decimal_token() -> impl Strategy<Value = String> {
    let random = (any::<bool>(), prop_oneof![Just(String::from("0")), "[1-9][0-9]{0,7}"], proptest::option::of("[0-9]{1,20}"))
        .prop_map(|(negative, whole, fraction)| {
            let sign = if negative { "-" } else { "" };
            match fraction {
                Some(fraction) => format!("{sign}{whole}.{fraction}"),
                None => format!("{sign}{whole}"),
            }
        });
    let halfway = (any::<u32>(), -10i32..40, 0usize..5).prop_map(|(bits, exponent, nudge)| {
        let low = f32::from_bits(((exponent + 127) as u32) << 23 | (bits & 0x7F_FFFF));
        let high = f32::from_bits(low.to_bits() + 1);
        let middle = (f64::from(low) + f64::from(high)) / 2.0; // exact: 25 significant bits
        let exact = format!("{middle:.30}");
        let exact = exact.trim_end_matches('0');
        let exact = exact.strip_suffix('.').map(|whole| format!("{whole}.0")).unwrap_or_else(|| exact.to_string());
        // Nudged by one unit in the 19th digit: closer than float64 can resolve.
        let room = 19usize.saturating_sub(exact.bytes().filter(u8::is_ascii_digit).count());
        let whole_digits = format!("{}", middle.trunc()).len();
        match nudge {
            0 => exact,
            // The nearest 16 and 15 significant digits: float64 often rounds these onto the
            // halfway point itself, though they are not on it.
            3 => format!("{middle:.*}", 16usize.saturating_sub(whole_digits)),
            4 => format!("{middle:.*}", 15usize.saturating_sub(whole_digits)),
            1 if room > 0 => format!("{exact}{}1", "0".repeat(room - 1)), // just above
            _ => {
                // Just below: the last digit lowered, then nines.
                let mut digits = exact.into_bytes();
                let last = digits.len() - 1;
                if digits[last] > b'0' {
                    digits[last] -= 1;
                }
                format!("{}{}", String::from_utf8_lossy(&digits), "9".repeat(room))
            }
        }
    });
    // The fast path needs 16 bytes after a decimal point; the text near its end goes elsewhere.
    let rest = proptest::sample::select(vec!["", ",0.5,0.25,0.125,1]", "               "]);
    (prop_oneof![random, halfway], proptest::sample::select(vec![",", "]", " ", "e5", "0", ".", ""]), rest)
        .prop_map(|(number, after, rest)| format!("{number}{after}{rest}"))
}

fn api_error(body: &[u8]) -> ApiError {
    let raw = String::from_utf8_lossy(body).into_owned();
    ApiError::from_body(400, "GET", "http://h/v0.5/x", raw, None)
}

proptest! {
    #[test]
    fn retry_after_headers(value in prop_oneof![
        "[0-9eE.+-]{0,24}",
        any::<f64>().prop_map(|f| f.to_string()),
        "[ -~]{0,40}",
    ], millis in any::<bool>()) {
        let mut headers = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(if millis { "retry-after-ms" } else { "retry-after" }, v);
        }
        let parsed = parse_retry_after(&headers);
        let policy = RetryPolicy::default();
        let delay = policy.delay(1, parsed);
        prop_assert!(delay <= policy.max_retry_after.max(policy.max_delay));
        prop_assert!(parsed.is_none_or(|d| d <= Duration::MAX));
    }

    #[test]
    fn error_bodies(body in body()) {
        let err = api_error(&body);
        let text = Error::Api(Box::new(err.clone())).to_string();
        prop_assert!(text.len() < 2 * SUMMARY_LIMIT + 300, "message of {} bytes", text.len());
        let key = ApiKey::new("sk-SECRET-123");
        let redacted = Error::Api(Box::new(err)).redacted(&key);
        let shown = format!("{:?}", redacted);
        prop_assert!(!shown.contains("sk-SECRET-123"));
    }

    #[test]
    fn query_answers(body in body()) {
        if let Ok(parsed) = serde_json::from_slice::<QueryResponse>(&body) {
            let _ = output_texts(&parsed);
        }
    }

    #[test]
    fn encoder_answers(body in prop_oneof![encoder_answer(), body()], channels in 1usize..4) {
        match parse_embeddings(&body, Some(channels)) {
            Ok((m, _, _)) => {
                prop_assert_eq!((m.rows, m.cols), (channels, EMBEDDING_DIM));
                prop_assert_eq!(m.data.len(), channels * EMBEDDING_DIM);
            }
            Err(Error::Decode { .. } | Error::QueryFailed { .. } | Error::InvalidArgument { .. }) => {}
            Err(other) => prop_assert!(false, "unexpected error kind: {other}"),
        }
    }

    #[test]
    fn encoder_matrices_read_by_hand_are_exact((body, rows) in encoder_answer_text()) {
        let text = String::from_utf8_lossy(&body).into_owned();
        let (_, matrix) = read_fast(&body, None).ok_or_else(|| TestCaseError::fail(format!("fast path declined {text}")))?;
        prop_assert_eq!((matrix.rows, matrix.cols), (rows.len(), rows[0].len()));
        let expected: Vec<u32> = rows.iter().flatten().map(|f| f.to_bits()).collect();
        let got: Vec<u32> = matrix.data.iter().map(|f| f.to_bits()).collect();
        prop_assert_eq!(got, expected, "{}", text);
    }

    #[test]
    fn encoder_matrices_read_by_hand_agree_with_serde(body in prop_oneof![encoder_answer(), body(), encoder_answer_text().prop_map(|(b, _)| b)]) {
        // Whatever the hand-read path accepts, serde_json accepts too, with the same shape and
        // values (the float64 route may round a last float32 bit differently).
        if let Some((parsed, matrix)) = read_fast(&body, None) {
            let full: EncoderResponse = serde_json::from_slice(&body).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let by_serde = full.response.ok_or_else(|| TestCaseError::fail("no response"))?.response;
            prop_assert_eq!((matrix.rows, matrix.cols), (by_serde.rows, by_serde.cols));
            for (a, b) in matrix.data.iter().zip(&by_serde.data) {
                prop_assert!(a == b || (a.to_bits() as i64 - b.to_bits() as i64).abs() <= 1, "{a} vs {b}");
            }
            prop_assert_eq!(parsed.status, full.status);
            prop_assert_eq!(parsed.query_id, full.query_id);
        }
    }

    #[test]
    fn plain_decimals_read_exactly_as_fast_float2_reads_them(token in plain_decimal_token()) {
        use crate::wire::json_matrix::plain_decimal;
        if let Some((value, len)) = plain_decimal::<f32>(token.as_bytes()) {
            let (expected, expected_len) = fast_float2::parse_partial::<f32, _>(&token).map_err(|_| TestCaseError::fail(token.clone()))?;
            prop_assert_eq!((value.to_bits(), len), (expected.to_bits(), expected_len), "{}", token);
        }
        if let Some((value, len)) = plain_decimal::<f64>(token.as_bytes()) {
            let (expected, expected_len) = fast_float2::parse_partial::<f64, _>(&token).map_err(|_| TestCaseError::fail(token.clone()))?;
            prop_assert_eq!((value.to_bits(), len), (expected.to_bits(), expected_len), "{}", token);
        }
    }

    #[test]
    fn page_envelopes(body in json()) {
        if let Ok(page) = normalize_page(body, None) {
            prop_assert!(!page.has_more || page.next_cursor.is_some(), "has_more without a cursor would never end");
        }
    }

    #[test]
    fn upload_answers(body in body(), num_bytes in prop_oneof![Just(0u64), 0u64..10_000, any::<u64>()]) {
        let _ = serde_json::from_slice::<PartUrlsResponse>(&body);
        let _ = serde_json::from_slice::<CompleteResponse>(&body);
        if let Ok(started) = serde_json::from_slice::<InitiateResponse>(&body) {
            if let Ok(ranges) = part_ranges(&started, num_bytes) {
                prop_assert_eq!(ranges.len(), started.parts.len());
            }
        }
    }

    #[test]
    fn upload_plans(parts in vec((any::<u32>(), proptest::option::of(any::<u64>()), proptest::option::of(any::<u64>())), 0..6),
                    part_size in proptest::option::of(any::<u64>()), num_bytes in any::<u64>()) {
        let answer = serde_json::json!({
            "upload_id": "upl_1",
            "part_size": part_size,
            "parts": parts.iter().map(|(n, o, l)| serde_json::json!({"part_number": n, "url": "u", "offset": o, "length": l})).collect::<Vec<_>>(),
        });
        let started: InitiateResponse = serde_json::from_value(answer).map_err(|e| TestCaseError::fail(e.to_string()))?;
        if let Ok(ranges) = part_ranges(&started, num_bytes) {
            let _ = check_plan(&started, &ranges, num_bytes);
            let resumed = InitiateResponse { is_resume: Some(true), num_parts: Some(num_bytes % 7), ..started.clone() };
            let _ = check_plan(&resumed, &ranges, num_bytes);
        }
    }

    #[test]
    fn emulator_query_requests(body in body()) {
        let _ = crate::emulator::fuzz_parse_query(&body);
    }

    #[test]
    fn emulator_numeric_events_read_ahead_as_read_plainly(body in numeric_query_body()) {
        // Same verdict and error code both ways, and the same numbers up to the plain read's
        // rounding: serde_json without its exact float parser can be a few ulps off (seen at
        // 1e-302), where fast-float2 gives the correctly rounded value.
        let (ahead, plain) = crate::emulator::fuzz_parse_query_both_ways(&body);
        let text = String::from_utf8_lossy(&body).into_owned();
        match (ahead, plain) {
            (Ok(a), Ok(b)) => {
                let (a, b): (Vec<f64>, Vec<f64>) = (a.into_iter().flatten().flatten().collect(), b.into_iter().flatten().flatten().collect());
                prop_assert_eq!(a.len(), b.len(), "{}", text);
                for (x, y) in a.iter().zip(&b) {
                    prop_assert!((x - y).abs() <= 1e-14 * x.abs().max(y.abs()), "{} vs {} in {}", x, y, text);
                }
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b, "{}", text),
            (a, b) => prop_assert!(false, "{:?} against {:?} for {}", a.map(|_| ()), b.map(|_| ()), text),
        }
    }
}
