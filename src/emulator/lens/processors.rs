//! The stand-in processors a lens pipeline is made of. Each maps one input event
//! (`{type, event_data}`) to output events, deterministically and never failing on content: any
//! bytes give an output derived from them (CHOICES, "Stand-in models never fail on content").

use base64::Engine;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::emulator::agents::outputs::read_csv;
use crate::emulator::query::encoder::{embed_window, fit_window, zscore_event};

pub(crate) const NOOP: &str = "lens_noop_processor";
pub(crate) const SSE_WRITER: &str = "server_sent_events_writer";
pub(crate) const CAMERA: &str = "lens_camera_processor";
pub(crate) const TIMESERIES: &str = "lens_timeseries_state_processor";
pub(crate) const VIDEO: &str = "lens_video_processor";
pub(crate) const KNOWN: &[&str] = &[NOOP, SSE_WRITER, CAMERA, TIMESERIES, VIDEO];

pub(crate) type Event = (String, Value);

/// `lens_noop_processor`: one `inference.result` whose `event_data` is the input's (CHOICES).
pub(crate) fn noop(input: &Value) -> Event {
    ("inference.result".into(), input.get("event_data").cloned().unwrap_or(Value::Null))
}

/// The bytes an event carries: a base64 image or frame where it has one (`data`, `contents`,
/// `base64_img`, at the top or in `event_data`), else its JSON text.
fn payload_bytes(input: &Value) -> Vec<u8> {
    let places = [input.get("event_data"), Some(input)];
    for place in places.into_iter().flatten() {
        for key in ["base64_img", "contents", "data"] {
            if let Some(text) = place.get(key).and_then(Value::as_str) {
                return base64::engine::general_purpose::STANDARD
                    .decode(text.trim())
                    .unwrap_or_else(|_| text.as_bytes().to_vec());
            }
        }
    }
    input.to_string().into_bytes()
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const SCENES: &[&str] = &["an empty room", "a person walking", "a machine running", "a parked vehicle", "an open door"];
const LIGHT: &[&str] = &["in daylight", "under artificial light", "in low light"];

/// `lens_camera_processor`: a caption picked by the image bytes' digest.
pub(crate) fn camera(input: &Value) -> Event {
    let bytes = payload_bytes(input);
    let d = digest(&bytes);
    let caption = format!("The frame shows {} {}.", SCENES[d[0] as usize % SCENES.len()], LIGHT[d[1] as usize % LIGHT.len()]);
    ("inference.result".into(), json!({ "result": caption, "processor": CAMERA, "num_bytes": bytes.len(), "digest": hex(&d[..8]) }))
}

/// The video processor stand-in: a `frame.processed` per input frame (its index when the
/// event gives one), with a motion score from the frame's digest.
pub(crate) fn video(input: &Value) -> Event {
    let d = match input.pointer("/event_data/digest").and_then(Value::as_str) {
        Some(given) => digest(given.as_bytes()),
        None => digest(&payload_bytes(input)),
    };
    let frame_index = input.pointer("/event_data/frame_index").and_then(Value::as_u64).unwrap_or(0);
    let motion = f64::from(u16::from_be_bytes([d[0], d[1]])) / f64::from(u16::MAX);
    ("frame.processed".into(), json!({ "frame_index": frame_index, "processor": VIDEO, "result": { "motion_score": motion, "digest": hex(&d[..8]) } }))
}

/// One embedding for a multi-channel window: the stand-in encoder's per-channel embeddings side
/// by side, after one z-score over the window (so amplitude and offset do not decide the class).
fn embed(channels: &[Vec<f64>]) -> Vec<f32> {
    zscore_event(channels).iter().flat_map(|c| embed_window(&fit_window(c).0)).collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
    let na = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

/// Rows (time, columns) to channels (columns, time).
pub(crate) fn channels_of(rows: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    (0..width).map(|c| rows.iter().map(|r| r.get(c).copied().unwrap_or(0.0)).collect()).collect()
}

/// The numeric window of an event: `contents`, `data`, `values` or `window` in its `event_data`,
/// channel-first (a list of channels) or one flat channel. Anything else: its bytes as numbers.
pub(crate) fn numeric_window(input: &Value) -> Vec<Vec<f64>> {
    let numbers = |v: &Value| -> Option<Vec<f64>> { v.as_array()?.iter().map(Value::as_f64).collect() };
    let data = input.get("event_data").unwrap_or(input);
    for key in ["contents", "data", "values", "window"] {
        let Some(v) = data.get(key) else { continue };
        if let Some(flat) = numbers(v) {
            return vec![flat];
        }
        if let Some(channels) = v.as_array().and_then(|a| a.iter().map(numbers).collect::<Option<Vec<_>>>()) {
            if !channels.is_empty() {
                return channels;
            }
        }
    }
    vec![input.to_string().bytes().map(f64::from).collect()]
}

/// `lens_timeseries_state_processor`: n-shot classification of each window against labelled
/// example windows cut from the CSVs in its config, by cosine nearest neighbours over the
/// stand-in encoder's embeddings.
pub(crate) struct NShot {
    examples: Vec<(String, Vec<f32>)>,
    n_neighbors: usize,
}

const DEFAULT_WINDOW: usize = 16;

impl NShot {
    /// `config`: `n_shot_files` as `{class: file_id | [file_id]}` or `[{file_id, class|label}]`,
    /// with `window_size` (16), `step_size` (the window) and `n_neighbors` (1). `read` gives a
    /// file's bytes by name. Errors are plain sentences for the 400 `{errors: [string]}`.
    pub fn from_config(config: &Value, read: &dyn Fn(&str) -> Option<Vec<u8>>) -> Result<NShot, String> {
        let size = |k: &str, default: usize| {
            config.get(k).and_then(Value::as_u64).filter(|n| *n > 0).map_or(default, |n| usize::try_from(n).unwrap_or(usize::MAX))
        };
        let window = size("window_size", DEFAULT_WINDOW);
        let step = size("step_size", window);
        let n_neighbors = size("n_neighbors", 1);
        let mut files: Vec<(String, String)> = Vec::new();
        match config.get("n_shot_files") {
            Some(Value::Object(map)) => {
                for (class, v) in map {
                    match v {
                        Value::String(f) => files.push((class.clone(), f.clone())),
                        Value::Array(list) => {
                            for f in list {
                                let f = f.as_str().ok_or_else(|| format!("n_shot_files of class '{class}' must be file ids."))?;
                                files.push((class.clone(), f.to_string()));
                            }
                        }
                        _ => return Err(format!("n_shot_files of class '{class}' must be a file id or a list of them.")),
                    }
                }
            }
            Some(Value::Array(list)) => {
                for entry in list {
                    let file = entry.get("file_id").and_then(Value::as_str);
                    let class = entry.get("class").or_else(|| entry.get("label")).and_then(Value::as_str);
                    match (file, class) {
                        (Some(f), Some(c)) => files.push((c.to_string(), f.to_string())),
                        _ => return Err("each n_shot_files entry needs a file_id and a class.".into()),
                    }
                }
            }
            _ => return Err(format!("{TIMESERIES} needs n_shot_files in its processor_config.")),
        }
        if files.is_empty() {
            return Err(format!("{TIMESERIES} needs at least one n-shot file."));
        }
        let mut examples = Vec::new();
        for (class, file) in files {
            let bytes = read(&file).ok_or_else(|| format!("n-shot file '{file}' was not found in this organization."))?;
            let rows = read_csv(&bytes).values;
            let mut start: usize = 0;
            loop {
                // Saturating, and a step past the end stops: sizes are the caller's numbers.
                let end = start.saturating_add(window).min(rows.len());
                examples.push((class.clone(), embed(&channels_of(&rows[start..end]))));
                start = start.saturating_add(step);
                if end >= rows.len() || start >= rows.len() {
                    break;
                }
            }
        }
        Ok(NShot { examples, n_neighbors })
    }

    pub fn classify(&self, input: &Value) -> Event {
        let query = embed(&numeric_window(input));
        let mut scored: Vec<(f64, &str)> = self.examples.iter().map(|(c, e)| (cosine(&query, e), c.as_str())).collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut votes: Vec<(&str, usize, f64)> = Vec::new();
        for (score, class) in scored.iter().take(self.n_neighbors) {
            match votes.iter_mut().find(|v| v.0 == *class) {
                Some(v) => v.1 += 1,
                None => votes.push((class, 1, *score)),
            }
        }
        // Most votes wins; ties go to the class with the nearest example (first seen).
        let best = votes.iter().max_by(|a, b| a.1.cmp(&b.1).then(b.2.total_cmp(&a.2).reverse())).map_or("", |v| v.0);
        let mut scores = serde_json::Map::new();
        for (score, class) in &scored {
            scores.entry(class.to_string()).or_insert(json!(score));
        }
        let window_index = input.pointer("/event_data/window_index").cloned().unwrap_or(Value::Null);
        ("inference.result".into(), json!({ "result": best, "scores": scores, "processor": TIMESERIES, "window_index": window_index }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv(f: impl Fn(usize) -> f64) -> Vec<u8> {
        let mut s = String::from("timestamp,a,b\n");
        for i in 0..64 {
            s += &format!("{i},{},{}\n", f(i), f(i) * 0.5);
        }
        s.into_bytes()
    }

    #[test]
    fn noop_passes_event_data_through() {
        let (kind, data) = noop(&json!({"type": "data.json", "event_data": {"x": [1, 2]}}));
        assert_eq!((kind.as_str(), data), ("inference.result", json!({"x": [1, 2]})));
    }

    #[test]
    fn camera_and_video_are_deterministic_in_their_bytes() {
        let a = json!({"type": "image", "data": "aGVsbG8="});
        let b = json!({"type": "image", "data": "d29ybGQ="});
        assert_eq!(camera(&a), camera(&a));
        assert_ne!(camera(&a).1["digest"], camera(&b).1["digest"]);
        assert_eq!(camera(&a).1["num_bytes"], 5, "base64 is decoded");
        let (kind, data) = video(&json!({"event_data": {"frame_index": 4, "digest": "abc"}}));
        assert_eq!((kind.as_str(), &data["frame_index"]), ("frame.processed", &json!(4)));
    }

    #[test]
    fn n_shot_picks_the_class_of_the_similar_example() {
        let files = |name: &str| match name {
            "slow.csv" => Some(csv(|i| (i as f64 * 0.2).sin())),
            "fast.csv" => Some(csv(|i| (i as f64 * 2.9).sin())),
            _ => None,
        };
        let config = json!({"n_shot_files": {"slow": "slow.csv", "fast": ["fast.csv"]}, "window_size": 16});
        let model = NShot::from_config(&config, &files).unwrap();
        let slow: Vec<f64> = (0..16).map(|i| (i as f64 * 0.2 + 0.1).sin() * 3.0).collect();
        let fast: Vec<f64> = (0..16).map(|i| (i as f64 * 2.9 + 0.1).sin()).collect();
        let out = model.classify(&json!({"event_data": {"contents": [slow.clone(), slow.iter().map(|v| v * 0.5).collect::<Vec<_>>()]}}));
        assert_eq!(out.1["result"], "slow", "{}", out.1);
        let out = model.classify(&json!({"event_data": {"contents": [fast.clone(), fast.iter().map(|v| v * 0.5).collect::<Vec<_>>()]}}));
        assert_eq!(out.1["result"], "fast", "{}", out.1);
        let list = json!({"n_shot_files": [{"file_id": "slow.csv", "class": "slow"}]});
        assert!(NShot::from_config(&list, &files).is_ok());
        let missing = json!({"n_shot_files": {"x": "nope.csv"}});
        assert!(NShot::from_config(&missing, &files).err().unwrap().contains("nope.csv"));
        assert!(NShot::from_config(&json!({}), &files).is_err());
    }

    #[test]
    fn n_shot_sizes_of_any_magnitude_give_examples() {
        let files = |_: &str| Some(csv(|i| i as f64));
        for (window, step) in [(u64::MAX, 1), (2, u64::MAX), (2, 1000), (u64::MAX, u64::MAX)] {
            let config = json!({"n_shot_files": {"a": "a.csv"}, "window_size": window, "step_size": step});
            let model = NShot::from_config(&config, &files).unwrap();
            assert!(!model.examples.is_empty(), "window {window}, step {step}");
        }
    }

    #[test]
    fn windows_from_any_shape() {
        assert_eq!(numeric_window(&json!({"event_data": {"contents": [1, 2]}})), vec![vec![1.0, 2.0]]);
        assert_eq!(numeric_window(&json!({"event_data": {"data": [[1], [2]]}})), vec![vec![1.0], vec![2.0]]);
        assert_eq!(numeric_window(&json!({"event_data": {"text": "A"}})).len(), 1, "bytes as numbers");
        assert_eq!(channels_of(&[vec![1.0, 2.0], vec![3.0, 4.0]]), vec![vec![1.0, 3.0], vec![2.0, 4.0]]);
    }
}
