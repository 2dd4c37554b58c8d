//! What goes into a session: events checked before they run (`check_input`), and the input
//! streams of `input_stream.set`, which read the organization's files in a task of their own
//! and feed the pipeline one window or frame at a time.

use std::sync::Arc;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::processors::channels_of;
use super::session::Session;
use crate::emulator::agents::outputs::{read_csv, Table};

/// Input event types the emulator's lenses take: the spec's example (`image`), the notes'
/// `data.*` family and the events the input streams produce.
const INPUT_TYPES: &[&str] = &["image", "video", "text", "sensor"];

/// Plain-sentence reasons, as the 200-style error body lists them.
pub(crate) fn check_input(event: &Value) -> Result<(), String> {
    let Some(kind) = event.get("type").and_then(Value::as_str) else {
        return Err("The event must be an object with a 'type'.".into());
    };
    if !INPUT_TYPES.contains(&kind) && !kind.starts_with("data.") {
        return Err(format!("Unknown event type '{kind}'."));
    }
    let empty = |v: Option<&Value>| match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    };
    if empty(event.get("event_data")) && empty(event.get("data")) {
        return Err("Empty payload: the event has no data.".into());
    }
    Ok(())
}

/// Rows per window of `csv_file_reader` unless `stream_config.window_size` says otherwise.
const CSV_WINDOW: usize = 16;
/// Bytes per frame of the `video_file_reader` stand-in, and the most frames it sends.
const FRAME_BYTES: usize = 64 * 1024;
const MAX_FRAMES: usize = 64;

fn stream_id() -> String {
    format!("lis-{}", uuid::Uuid::new_v4().simple())
}

/// `input_stream.set`: the stream's id, or the reasons it cannot be set. `read` gives an
/// organization file's bytes by name.
pub(crate) fn set_input_stream(
    session: &Arc<Session>,
    stream_type: &str,
    config: &Value,
    read: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Result<String, String> {
    let file_id = config.get("file_id").and_then(Value::as_str).unwrap_or("");
    let inputs: Vec<Value> = match stream_type {
        "csv_file_reader" | "video_file_reader" if file_id.is_empty() => {
            return Err(format!("{stream_type} needs stream_config.file_id."));
        }
        "csv_file_reader" => {
            let bytes = read(file_id).ok_or_else(|| format!("File '{file_id}' was not found in this organization."))?;
            let size = |key: &str| config.get(key).and_then(Value::as_u64).filter(|n| *n > 0);
            let table = read_csv(&bytes);
            // Sizes beyond the file just reach its end (2**64-1 rows once overflowed the reader
            // and killed the socket): a stand-in never fails on content (CHOICES), and a window
            // larger than the file is one short window, as before.
            let rows = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
            let window = size("window_size").map_or(CSV_WINDOW, rows);
            let step = size("step_size").map_or(window, rows);
            csv_windows(file_id, &table, window, step)
        }
        "video_file_reader" => {
            let bytes = read(file_id).ok_or_else(|| format!("File '{file_id}' was not found in this organization."))?;
            video_frames(file_id, &bytes)
        }
        "rtsp_video_streamer" => {
            let url = config.get("rtsp_url").and_then(Value::as_str).unwrap_or("");
            return Err(format!("Could not connect to the RTSP stream '{url}': the stream is unreachable."));
        }
        // The sensor pushes its own events with session.update.
        "sensor_streamer" => Vec::new(),
        other => return Err(format!("Unknown input stream type '{other}'.")),
    };
    let id = stream_id();
    session.state.lock().input_stream = Some(id.clone());
    let session = session.clone();
    tokio::spawn(async move {
        for (i, input) in inputs.iter().enumerate() {
            if !session.state.lock().status.is_active() {
                break;
            }
            session.feed(input);
            // Long files must not hold a runtime thread (two cores are shared by every test).
            if i % 256 == 255 {
                tokio::task::yield_now().await;
            }
        }
    });
    Ok(id)
}

/// `output_stream.set`: records the stream; outputs keep going to the lens's channel.
pub(crate) fn set_output_stream(session: &Session, stream_type: &str) -> Result<String, String> {
    if stream_type.is_empty() {
        return Err("output_stream.set needs a stream_type.".into());
    }
    let id = format!("los-{}", uuid::Uuid::new_v4().simple());
    session.state.lock().output_stream = Some(id.clone());
    Ok(id)
}

fn csv_windows(file_id: &str, table: &Table, window: usize, step: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let mut start: usize = 0;
    while start < table.values.len() {
        // Saturating: a step of up to 2**64-1 rows just ends the file.
        let end = start.saturating_add(window).min(table.values.len());
        out.push(json!({
            "type": "data.numeric_array",
            "event_data": {
                "file_id": file_id,
                "window_index": out.len(),
                "timestamps": [table.timestamps[start], table.timestamps[end - 1]],
                "contents": channels_of(&table.values[start..end]),
            },
        }));
        start = start.saturating_add(step);
    }
    out
}

fn video_frames(file_id: &str, bytes: &[u8]) -> Vec<Value> {
    let chunks: Vec<&[u8]> = if bytes.is_empty() { vec![bytes] } else { bytes.chunks(FRAME_BYTES).take(MAX_FRAMES).collect() };
    let count = chunks.len();
    chunks
        .iter()
        .enumerate()
        .map(|(i, chunk)| {
            let digest: String = Sha256::digest(chunk).iter().take(8).map(|b| format!("{b:02x}")).collect();
            json!({
                "type": "data.video_frame",
                "event_data": { "file_id": file_id, "frame_index": i, "num_frames": count, "num_bytes": chunk.len(), "digest": digest },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_checked() {
        assert!(check_input(&json!({"type": "data.json", "event_data": {"a": 1}})).is_ok());
        assert!(check_input(&json!({"type": "image", "data": "aGk="})).is_ok());
        assert!(check_input(&json!({"type": "teleport", "event_data": {"a": 1}})).unwrap_err().contains("teleport"));
        assert!(check_input(&json!({"type": "image", "data": ""})).unwrap_err().starts_with("Empty payload"));
        assert!(check_input(&json!("x")).is_err());
    }

    #[test]
    fn csv_windows_and_video_frames() {
        let w = csv_windows("f.csv", &read_csv(b"timestamp,a,b\n1,1,2\n2,3,4\n3,5,6\n"), 2, 2);
        assert_eq!(w.len(), 2);
        assert_eq!(w[0]["event_data"]["contents"], json!([[1.0, 3.0], [2.0, 4.0]]));
        assert_eq!(w[1]["event_data"]["timestamps"], json!(["3", "3"]));
        // Sizes near usize::MAX end the file instead of overflowing.
        let table = read_csv(b"timestamp,a\n1,1\n2,2\n3,3\n");
        assert_eq!(csv_windows("f.csv", &table, usize::MAX, 1).len(), 3);
        assert_eq!(csv_windows("f.csv", &table, 1, usize::MAX).len(), 1);
        let frames = video_frames("v.mp4", &vec![7u8; FRAME_BYTES + 1]);
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[1]["event_data"]["num_bytes"], 1);
        assert_eq!(video_frames("v.mp4", b"").len(), 1, "an empty file still gives a frame");
    }
}
