//! Turns a `/query` body into a checked [`QueryInput`], with the platform's error codes and in
//! its order: body shape, required fields, model, field types, events, `file_ids` extensions.
//! (Auth comes before, file existence and prompt size after, in the handler.)

use std::time::Duration;

use serde_json::{Map, Value};

use super::media::{image_info, ImageInfo};
use crate::emulator::api_error::ApiError;
use crate::emulator::catalogue::{Catalogue, SUGGESTIONS};
use crate::emulator::files::upload::LENIENT_BASE64;
use crate::wire::files::QUERY_FILE_EXTENSIONS;
use crate::wire::json_matrix::{member_value, object_rest, parse_matrix, skip_ws, value_end, with_placeholders};
use crate::wire::query::{FieldKind, EVENT_TYPES, QUERY_FIELDS};

use base64::Engine;

/// The spec's server setting `MAX_QUERY_SIZE_MB` ("typically 0.04").
pub const DEFAULT_MAX_QUERY_SIZE_MB: f64 = 0.04;
pub const DEFAULT_MAX_NEW_TOKENS: usize = 256;

pub(crate) use crate::wire::models::ModelFamily as Family;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum InputEvent {
    Text(String),
    Json(String),
    Image(ImageInfo),
    Images(Vec<ImageInfo>),
    /// Channel-first: outer = channels, inner = points; rectangular and non-empty.
    Numeric(Vec<Vec<f64>>),
}

impl InputEvent {
    /// The event's `type` on the wire.
    pub fn event_type(&self) -> &'static str {
        match self {
            InputEvent::Text(_) => "data.text",
            InputEvent::Json(_) => "data.json",
            InputEvent::Image(_) => "data.base64_img",
            InputEvent::Images(_) => "data.base64_img_array",
            InputEvent::Numeric(_) => "data.numeric_array",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct QueryInput {
    pub model: String,
    pub family: Family,
    pub query: String,
    pub system_prompt: String,
    pub instruction_prompt: String,
    pub response_start_prompt: String,
    pub file_ids: Vec<String>,
    pub events: Vec<InputEvent>,
    pub max_new_tokens: usize,
    pub normalize_input: bool,
    /// The request's own `max_query_size_mb`; `None` leaves the server setting in force.
    pub max_query_size_mb: Option<f64>,
    pub max_wait: Option<Duration>,
    pub sanitize_response: bool,
    pub render: bool,
    pub multi_image: bool,
    pub query_metadata: Option<Value>,
}

impl QueryInput {
    /// The combined prompt the size limit applies to: the four prompt strings and every
    /// `data.text` event, in UTF-8 bytes.
    pub fn prompt_bytes(&self) -> usize {
        let texts: usize = self
            .events
            .iter()
            .map(|e| match e {
                InputEvent::Text(t) => t.len(),
                _ => 0,
            })
            .sum();
        self.query.len()
            + self.system_prompt.len()
            + self.instruction_prompt.len()
            + self.response_start_prompt.len()
            + texts
    }

    /// The numeric events' contents, moved out (the events keep empty channel lists).
    pub fn take_numeric_events(&mut self) -> Vec<Vec<Vec<f64>>> {
        self.events
            .iter_mut()
            .filter_map(|e| match e {
                InputEvent::Numeric(c) => Some(std::mem::take(c)),
                _ => None,
            })
            .collect()
    }

    pub fn numeric_events(&self) -> Vec<&Vec<Vec<f64>>> {
        self.events
            .iter()
            .filter_map(|e| match e {
                InputEvent::Numeric(c) => Some(c),
                _ => None,
            })
            .collect()
    }
}

fn wrong_type(field: &str, expected: &str) -> ApiError {
    ApiError::bad_request("invalid_parameter_type", format!("Field '{field}' must be {expected}."))
}

fn kind_matches(kind: FieldKind, v: &Value) -> bool {
    match kind {
        FieldKind::String => v.is_string(),
        FieldKind::StringList => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
        FieldKind::Integer => v.is_i64() || v.is_u64(),
        FieldKind::Number => v.is_number(),
        FieldKind::Boolean => v.is_boolean(),
        FieldKind::Object => v.is_object(),
        FieldKind::Events => v.is_array(),
    }
}

fn kind_name(kind: FieldKind) -> &'static str {
    match kind {
        FieldKind::String => "a string",
        FieldKind::StringList => "an array of strings",
        FieldKind::Integer => "an integer",
        FieldKind::Number => "a number",
        FieldKind::Boolean => "a boolean",
        FieldKind::Object => "an object",
        FieldKind::Events => "an array of events",
    }
}

/// `null` counts as "not given": clients that serialise every optional argument send it.
fn present<'a>(body: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    body.get(name).filter(|v| !v.is_null())
}

fn string_field(body: &Map<String, Value>, name: &str) -> String {
    present(body, name).and_then(Value::as_str).unwrap_or("").to_string()
}

/// 400 `invalid_model_version`, suggesting the accepted ids closest to `model`.
fn unknown_model(model: &str, catalogue: &Catalogue) -> ApiError {
    let error = ApiError::bad_request(
        "invalid_model_version",
        format!(
            "Unknown model '{model}': it is not among the {} models this organization can use.",
            catalogue.entries().len()
        ),
    );
    let closest: Vec<String> = catalogue.closest(model, SUGGESTIONS).iter().map(|id| format!("'{id}'")).collect();
    error.with_suggestion(match closest.len() {
        0 => "This organization has no models; the emulator's models= option or new_api_key(models=...) gives it some.".to_string(),
        _ => format!("Did you mean {}? GET /models lists every model this organization can use.", closest.join(", ")),
    })
}

/// Checks a body against the spec and the caller's organization's models.
///
/// The numeric events' contents are read by hand first ([`cut_numeric_contents`]): as a
/// `serde_json::Value` tree, 8,192 numbers cost the emulator about a third of its CPU per
/// encoder query, which in the benchmarks was the server's share that every client waited on.
/// The rest of the body is checked as before, from the text with those contents cut out; if
/// that finds anything wrong, the whole body is read again the plain way, which gives the
/// error.
pub(crate) fn parse(raw: &[u8], catalogue: &Catalogue) -> Result<QueryInput, ApiError> {
    if let Some((numeric, rest)) = cut_numeric_contents(raw) {
        if let Ok(input) = parse_body(&rest, catalogue, numeric) {
            return Ok(input);
        }
    }
    parse_body(raw, catalogue, Vec::new())
}

/// [`parse`] without reading the numeric contents ahead, for the fuzz target that compares the
/// two.
#[cfg(test)]
pub(crate) fn parse_plain(raw: &[u8], catalogue: &Catalogue) -> Result<QueryInput, ApiError> {
    parse_body(raw, catalogue, Vec::new())
}

/// A numeric event's contents: channels of points.
type Channels = Vec<Vec<f64>>;

/// Per event, by index, its numeric contents when they were read ahead.
type ReadAhead = Vec<Option<Channels>>;

/// The contents of every event whose `event_data.contents` is a nested numeric matrix
/// (`Some` at the event's index), and the body with `[]` in their places. `None` when there is
/// none, or the events are not laid out as expected: the caller then reads the body plainly.
fn cut_numeric_contents(raw: &[u8]) -> Option<(ReadAhead, Vec<u8>)> {
    let events = member_value(raw, skip_ws(raw, 0), b"events")?;
    if raw.get(events) != Some(&b'[') {
        return None;
    }
    let mut found = Vec::new();
    let mut spans = Vec::new();
    let mut at = skip_ws(raw, events + 1);
    loop {
        at = match numeric_contents(raw, at) {
            Some((channels, span, end)) => {
                found.push(Some(channels));
                spans.push(span);
                end
            }
            None => {
                found.push(None);
                value_end(raw, at)?
            }
        };
        at = skip_ws(raw, at);
        match *raw.get(at)? {
            b',' => at = skip_ws(raw, at + 1),
            b']' => break,
            _ => return None,
        }
    }
    // A second `events` member would be the one serde keeps.
    object_rest(raw, at + 1, b"events")?;
    (!spans.is_empty()).then(|| (found, with_placeholders(raw, &spans)))
}

/// With `at` on an event object whose `event_data.contents` is a nested numeric matrix: the
/// channels, the matrix's span, and the position past the event.
fn numeric_contents(raw: &[u8], at: usize) -> Option<(Channels, (usize, usize), usize)> {
    let data = member_value(raw, at, b"event_data")?;
    let contents = member_value(raw, data, b"contents")?;
    if raw.get(contents) != Some(&b'[') {
        return None;
    }
    // Room for numbers of 8 bytes or more: no regrowth for float64 text, and capacity that is
    // never written costs no memory.
    let (m, end) = parse_matrix::<f64>(raw, contents, (raw.len() - contents) / 8)?;
    if !m.nested {
        return None;
    }
    let data_end = object_rest(raw, end, b"contents")?;
    let event_end = object_rest(raw, data_end, b"event_data")?;
    let channels = m.data.chunks(m.cols).map(<[f64]>::to_vec).collect();
    Some((channels, (contents, end), event_end))
}

/// [`parse`] over `raw`, with `numeric[i]` the contents already read of event `i` (whose text
/// in `raw` is then `[]`).
fn parse_body(raw: &[u8], catalogue: &Catalogue, mut numeric: ReadAhead) -> Result<QueryInput, ApiError> {
    let value: Value = serde_json::from_slice(raw)
        .map_err(|e| ApiError::invalid_request(format!("The request body is not valid JSON: {e}")))?;
    let Value::Object(body) = value else {
        return Err(ApiError::invalid_request("The request body must be a JSON object."));
    };
    let model = present(&body, "model").and_then(Value::as_str).ok_or_else(|| {
        ApiError::invalid_request("Field 'model' is required and must be a string.")
    })?;
    let query = present(&body, "query").and_then(Value::as_str).ok_or_else(|| {
        ApiError::invalid_request("Field 'query' is required and must be a string (it may be empty).")
    })?;
    let family = catalogue.family_of(model).ok_or_else(|| unknown_model(model, catalogue))?;
    for (name, kind) in QUERY_FIELDS {
        if let Some(v) = present(&body, name) {
            if !kind_matches(*kind, v) {
                return Err(wrong_type(name, kind_name(*kind)));
            }
        }
    }
    // Older callers send `sanitize`; the spec's name wins when both are given.
    let sanitize_response = match (present(&body, "sanitize_response"), present(&body, "sanitize")) {
        (Some(v), _) => v.as_bool().unwrap_or(true),
        (None, Some(v)) => v.as_bool().ok_or_else(|| wrong_type("sanitize", "a boolean"))?,
        (None, None) => true,
    };

    let events = match present(&body, "events").and_then(Value::as_array) {
        Some(list) => list
            .iter()
            .enumerate()
            .map(|(i, e)| parse_event(i, e, numeric.get_mut(i).and_then(Option::take)))
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    if numeric.iter().any(Option::is_some) {
        return Err(ApiError::internal("numeric contents read ahead were not where the events are"));
    }
    let file_ids: Vec<String> = present(&body, "file_ids")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    for id in &file_ids {
        let ext = id.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
        if !ext.is_some_and(|e| QUERY_FILE_EXTENSIONS.contains(&e.as_str())) {
            return Err(ApiError::bad_request(
                "unsupported_file_type",
                format!(
                    "'{id}' has no supported extension ({}). file_ids take the file name (file_id) given at upload, not the fil_ uid (file_uid).",
                    QUERY_FILE_EXTENSIONS.join(", ")
                ),
            ));
        }
    }

    // Limits of the knobs themselves; the spec gives only defaults, so out-of-range values
    // are rejected plainly rather than guessed at.
    let max_new_tokens = match present(&body, "max_new_tokens").and_then(Value::as_i64) {
        Some(n) if n >= 1 => n as usize,
        Some(_) => return Err(ApiError::invalid_request("max_new_tokens must be at least 1.")),
        None => match present(&body, "max_new_tokens") {
            Some(_) => usize::MAX, // a u64 beyond i64: effectively unlimited
            None => DEFAULT_MAX_NEW_TOKENS,
        },
    };
    let max_query_size_mb = match present(&body, "max_query_size_mb").and_then(Value::as_f64) {
        Some(mb) if mb > 0.0 => Some(mb),
        Some(_) => return Err(ApiError::invalid_request("max_query_size_mb must be greater than 0.")),
        None => None,
    };
    let max_wait = match present(&body, "max_wait_time_sec").and_then(Value::as_f64) {
        Some(s) if s >= 0.0 => Duration::try_from_secs_f64(s).ok(),
        Some(_) => return Err(ApiError::invalid_request("max_wait_time_sec must not be negative.")),
        None => None,
    };
    let input = QueryInput {
        model: model.to_string(),
        family,
        query: query.to_string(),
        system_prompt: string_field(&body, "system_prompt"),
        instruction_prompt: string_field(&body, "instruction_prompt"),
        response_start_prompt: string_field(&body, "response_start_prompt"),
        file_ids,
        events,
        max_new_tokens,
        normalize_input: present(&body, "normalize_input").and_then(Value::as_bool).unwrap_or(false),
        max_query_size_mb,
        max_wait,
        sanitize_response,
        render: present(&body, "render").and_then(Value::as_bool).unwrap_or(false),
        multi_image: present(&body, "multi_image").and_then(Value::as_bool).unwrap_or(false),
        query_metadata: present(&body, "query_metadata").cloned(),
    };
    if family == Family::Encoder && input.numeric_events().is_empty() {
        return Err(ApiError::invalid_request(format!(
            "'{model}' is an encoder model: it needs at least one data.numeric_array event (embed() sends one). \
             Text queries go to a reasoning model ({}).",
            Family::Reasoner.id_examples()
        )));
    }
    Ok(input)
}

/// What the video path reads from `query_metadata` (wire notes).
const FRAME_METADATA: [&str; 3] = ["raw_fps", "frames_indices", "total_num_frames"];

/// Several images without `multi_image` are the frames of one video, which the live service
/// cannot process without the frame timing in `query_metadata`: it answers 400 `query_failed`
/// (wire notes: "Several images as frames of one video (`multi_image: false`)"; the spec's
/// `multi_image` covers "several file ids or image events"). So the images are counted wherever
/// they are: image file ids, image events, and the images of an array event. The emulator answers
/// as the service does, so code that forgets the metadata fails here rather than only live.
pub(crate) fn check_frames(input: &QueryInput) -> Result<(), ApiError> {
    if input.multi_image {
        return Ok(());
    }
    let mut places: Vec<String> = Vec::new();
    let mut frames = 0;
    for (i, id) in input.file_ids.iter().enumerate() {
        let ext = id.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
        if IMAGE_EXTENSIONS.contains(&ext.as_str()) {
            frames += 1;
            places.push(format!("file_ids[{i}]"));
        }
    }
    for (i, event) in input.events.iter().enumerate() {
        let count = match event {
            InputEvent::Image(_) => 1,
            InputEvent::Images(images) => images.len(),
            _ => 0,
        };
        if count > 0 {
            frames += count;
            places.push(format!("events[{i}]"));
        }
    }
    if frames < 2 {
        return Ok(());
    }
    let metadata = input.query_metadata.as_ref().and_then(Value::as_object);
    let missing: Vec<&str> = FRAME_METADATA.iter().copied().filter(|k| metadata.is_none_or(|m| !m.contains_key(*k))).collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(ApiError::bad_request(
        "query_failed",
        format!(
            "The query holds {frames} images ({}), read as the frames of one video because multi_image is false, \
             and query_metadata lacks {} for them.",
            places.join(", "),
            missing.join(", ")
        ),
    )
    .with_suggestion(
        "Send query_metadata {\"raw_fps\": ..., \"frames_indices\": [...], \"total_num_frames\": ...} with the frames, \
         or multi_image: true to send them as separate images.",
    ))
}

/// The file extensions the query reads as images.
const IMAGE_EXTENSIONS: [&str; 3] = ["png", "jpg", "jpeg"];

/// `read_ahead`: the event's numeric contents, already read (its `contents` is then `[]`).
fn parse_event(i: usize, event: &Value, read_ahead: Option<Vec<Vec<f64>>>) -> Result<InputEvent, ApiError> {
    let at = format!("events[{i}]");
    let obj = event.as_object().ok_or_else(|| wrong_type(&at, "an object {type, event_data}"))?;
    let kind = obj
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| wrong_type(&format!("{at}.type"), "a string"))?;
    if !EVENT_TYPES.contains(&kind) {
        return Err(ApiError::invalid_request(format!(
            "{at}.type '{kind}' is not an event type; expected one of {}.",
            EVENT_TYPES.join(", ")
        )));
    }
    let data = obj
        .get("event_data")
        .and_then(Value::as_object)
        .ok_or_else(|| wrong_type(&format!("{at}.event_data"), "an object"))?;
    let contents_at = format!("{at}.event_data.contents");
    let contents = data.get("contents").unwrap_or(&Value::Null);
    if let Some(channels) = read_ahead {
        let placeholder = contents.as_array().is_some_and(Vec::is_empty);
        return match (kind, placeholder) {
            ("data.numeric_array", true) => Ok(InputEvent::Numeric(channels)),
            // Another event type with numbers in it: the plain read gives its error.
            _ => Err(wrong_type(&contents_at, "not a numeric matrix")),
        };
    }
    match kind {
        "data.text" => contents
            .as_str()
            .map(|s| InputEvent::Text(s.to_string()))
            .ok_or_else(|| wrong_type(&contents_at, "a string")),
        "data.json" => {
            let text = contents
                .as_str()
                .ok_or_else(|| wrong_type(&contents_at, "a serialized JSON string (not a parsed object)"))?;
            if serde_json::from_str::<Value>(text).is_err() {
                return Err(ApiError::invalid_request(format!("{contents_at} is not valid JSON text.")));
            }
            Ok(InputEvent::Json(text.to_string()))
        }
        "data.base64_img" => {
            let text = contents.as_str().ok_or_else(|| wrong_type(&contents_at, "a base64 string"))?;
            let mime = match data.get("mime_type") {
                None | Some(Value::Null) => None,
                Some(Value::String(m)) => Some(m.clone()),
                Some(_) => return Err(wrong_type(&format!("{at}.event_data.mime_type"), "a string")),
            };
            let bytes = decode_image(text, &contents_at)?;
            Ok(InputEvent::Image(image_info(&bytes, mime)))
        }
        "data.base64_img_array" => {
            let list = contents
                .as_array()
                .filter(|a| a.iter().all(Value::is_string))
                .ok_or_else(|| wrong_type(&contents_at, "an array of base64 strings"))?;
            let mut images = Vec::with_capacity(list.len());
            for (j, item) in list.iter().enumerate() {
                let text = item.as_str().unwrap_or("");
                let bytes = decode_image(text, &format!("{contents_at}[{j}]"))?;
                images.push(image_info(&bytes, None));
            }
            Ok(InputEvent::Images(images))
        }
        _ => parse_numeric(contents, &contents_at).map(InputEvent::Numeric),
    }
}

/// Accepts plain base64 and `data:<mime>;base64,` URLs.
fn decode_image(text: &str, at: &str) -> Result<Vec<u8>, ApiError> {
    let payload = match text.strip_prefix("data:") {
        Some(rest) => rest.split_once(',').map(|(_, p)| p).unwrap_or(rest),
        None => text,
    };
    let compact: String = payload.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    LENIENT_BASE64
        .decode(compact.as_bytes())
        .map_err(|_| ApiError::invalid_request(format!("{at} is not valid base64.")))
}

fn parse_numeric(contents: &Value, at: &str) -> Result<Vec<Vec<f64>>, ApiError> {
    let expected = "a non-empty array of channels, each a non-empty array of numbers of the same length";
    let channels = contents.as_array().filter(|a| !a.is_empty()).ok_or_else(|| wrong_type(at, expected))?;
    let mut out = Vec::with_capacity(channels.len());
    for channel in channels {
        let points = channel.as_array().filter(|a| !a.is_empty()).ok_or_else(|| wrong_type(at, expected))?;
        let values: Option<Vec<f64>> = points.iter().map(Value::as_f64).collect();
        let values = values.ok_or_else(|| wrong_type(at, expected))?;
        if out.first().is_some_and(|first: &Vec<f64>| first.len() != values.len()) {
            return Err(ApiError::bad_request(
                "invalid_parameter_type",
                format!("{at} is ragged: every channel must have the same number of points."),
            ));
        }
        out.push(values);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const R: &str = "Reasoner::c2_4_7b_251215a172f6d7";
    const E: &str = "Encoder::encoder_embeddings_01";

    fn parse(raw: &[u8]) -> Result<QueryInput, ApiError> {
        super::parse(raw, &Catalogue::default())
    }

    #[test]
    fn numeric_contents_read_ahead_give_what_the_plain_read_gives() {
        let img = "iVBORw0KGgo=";
        let bodies = [
            format!(r#"{{"model":"{E}","query":"","events":[{{"type":"data.numeric_array","event_data":{{"contents":[[1,2.5],[-3e-2,4]]}}}}]}}"#),
            // Member order, whitespace, several events of several kinds, a later normalize_input.
            format!(
                r#" {{ "events" : [ {{ "event_data" : {{ "contents" : [ [ 0.25 ] ] , "x" : "]}}" }} , "type" : "data.numeric_array" }} ,
                   {{"type":"data.text","event_data":{{"contents":"[[9]]"}}}},
                   {{"type":"data.numeric_array","event_data":{{"contents":[[5,6,7]]}}}} ] , "model":"{E}", "query":"", "normalize_input": true }} "#
            ),
            // Numbers in an event that is not numeric: the plain read refuses it.
            format!(r#"{{"model":"{R}","query":"x","events":[{{"type":"data.base64_img_array","event_data":{{"contents":[[1]]}}}}]}}"#),
            format!(r#"{{"model":"{R}","query":"x","events":[{{"type":"data.base64_img","event_data":{{"contents":"{img}"}}}}]}}"#),
            // Two `events` members, two `contents`: serde keeps the last one.
            format!(r#"{{"model":"{E}","query":"","events":[{{"type":"data.numeric_array","event_data":{{"contents":[[1]]}}}}],"events":[{{"type":"data.numeric_array","event_data":{{"contents":[[2]]}}}}]}}"#),
            format!(r#"{{"model":"{E}","query":"","events":[{{"type":"data.numeric_array","event_data":{{"contents":[[1]],"contents":[[3]]}}}}]}}"#),
            // Ragged, flat, empty, and not JSON after the matrix.
            format!(r#"{{"model":"{E}","query":"","events":[{{"type":"data.numeric_array","event_data":{{"contents":[[1,2],[3]]}}}}]}}"#),
            format!(r#"{{"model":"{E}","query":"","events":[{{"type":"data.numeric_array","event_data":{{"contents":[1,2]}}}}]}}"#),
            format!(r#"{{"model":"{E}","query":"","events":[{{"type":"data.numeric_array","event_data":{{"contents":[[1]]}}}}],}}"#),
            format!(r#"{{"model":"{E}","query":"","events":null}}"#),
            r#"{"model":"Nope::x","query":"","events":[{"type":"data.numeric_array","event_data":{"contents":[[1]]}}]}"#.to_string(),
        ];
        for body in &bodies {
            let fast = parse(body.as_bytes());
            let plain = parse_body(body.as_bytes(), &Catalogue::default(), Vec::new());
            match (&fast, &plain) {
                (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{body}"),
                (Err(a), Err(b)) => assert_eq!((&a.code, &a.message), (&b.code, &b.message), "{body}"),
                _ => panic!("{body}: {fast:?} against {plain:?}"),
            }
        }
        assert!(cut_numeric_contents(bodies[0].as_bytes()).is_some(), "the usual body is read ahead");
        let input = parse(bodies[1].as_bytes()).unwrap();
        assert_eq!(input.numeric_events(), vec![&vec![vec![0.25]], &vec![vec![5.0, 6.0, 7.0]]]);
        assert!(input.normalize_input);
        assert_eq!(parse(bodies[4].as_bytes()).unwrap().numeric_events(), vec![&vec![vec![2.0]]]);
        assert_eq!(parse(bodies[5].as_bytes()).unwrap().numeric_events(), vec![&vec![vec![3.0]]]);
    }

    fn code(v: Value) -> String {
        parse(v.to_string().as_bytes()).unwrap_err().code
    }

    #[test]
    fn shape_and_required_fields() {
        assert_eq!(parse(b"not json").unwrap_err().code, "invalid_request");
        assert_eq!(code(json!([1, 2])), "invalid_request");
        assert_eq!(code(json!({"query": "hi"})), "invalid_request");
        assert_eq!(code(json!({"model": R})), "invalid_request");
        assert_eq!(code(json!({"model": 3, "query": "x"})), "invalid_request");
        assert_eq!(code(json!({"model": "Reasoner::nope", "query": "x"})), "invalid_model_version");
    }

    #[test]
    fn field_types_name_the_field() {
        let e = parse(json!({"model": R, "query": "x", "max_new_tokens": "5"}).to_string().as_bytes()).unwrap_err();
        assert_eq!(e.code, "invalid_parameter_type");
        assert!(e.message.contains("max_new_tokens"));
        assert_eq!(code(json!({"model": R, "query": "x", "file_ids": ["a.txt", 3]})), "invalid_parameter_type");
        assert_eq!(code(json!({"model": R, "query": "x", "temperature": true})), "invalid_parameter_type");
        assert!(parse(json!({"model": R, "query": "x", "unknown": {"a": 1}, "temperature": null}).to_string().as_bytes()).is_ok());
    }

    #[test]
    fn events() {
        let ev = |e: Value| code(json!({"model": R, "query": "x", "events": [e]}));
        assert_eq!(ev(json!({"type": "data.json", "event_data": {"contents": {"a": 1}}})), "invalid_parameter_type");
        assert_eq!(ev(json!({"type": "data.video", "event_data": {}})), "invalid_request");
        assert_eq!(ev(json!("data.text")), "invalid_parameter_type");
        assert_eq!(ev(json!({"type": "data.numeric_array", "event_data": {"contents": [[1, 2], [3]]}})), "invalid_parameter_type");
        assert_eq!(ev(json!({"type": "data.numeric_array", "event_data": {"contents": [[1, "a"]]}})), "invalid_parameter_type");
        let ok = parse(json!({"model": R, "query": "x", "events": [
            {"type": "data.text", "event_data": {"contents": "hello"}},
            {"type": "data.json", "event_data": {"contents": "{\"a\": 1}"}},
        ]}).to_string().as_bytes()).unwrap();
        assert_eq!(ok.prompt_bytes(), 1 + 5);
    }

    #[test]
    fn frames_of_one_video_need_their_timing_in_query_metadata() {
        let img = "iVBORw0KGgo=";
        let check = |extra: Value| {
            let mut body = json!({"model": R, "query": "x", "events": [
                {"type": "data.text", "event_data": {"contents": "t"}},
                {"type": "data.base64_img_array", "event_data": {"contents": [img, img]}},
            ]});
            body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            check_frames(&parse(body.to_string().as_bytes()).unwrap())
        };
        let timing = json!({"raw_fps": 1.0, "frames_indices": [0, 1], "total_num_frames": 2});
        let e = check(json!({})).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code.as_str()), (400, "query_failed"));
        assert!(e.message.contains("holds 2 images (events[1])") && e.message.contains("raw_fps, frames_indices, total_num_frames"), "{}", e.message);
        let e = check(json!({"multi_image": false, "query_metadata": {"raw_fps": 1.0}})).unwrap_err();
        assert!(e.message.ends_with("lacks frames_indices, total_num_frames for them."), "{}", e.message);
        assert!(check(json!({"query_metadata": timing})).is_ok());
        assert!(check(json!({"multi_image": true})).is_ok());
        let one = json!({"model": R, "query": "x", "events": [{"type": "data.base64_img_array", "event_data": {"contents": [img]}}]});
        assert!(check_frames(&parse(one.to_string().as_bytes()).unwrap()).is_ok(), "one image is not a video");
        // Images apart are frames too: two image events, or two image files, or one of each.
        let image = json!({"type": "data.base64_img", "event_data": {"contents": img}});
        for body in [
            json!({"model": R, "query": "x", "events": [image, image]}),
            json!({"model": R, "query": "x", "file_ids": ["a.png", "b.JPG"]}),
            json!({"model": R, "query": "x", "file_ids": ["a.png", "notes.txt"], "events": [image]}),
        ] {
            let e = check_frames(&parse(body.to_string().as_bytes()).unwrap()).unwrap_err();
            assert_eq!(e.code, "query_failed", "{body}");
        }
        let one_each = json!({"model": R, "query": "x", "file_ids": ["a.png", "notes.txt"]});
        assert!(check_frames(&parse(one_each.to_string().as_bytes()).unwrap()).is_ok(), "one image and a text file");
    }

    #[test]
    fn file_ids_need_a_supported_extension() {
        let e = parse(json!({"model": R, "query": "x", "file_ids": ["fil_123"]}).to_string().as_bytes()).unwrap_err();
        assert_eq!(e.code, "unsupported_file_type");
        assert!(e.message.contains("file name"));
        assert!(parse(json!({"model": R, "query": "x", "file_ids": ["A.JPEG"]}).to_string().as_bytes()).is_ok());
    }

    #[test]
    fn encoder_needs_numeric_events() {
        assert_eq!(code(json!({"model": E, "query": ""})), "invalid_request");
        let ok = parse(json!({"model": E, "query": "", "events": [
            {"type": "data.numeric_array", "event_data": {"contents": [[1, 2.5, 3]]}}
        ]}).to_string().as_bytes()).unwrap();
        assert_eq!(ok.numeric_events().len(), 1);
    }

    #[test]
    fn live_ids_are_accepted_with_their_family() {
        let q = |model: &str, events: Value| parse(json!({"model": model, "query": "", "events": events}).to_string().as_bytes());
        let numeric = json!([{"type": "data.numeric_array", "event_data": {"contents": [[1, 2]]}}]);
        assert_eq!(q("Newton::c2_6_8b_fp8_260424d7a55d5e", json!([])).unwrap().family, Family::Reasoner);
        assert_eq!(q("OmegaEncoder::omega_embeddings_1_4", numeric).unwrap().family, Family::Encoder);
        let e = q("OmegaEncoder::omega_embeddings_1_4", json!([])).unwrap_err();
        assert!(e.message.contains("'OmegaEncoder::omega_embeddings_1_4' is an encoder model"), "{}", e.message);
    }

    #[test]
    fn unknown_model_suggests_the_closest_accepted_ids() {
        let e = parse(json!({"model": "Newton::c2_5_8b_260413b723a9ac", "query": "x"}).to_string().as_bytes()).unwrap_err();
        assert_eq!(e.code, "invalid_model_version");
        let s = e.suggestion.unwrap_or_default();
        assert!(s.starts_with("Did you mean 'Newton::c2_5_8b_260413b723a9ab', 'Reasoner::c2_5_8b_260413b723a9ab'"), "{s}");

        let own = Catalogue::new(vec![crate::emulator::catalogue::ModelEntry::new("Acme::ft-1", Some("reasoner")).unwrap()]).unwrap();
        let body = |model: &str| json!({"model": model, "query": "x"}).to_string();
        assert_eq!(super::parse(body("Acme::ft-1").as_bytes(), &own).unwrap().family, Family::Reasoner);
        let e = super::parse(body(R).as_bytes(), &own).unwrap_err();
        assert_eq!(e.code, "invalid_model_version");
        assert!(e.suggestion.unwrap_or_default().contains("'Acme::ft-1'"));
        let none = Catalogue::new(Vec::new()).unwrap();
        assert!(super::parse(body(R).as_bytes(), &none).unwrap_err().suggestion.unwrap_or_default().contains("no models"));
    }
}
