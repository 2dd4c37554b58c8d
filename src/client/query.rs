//! `POST /query`: checks a request before it is sent, sends it, and reads the two kinds of
//! output (reasoning text, encoder embeddings).

use bytes::Bytes;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::embedding_text;
use super::error::Error;
use super::transport::{decode_json, Transport};
use crate::wire::files::QUERY_FILE_EXTENSIONS;
use crate::wire::models::{split_model_id, ModelFamily, FAMILY_PREFIXES};
use crate::wire::query::{field_kind, FieldKind, QueryRequest, QueryResponse, EVENT_TYPES};

/// The dimension of one embedding, per the spec.
pub const EMBEDDING_DIM: usize = 768;

/// Checks every optional field against the spec's table and builds the JSON body.
/// `events` are already-serialised event objects (`check_event`, or a numeric event written in
/// the bindings), spliced in as they are: a (8, 2048) window is not parsed back.
pub fn build_request(
    model: &str,
    query: &str,
    fields: Map<String, Value>,
    events: Option<Vec<Bytes>>,
) -> Result<Bytes, Error> {
    // Only emptiness is checked: a prefix the client does not know may be a newer family or
    // the organization's own model, and the service is the judge of what it accepts.
    if model.trim().is_empty() {
        return Err(Error::invalid_argument(
            "model",
            format!(
                "must be a versioned model id such as {} (reasoning) or {} (encoder); \
                 client.models.list() shows the ones your organization can use",
                ModelFamily::Reasoner.id_examples(),
                ModelFamily::Encoder.id_examples()
            ),
        ));
    }
    for (name, value) in &fields {
        let kind = field_kind(name).ok_or_else(|| {
            Error::invalid_argument(name, "is not a /query request field")
        })?;
        check_kind(name, kind, value)?;
        if name == "file_ids" {
            check_file_ids(value)?;
        }
        check_range(name, value)?;
    }
    if fields.contains_key("events") {
        return Err(Error::invalid_argument("events", "is passed separately from the other fields"));
    }
    let request = QueryRequest { model: model.to_string(), query: query.to_string(), fields };
    let mut body = serde_json::to_vec(&request)
        .map_err(|e| Error::invalid_argument("query", format!("cannot be serialised: {e}")))?;
    if let Some(events) = events {
        // `body` is a JSON object ending in `}`: reopen it and append the events array.
        let size: usize = events.iter().map(|e| e.len() + 1).sum();
        body.reserve(size + 12);
        body.pop();
        body.extend_from_slice(br#","events":["#);
        for (i, event) in events.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(event);
        }
        body.extend_from_slice(b"]}");
    }
    Ok(Bytes::from(body))
}

/// Whether `model`'s prefix is, exactly, one that names the reasoning family. Only an exact
/// prefix counts: any other (a newer family, the organization's own model, another spelling)
/// says nothing the client can know, and the service is the judge.
fn reasoning_by_prefix(model: &str) -> bool {
    let (prefix, _) = split_model_id(model);
    FAMILY_PREFIXES.iter().any(|(p, family)| Some(*p) == prefix && *family == ModelFamily::Reasoner)
}

/// The JSON of an encoder request around its one numeric event, built once (per `embed` call,
/// per `embed_many` batch): every request is `prefix + event + "]}"`, written by the bindings
/// in one buffer.
#[derive(Debug, Clone)]
pub struct BodyTemplate {
    prefix: Bytes,
}

const BODY_SUFFIX: &[u8] = b"]}";

impl BodyTemplate {
    /// Checks the model and options as `embed` does.
    pub fn new(model: &str, normalize_input: Option<bool>) -> Result<Self, Error> {
        let mut fields = Map::new();
        if let Some(normalize) = normalize_input {
            fields.insert("normalize_input".into(), Value::Bool(normalize));
        }
        Self::with_fields(model, fields)
    }

    /// A template for bodies with any `/query` fields besides the event (checked as
    /// `build_request` checks them). A model whose prefix names a reasoning family is refused:
    /// it would answer text, after the request was sent (and billed; `embed_many` would send
    /// one per request slot).
    pub fn with_fields(model: &str, fields: Map<String, Value>) -> Result<Self, Error> {
        if reasoning_by_prefix(model) {
            return Err(Error::invalid_argument(
                "model",
                format!(
                    "is {model:?}, a reasoning model by its prefix, which answers with text: embed() and \
                     embed_many() need an encoder model ({}); use query() for reasoning models",
                    ModelFamily::Encoder.id_examples()
                ),
            ));
        }
        let empty = build_request(model, "", fields, Some(Vec::new()))?;
        // `{..., "events":[]}`: keep everything up to the opening bracket.
        let prefix = empty.slice(..empty.len() - BODY_SUFFIX.len());
        Ok(BodyTemplate { prefix })
    }

    /// What goes before the event: the writer builds each body in one buffer,
    /// `head + event + tail`.
    pub fn head(&self) -> &[u8] {
        &self.prefix
    }

    /// What goes after the event.
    pub fn tail(&self) -> &'static [u8] {
        BODY_SUFFIX
    }
}

fn check_kind(name: &str, kind: FieldKind, value: &Value) -> Result<(), Error> {
    let ok = match kind {
        FieldKind::String => value.is_string(),
        FieldKind::StringList => value.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
        FieldKind::Integer => value.is_i64() || value.is_u64(),
        FieldKind::Number => value.is_number(),
        FieldKind::Boolean => value.is_boolean(),
        FieldKind::Object => value.is_object(),
        FieldKind::Events => value.is_array(),
    };
    if ok {
        return Ok(());
    }
    if let (FieldKind::StringList, Some(items)) = (kind, value.as_array()) {
        if let Some((i, item)) = items.iter().enumerate().find(|(_, item)| !item.is_string()) {
            return Err(Error::invalid_argument(name, format!("must be a list of strings; {name}[{i}] is {}", json_type(item))));
        }
    }
    let expected = match kind {
        FieldKind::String => "a string",
        FieldKind::StringList => "a list of strings",
        FieldKind::Integer => "an integer",
        FieldKind::Number => "a number",
        FieldKind::Boolean => "a boolean",
        FieldKind::Object => "a dict",
        FieldKind::Events => "a list of events",
    };
    Err(Error::invalid_argument(name, format!("must be {expected}, got {}", json_type(value))))
}

pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "None",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a float",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a dict",
    }
}

/// The fields the spec's table gives as a maximum count or size: a query of no tokens, no frames
/// or no bytes is none (the service answers 400), so they take more than 0. A wait may be 0.
/// (Other numbers, such as `temperature` or `top_k`, have no range in the spec; the service
/// judges them.)
const POSITIVE: [&str; 3] = ["max_new_tokens", "max_frames", "max_query_size_mb"];
const NOT_NEGATIVE: [&str; 1] = ["max_wait_time_sec"];

fn check_range(name: &str, value: &Value) -> Result<(), Error> {
    let number = value.as_f64();
    if POSITIVE.contains(&name) && number.is_some_and(|x| x <= 0.0) {
        let least = if value.is_f64() { "more than 0" } else { "1 or more" };
        return Err(Error::invalid_argument(name, format!("is {value}; it takes {least}")));
    }
    if NOT_NEGATIVE.contains(&name) && number.is_some_and(|x| x < 0.0) {
        return Err(Error::invalid_argument(name, format!("is {value}; it takes 0 or more")));
    }
    Ok(())
}

/// `file_ids` take file names (`file_id`), whose extension decides how the file is read. A
/// `fil_` uid is the classic mistake: the service rejects it as `unsupported_file_type`.
fn check_file_ids(value: &Value) -> Result<(), Error> {
    let Some(ids) = value.as_array() else { return Ok(()) };
    for (i, id) in ids.iter().filter_map(Value::as_str).enumerate() {
        // A local path is the likely mistake (the file was never uploaded, or its name is
        // meant): no file_id holds a separator, as files.download refuses one.
        if id.contains('/') || id.contains('\\') {
            return Err(Error::invalid_argument(
                "file_ids",
                format!(
                    "file_ids[{i}] is {id:?}, a path; file_ids take the file_id (the uploaded file's \
                     name, e.g. 'notes.txt'): upload the file with files.upload and pass its name"
                ),
            ));
        }
        if id.starts_with("fil_") {
            return Err(Error::invalid_argument(
                "file_ids",
                format!(
                    "file_ids[{i}] is {id:?}, a file_uid; file_ids take the file_id (the uploaded \
                     file's name, e.g. 'notes.txt'), which FileRecord.file_id gives"
                ),
            ));
        }
        let ext = id.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
        if !ext.as_deref().is_some_and(|e| QUERY_FILE_EXTENSIONS.contains(&e)) {
            return Err(Error::invalid_argument(
                "file_ids",
                format!(
                    "file_ids[{i}] is {id:?}, which has no supported extension; /query reads \
                     files ending in {}",
                    QUERY_FILE_EXTENSIONS.iter().map(|e| format!(".{e}")).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// Checks one event given as a plain dict and serialises it.
pub fn check_event(index: usize, event: &Value) -> Result<Bytes, Error> {
    let arg = format!("events[{index}]");
    let obj = event
        .as_object()
        .ok_or_else(|| Error::invalid_argument(&arg, "must be a dict {'type': ..., 'event_data': {...}}"))?;
    let kind = obj.get("type").and_then(Value::as_str).ok_or_else(|| {
        Error::invalid_argument(&arg, "needs a 'type' string; sensorium.events builds events for you")
    })?;
    if !EVENT_TYPES.contains(&kind) {
        return Err(Error::invalid_argument(
            &arg,
            format!("has type {kind:?}; the platform knows {}", EVENT_TYPES.join(", ")),
        ));
    }
    let data = obj.get("event_data").and_then(Value::as_object).ok_or_else(|| {
        Error::invalid_argument(&arg, "needs an 'event_data' dict with the event's 'contents'")
    })?;
    if kind == "data.json" {
        match data.get("contents") {
            Some(Value::String(_)) => {}
            Some(other) => {
                return Err(Error::invalid_argument(
                    &arg,
                    format!(
                        "is a data.json event whose contents are {}; the platform requires a \
                         serialised JSON string (it answers 400 invalid_parameter_type otherwise). \
                         Use sensorium.events.json(obj), or json.dumps(obj) as the contents",
                        json_type(other)
                    ),
                ))
            }
            None => return Err(Error::invalid_argument(&arg, "is a data.json event without 'contents'")),
        }
    }
    serde_json::to_vec(event)
        .map(Bytes::from)
        .map_err(|e| Error::invalid_argument(&arg, format!("cannot be serialised: {e}")))
}

/// Sends a query and returns the parsed response, its output strings and its raw body.
/// `own_wait`: the query sets `max_wait_time_sec`, so its 504 is not retried. A 200
/// with `status: "failed"` becomes `Error::QueryFailed`; a 200 without an output in any layout
/// the platform has used is an `Error::Decode`, never an empty answer.
pub async fn run(transport: &Transport, body: Bytes, own_wait: bool) -> Result<(QueryResponse, Vec<String>, Bytes), Error> {
    let call = transport.query_call(body, own_wait);
    transport
        .execute(&call, |response| async move {
            let url = response.url().to_string();
            let raw = transport.body(response).await?;
            let parsed: QueryResponse = decode_json(&url, &raw)?;
            if parsed.status.as_deref() == Some("failed") {
                return Err(Error::QueryFailed {
                    query_id: parsed.query_id.clone().unwrap_or_default(),
                    error_msg: parsed.error_msg.clone().unwrap_or_else(|| "(no error_msg given)".into()),
                    response: serde_json::from_slice(&raw).unwrap_or(Value::Null),
                });
            }
            let texts = output_texts(&parsed).map_err(|problem| Error::unexpected(&url, problem, &raw))?;
            Ok((parsed, texts, raw))
        })
        .await
}

/// The output strings of a reasoning response. The spec puts them at `response.response`;
/// older payloads put the list at `response` itself, or a plain string. An encoder's rows (a
/// `query()` with numeric events) come out as their JSON text. No output at all, or one of
/// another type, is an error naming what was expected.
pub fn output_texts(response: &QueryResponse) -> Result<Vec<String>, String> {
    fn strings(v: &Value) -> Option<Vec<String>> {
        match v {
            Value::String(s) => Some(vec![s.clone()]),
            Value::Array(items) => Some(
                items
                    .iter()
                    .map(|i| match i {
                        Value::String(s) => s.clone(),
                        // No output for that item: an empty text keeps the others in their
                        // places, where `null` written out would read as the model's word.
                        Value::Null => String::new(),
                        other => other.to_string(),
                    })
                    .collect(),
            ),
            _ => None,
        }
    }
    let output = match &response.response {
        Value::Object(map) => map.get("response"),
        Value::Null => None,
        other => Some(other),
    };
    match output {
        Some(value) => strings(value).ok_or_else(|| {
            format!(
                "response.response should be the model's output, a list of strings, but is {}",
                describe(value)
            )
        }),
        None => Err(format!(
            "the answer has no output: expected response.response, a list of strings{}",
            if response.response.is_null() { String::new() } else { format!(", in {}", describe(&response.response)) }
        )),
    }
}

/// A short description of a JSON value for an error message: its type and its start.
fn describe(value: &Value) -> String {
    let text = value.to_string();
    let head = super::error::truncate(&text, 80);
    format!("{} {head}", json_type(value))
}

/// Warnings the service attached: `response.warning_messages` and the queue's `error_messages`.
pub fn warnings(response: &QueryResponse) -> Vec<String> {
    let mut out: Vec<String> = response
        .response
        .get("warning_messages")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    out.extend(response.error_messages.iter().flatten().cloned());
    out
}

/// An encoder's output: rows of float32, parsed straight from the body without building a
/// JSON tree (no intermediate value per element).
#[derive(Debug, Default)]
pub struct EmbeddingMatrix {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
}

/// The parts of an encoder response the embedding path needs. `response` is optional so a
/// failed query (whose payload is null or absent) is read in the same single pass.
#[derive(Debug, Deserialize)]
pub struct EncoderResponse {
    #[serde(default)]
    pub query_id: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub error_msg: Option<String>,
    #[serde(default)]
    pub error_messages: Option<Vec<String>>,
    #[serde(default)]
    pub response: Option<EncoderPayload>,
}

#[derive(Debug, Deserialize)]
pub struct EncoderPayload {
    pub response: EmbeddingMatrix,
    #[serde(default)]
    pub warning_messages: Vec<String>,
}

impl<'de> Deserialize<'de> for EmbeddingMatrix {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(MatrixVisitor)
    }
}

struct MatrixVisitor;

/// One element of the outer list: a number (flat single-channel layout) or a row.
enum Cell {
    Number(f32),
    Row(Vec<f32>),
}

impl<'de> Deserialize<'de> for Cell {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CellVisitor;
        impl<'de> Visitor<'de> for CellVisitor {
            type Value = Cell;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number or a list of numbers")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Cell, E> {
                Ok(Cell::Number(v as f32))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Cell, E> {
                Ok(Cell::Number(v as f32))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Cell, E> {
                Ok(Cell::Number(v as f32))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Cell, A::Error> {
                let mut row = Vec::with_capacity(seq.size_hint().unwrap_or(EMBEDDING_DIM));
                while let Some(v) = seq.next_element::<f32>()? {
                    row.push(v);
                }
                Ok(Cell::Row(row))
            }
        }
        deserializer.deserialize_any(CellVisitor)
    }
}

impl<'de> Visitor<'de> for MatrixVisitor {
    type Value = EmbeddingMatrix;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of 768 numbers or a list of 768-number lists")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<EmbeddingMatrix, A::Error> {
        let mut m = EmbeddingMatrix::default();
        let mut flat = false;
        while let Some(cell) = seq.next_element::<Cell>()? {
            match cell {
                Cell::Number(v) if m.rows == 0 => {
                    flat = true;
                    m.data.push(v);
                }
                Cell::Row(row) if !flat => {
                    if m.rows == 0 {
                        m.cols = row.len();
                        m.data.reserve(row.len() * 8);
                    } else if row.len() != m.cols {
                        return Err(de::Error::custom(format!(
                            "embedding rows differ in length ({} and {})",
                            m.cols,
                            row.len()
                        )));
                    }
                    m.data.extend_from_slice(&row);
                    m.rows += 1;
                }
                _ => return Err(de::Error::custom("embeddings mix numbers and lists")),
            }
        }
        if flat {
            m.rows = 1;
            m.cols = m.data.len();
        }
        // Read as float32, a number past its range became infinite: the answer cannot be held,
        // and an `inf` in the vectors would be passed on without a word.
        if let Some(at) = m.data.iter().position(|v| !v.is_finite()) {
            let (row, col) = (at.checked_div(m.cols).unwrap_or(0), at.checked_rem(m.cols).unwrap_or(at));
            return Err(de::Error::custom(format!(
                "the embedding value at row {row}, column {col} does not fit a float32 (beyond ±3.4e38)"
            )));
        }
        Ok(m)
    }
}

/// Sends an encoder query and parses the embeddings. Returns the matrix, the warnings, the
/// query id and the raw body (for `to_dict()`). `channels` is how many channels were sent: the
/// answer must hold one 768-number row for each.
pub async fn run_embeddings(
    transport: &Transport,
    body: Bytes,
    channels: usize,
    own_wait: bool,
) -> Result<(EmbeddingMatrix, Vec<String>, Option<String>, Bytes), Error> {
    let call = transport.query_call(body, own_wait);
    transport
        .execute(&call, |response| async move {
            let raw = transport.body(response).await?;
            let (matrix, warnings, query_id) = parse_embeddings(&raw, Some(channels))?;
            Ok((matrix, warnings, query_id, raw))
        })
        .await
}

/// Reads an encoder response body: the matrix, the warnings and the query id. The matrix must
/// be (channels, 768): `expected_rows` channels when known (one row per channel sent).
pub fn parse_embeddings(
    raw: &[u8],
    expected_rows: Option<usize>,
) -> Result<(EmbeddingMatrix, Vec<String>, Option<String>), Error> {
    let (mut parsed, cut_out) = match read_fast(raw, expected_rows) {
        Some((parsed, matrix)) => (parsed, Some(matrix)),
        None => match decode_json::<EncoderResponse>("/query", raw) {
            Ok(parsed) => (parsed, None),
            // A failed query may carry anything as its payload; its status decides.
            Err(err) => return Err(failed_query(raw).or_else(|| explain_non_embedding(raw)).unwrap_or(err)),
        },
    };
    if let (Some(payload), Some(matrix)) = (parsed.response.as_mut(), cut_out) {
        payload.response = matrix;
    }
    if parsed.status.as_deref() == Some("failed") {
        return Err(Error::QueryFailed {
            query_id: parsed.query_id.unwrap_or_default(),
            error_msg: parsed.error_msg.unwrap_or_else(|| "(no error_msg given)".into()),
            response: serde_json::from_slice(raw).unwrap_or(Value::Null),
        });
    }
    let payload = parsed
        .response
        .ok_or_else(|| Error::unexpected("/query", "the answer has no response.response embeddings", raw))?;
    let m = &payload.response;
    let rows_ok = expected_rows.map_or(m.rows > 0, |rows| m.rows == rows);
    if !rows_ok || m.cols != EMBEDDING_DIM {
        let wanted = match expected_rows {
            Some(rows) => format!("({rows}, {EMBEDDING_DIM}), one row per channel sent"),
            None => format!("(channels, {EMBEDDING_DIM})"),
        };
        return Err(Error::unexpected(
            "/query",
            format!("the embeddings should be shaped {wanted}, but are ({}, {})", m.rows, m.cols),
            raw,
        ));
    }
    let mut warnings = payload.warning_messages;
    warnings.extend(parsed.error_messages.into_iter().flatten());
    Ok((payload.response, warnings, parsed.query_id))
}

/// The answer read with its matrix parsed by hand ([`embedding_text`]) and the rest by serde:
/// `None` unless both succeed and the rest holds the `[]` left in the matrix's place there.
pub(crate) fn read_fast(raw: &[u8], expected_rows: Option<usize>) -> Option<(EncoderResponse, EmbeddingMatrix)> {
    let (matrix, rest) = embedding_text::split_matrix(raw, expected_rows)?;
    let parsed: EncoderResponse = serde_json::from_slice(&rest).ok()?;
    let placeholder = &parsed.response.as_ref()?.response;
    (placeholder.rows == 0 && placeholder.data.is_empty()).then_some((parsed, matrix))
}

fn failed_query(raw: &[u8]) -> Option<Error> {
    let head: StatusOnly = serde_json::from_slice(raw).ok()?;
    (head.status.as_deref() == Some("failed")).then(|| Error::QueryFailed {
        query_id: head.query_id.unwrap_or_default(),
        error_msg: head.error_msg.unwrap_or_else(|| "(no error_msg given)".into()),
        response: serde_json::from_slice(raw).unwrap_or(Value::Null),
    })
}

/// A model that answers with text (a reasoning model) gives no embeddings; say so instead of
/// reporting a parse error.
fn explain_non_embedding(raw: &[u8]) -> Option<Error> {
    let body: QueryResponse = serde_json::from_slice(raw).ok()?;
    let texts = output_texts(&body).ok()?;
    let is_text = body
        .response
        .get("response")
        .and_then(Value::as_array)
        .is_some_and(|items| items.iter().any(Value::is_string));
    (is_text && !texts.is_empty()).then(|| {
        Error::invalid_argument(
            "model",
            format!(
                "answered with text, not embeddings: embed() needs an encoder model ({}); \
                 use query() for reasoning models ({})",
                ModelFamily::Encoder.id_examples(),
                ModelFamily::Reasoner.id_examples()
            ),
        )
    })
}

#[derive(Deserialize)]
struct StatusOnly {
    #[serde(default)]
    query_id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    error_msg: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn body_template_wraps_one_event() {
        let t = BodyTemplate::new("Encoder::x", Some(true)).unwrap();
        let body = [t.head(), br#"{"type":"data.numeric_array","event_data":{"contents":[[1,2]]}}"#, t.tail()].concat();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["model"], "Encoder::x");
        assert_eq!(v["normalize_input"], true);
        assert_eq!(v["events"][0]["event_data"]["contents"][0][1], 2);
        let plain = BodyTemplate::new("E::x", None).unwrap();
        let plain: Value = serde_json::from_slice(&[plain.head(), b"{}", plain.tail()].concat()).unwrap();
        assert!(plain.get("normalize_input").is_none());
        assert!(BodyTemplate::new("  ", None).is_err());
    }

    #[test]
    fn body_template_refuses_only_the_known_reasoning_prefixes() {
        for model in ["Reasoner::c2_4_7b_251215a172f6d7", "Newton::x"] {
            match BodyTemplate::new(model, None) {
                Err(Error::InvalidArgument { argument, message }) => {
                    assert_eq!(argument, "model");
                    assert!(message.contains(model), "{message}");
                }
                other => panic!("{model}: {other:?}"),
            }
        }
        // Encoders, unknown families and other spellings are sent: the service judges them.
        for model in ["Encoder::e", "OmegaEncoder::e", "Acme::ft-reason-1", "newton::x", "Newtonian::x", "Newton"] {
            assert!(BodyTemplate::new(model, None).is_ok(), "{model}");
        }
    }

    #[test]
    fn sends_only_given_fields() {
        let mut fields = Map::new();
        fields.insert("max_new_tokens".into(), json!(12));
        let body = build_request("Reasoner::x", "hi", fields, None).unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v, json!({"model": "Reasoner::x", "query": "hi", "max_new_tokens": 12}));
    }

    #[test]
    fn rejects_wrong_types_and_unknown_fields() {
        let mut fields = Map::new();
        fields.insert("max_new_tokens".into(), json!("12"));
        let err = build_request("R::x", "", fields, None).unwrap_err().to_string();
        assert!(err.contains("max_new_tokens") && err.contains("integer"), "{err}");
        let mut fields = Map::new();
        fields.insert("temprature".into(), json!(0.5));
        assert!(build_request("R::x", "", fields, None).is_err());
    }

    #[test]
    fn file_ids_take_names() {
        for (ids, needle) in [
            (json!(["fil_123"]), "file_uid"),
            (json!(["notes"]), "no supported extension"),
            (json!(["a.txt", "b.parquet"]), "file_ids[1]"),
            (json!(["a.txt", 1]), "file_ids[1] is an integer"),
        ] {
            let mut fields = Map::new();
            fields.insert("file_ids".into(), ids);
            let err = build_request("R::x", "", fields, None).unwrap_err().to_string();
            assert!(err.contains(needle), "{err}");
        }
        let mut fields = Map::new();
        fields.insert("file_ids".into(), json!(["A.JPG", "b.json", "c.csv"]));
        assert!(build_request("R::x", "", fields, None).is_ok());
    }

    #[test]
    fn json_event_contents_must_be_a_string() {
        let bad = json!({"type": "data.json", "event_data": {"contents": {"a": 1}}});
        let err = check_event(0, &bad).unwrap_err().to_string();
        assert!(err.contains("json.dumps") && err.contains("events[0]"), "{err}");
        let good = json!({"type": "data.json", "event_data": {"contents": "{\"a\": 1}"}});
        assert!(check_event(0, &good).is_ok());
    }

    #[test]
    fn both_embedding_layouts_parse() {
        let flat: EncoderPayload =
            serde_json::from_value(json!({"response": [0.5, 1, -2.25]})).unwrap();
        assert_eq!((flat.response.rows, flat.response.cols), (1, 3));
        let nested: EncoderPayload = serde_json::from_value(
            json!({"response": [[1.0, 2.0], [3.0, 4.0]], "warning_messages": ["w"]}),
        )
        .unwrap();
        assert_eq!((nested.response.rows, nested.response.cols), (2, 2));
        assert_eq!(nested.response.data, vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(nested.warning_messages, vec!["w".to_string()]);
        assert!(serde_json::from_value::<EncoderPayload>(json!({"response": [[1.0], [1.0, 2.0]]})).is_err());
        assert!(serde_json::from_value::<EncoderPayload>(json!({"response": [1.0, [1.0]]})).is_err());
        // Past float32's range: refused, not read as infinite (the fast reader hands such an
        // answer to serde, which is where this is decided).
        let beyond = br#"{"status":"completed","response":{"response":[[0.5,1e39]]}}"#;
        let err = parse_embeddings(beyond, Some(1)).unwrap_err().to_string();
        assert!(err.contains("row 0, column 1") && err.contains("float32"), "{err}");
    }

    #[test]
    fn texts_from_every_layout() {
        let mk = |v: Value| QueryResponse { response: v, ..Default::default() };
        assert_eq!(output_texts(&mk(json!({"response": ["a", "b"]}))).unwrap(), vec!["a", "b"]);
        assert_eq!(output_texts(&mk(json!(["a"]))).unwrap(), vec!["a"]);
        assert_eq!(output_texts(&mk(json!({"response": ["a", null, 3]}))).unwrap(), vec!["a", "", "3"]);
        assert_eq!(output_texts(&mk(json!("a"))).unwrap(), vec!["a"]);
        assert_eq!(output_texts(&mk(json!({"response": []}))).unwrap(), Vec::<String>::new());
        for wrong in [json!(null), json!(42), json!({}), json!({"response": 42}), json!({"response": {"a": 1}})] {
            let err = output_texts(&mk(wrong.clone())).unwrap_err();
            assert!(err.contains("response.response"), "{wrong}: {err}");
        }
    }
}
