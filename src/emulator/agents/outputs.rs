//! What runs produce: deterministic result files computed from the inputs with the emulator's
//! stand-in encoder, never failing on content (any bytes give an output).
//!
//! `osm` labels each window of a CSV with a state (`finish_timestamp,start_timestamp,
//! predicted_state,invalid,p_<state>...`); `red` and `ad` score each window for events; `mga`
//! writes one-line JSON manual steps; `tva` a one-line JSON verification. Other blueprints follow
//! their input: windows for a CSV, a JSON summary otherwise.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::emulator::query::encoder::embed_window;

const DEFAULT_STATES: &[&str] = &["idle", "running", "loaded", "fault"];
const DEFAULT_WINDOW: usize = 16;

/// A CSV read as the stand-ins need it: a timestamp per row (the first column named like a time,
/// else the row number), the numeric values of every other column, and the labels of an
/// evaluation: the `state` (or `label`) column when there is one, or the column an example's
/// `ground_truth` names (`read_labelled_csv`).
pub(crate) struct Table {
    pub timestamps: Vec<String>,
    pub values: Vec<Vec<f64>>,
    pub labels: Option<Vec<String>>,
}

pub(crate) fn read_csv(bytes: &[u8]) -> Table {
    // Without a named label column nothing can be missing: never an error.
    read_labelled_csv(bytes, None).unwrap_or(Table { timestamps: vec![], values: vec![], labels: None })
}

/// `read_csv` with the labels in `label_column` (an evaluation example's `ground_truth` names
/// it; matched as the header is, without case) rather than in `state` or `label`. A column the
/// CSV does not have is an error naming it and the columns there are.
pub(crate) fn read_labelled_csv(bytes: &[u8], label_column: Option<&str>) -> Result<Table, String> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<String> = lines.next().unwrap_or("").split(',').map(|h| h.trim().to_ascii_lowercase()).collect();
    let label_col = match label_column {
        Some(name) => Some(header.iter().position(|h| *h == name.trim().to_ascii_lowercase()).ok_or_else(|| {
            format!("the CSV has no column {name:?} (ground_truth names it); its columns are {}", header.join(", "))
        })?),
        None => header.iter().position(|h| h == "state" || h == "label"),
    };
    let time_col = (0..header.len()).find(|&i| header[i].contains("time") && Some(i) != label_col);
    let mut table = Table { timestamps: vec![], values: vec![], labels: label_col.map(|_| vec![]) };
    for (row, line) in lines.enumerate() {
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        table.timestamps.push(time_col.and_then(|c| cells.get(c)).map_or_else(|| row.to_string(), |s| s.to_string()));
        let numbers = cells
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != time_col && Some(*i) != label_col)
            .map(|(_, c)| c.parse::<f64>().ok().filter(|v| v.is_finite()).unwrap_or(0.0))
            .collect();
        table.values.push(numbers);
        if let (Some(c), Some(labels)) = (label_col, table.labels.as_mut()) {
            labels.push(cells.get(c).unwrap_or(&"").to_string());
        }
    }
    Ok(table)
}

fn window_size(values: &Value) -> usize {
    values.get("window_size").and_then(Value::as_u64).filter(|n| *n > 0).map_or(DEFAULT_WINDOW, |n| n as usize)
}

pub(crate) fn states(values: &Value) -> Vec<String> {
    match values.get("states").and_then(Value::as_array) {
        Some(list) if !list.is_empty() => list.iter().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string)).collect(),
        _ => DEFAULT_STATES.iter().map(|s| s.to_string()).collect(),
    }
}

/// One window's prediction: its row range and a probability per state.
pub(crate) struct Window {
    pub first: usize,
    pub last: usize,
    pub probabilities: Vec<f64>,
}

impl Window {
    pub fn best(&self) -> usize {
        let mut best = 0;
        for (i, p) in self.probabilities.iter().enumerate() {
            if *p > self.probabilities[best] {
                best = i;
            }
        }
        best
    }
}

/// Each window of rows, encoded with the stand-in encoder (all channels side by side) and scored
/// against `classes` fixed directions of the embedding: similar windows get similar labels.
pub(crate) fn windows(table: &Table, values: &Value, classes: usize) -> Vec<Window> {
    let size = window_size(values);
    let classes = classes.max(1);
    let mut out = Vec::new();
    let mut first = 0;
    while first < table.values.len() {
        let last = (first + size).min(table.values.len()) - 1;
        let flat: Vec<f64> = table.values[first..=last].iter().flatten().copied().collect();
        let embedding = embed_window(if flat.is_empty() { &[0.0] } else { &flat });
        let scores: Vec<f64> = (0..classes)
            .map(|c| embedding.iter().skip(c).step_by(classes).map(|v| f64::from(*v)).sum::<f64>())
            .collect();
        let top = scores.iter().copied().fold(f64::MIN, f64::max);
        let exps: Vec<f64> = scores.iter().map(|s| ((s - top) * 4.0).exp()).collect();
        let total: f64 = exps.iter().sum();
        out.push(Window { first, last, probabilities: exps.iter().map(|e| e / total).collect() });
        first = last + 1;
    }
    out
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The result file of one input for blueprint `key`: its extension and content.
pub(crate) fn result_for(key: &str, agent_id: &str, values: &Value, input_name: &str, bytes: &[u8]) -> (&'static str, Vec<u8>) {
    let is_csv = input_name.to_ascii_lowercase().ends_with(".csv");
    match key {
        "osm" => ("csv", state_csv(&read_csv(bytes), values)),
        "red" | "ad" => ("csv", event_csv(&read_csv(bytes), values)),
        "mga" => ("json", manual_json(agent_id, values, bytes)),
        "tva" => ("json", verification_json(agent_id, values, input_name, bytes)),
        _ if is_csv => ("csv", state_csv(&read_csv(bytes), values)),
        _ => ("json", summary_json(agent_id, input_name, bytes)),
    }
}

fn state_csv(table: &Table, values: &Value) -> Vec<u8> {
    let names = states(values);
    let mut out = format!(
        "finish_timestamp,start_timestamp,predicted_state,invalid,{}\n",
        names.iter().map(|s| format!("p_{s}")).collect::<Vec<_>>().join(",")
    );
    for w in windows(table, values, names.len()) {
        let probabilities: Vec<String> = w.probabilities.iter().map(|p| format!("{p:.4}")).collect();
        out.push_str(&format!(
            "{},{},{},0,{}\n",
            table.timestamps[w.last],
            table.timestamps[w.first],
            names[w.best()],
            probabilities.join(",")
        ));
    }
    out.into_bytes()
}

fn event_csv(table: &Table, values: &Value) -> Vec<u8> {
    let threshold = values.get("threshold").and_then(Value::as_f64).unwrap_or(0.8);
    let mut out = String::from("finish_timestamp,start_timestamp,score,is_event\n");
    for w in windows(table, values, 2) {
        let score = w.probabilities[1];
        out.push_str(&format!("{},{},{score:.4},{}\n", table.timestamps[w.last], table.timestamps[w.first], u8::from(score >= threshold)));
    }
    out.into_bytes()
}

fn manual_json(agent_id: &str, values: &Value, bytes: &[u8]) -> Vec<u8> {
    let d = digest(bytes);
    let max_frames = values.get("max_frames").and_then(Value::as_u64).unwrap_or(32).max(3);
    let steps = 3 + usize::from(d[0] % 3);
    let verbs = ["Pick up", "Align", "Fasten", "Inspect", "Place"];
    let parts = ["the housing", "the bracket", "the two screws", "the cover", "the finished unit"];
    let per = max_frames / steps as u64;
    let results: Vec<Value> = (0..steps)
        .map(|i| {
            let (start, end) = (i as u64 * per, (i as u64 + 1) * per - 1);
            json!({
                "step": i + 1,
                "instruction": format!("{} {}.", verbs[usize::from(d[i + 1]) % verbs.len()], parts[usize::from(d[i + 8]) % parts.len()]),
                "frame_start": start, "frame_end": end,
                "timestamp_start": start as f64 * 0.5, "timestamp_end": end as f64 * 0.5,
            })
        })
        .collect();
    let mut line = json!({"id": agent_id, "results": results}).to_string();
    line.push('\n');
    line.into_bytes()
}

fn verification_json(agent_id: &str, values: &Value, input_name: &str, bytes: &[u8]) -> Vec<u8> {
    let d = digest(bytes);
    let steps: Vec<Value> = values.get("steps").and_then(Value::as_array).cloned().unwrap_or_default();
    let checked: Vec<Value> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| json!({"step": s, "completed": !d[i % 32].is_multiple_of(5)}))
        .collect();
    let verified = checked.iter().all(|c| c["completed"] == json!(true));
    let mut line = json!({"id": agent_id, "input": input_name, "verified": verified, "steps": checked}).to_string();
    line.push('\n');
    line.into_bytes()
}

fn summary_json(agent_id: &str, input_name: &str, bytes: &[u8]) -> Vec<u8> {
    let d = digest(bytes);
    let hex: String = d.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let mut line = json!({"id": agent_id, "input": input_name, "num_bytes": bytes.len(), "fingerprint": hex}).to_string();
    line.push('\n');
    line.into_bytes()
}

/// One input of a run with a sink: the rows of every input go into the one file, the CSV header
/// once.
pub(crate) fn append(into: &mut Vec<u8>, ext: &str, content: &[u8]) {
    if ext == "csv" && !into.is_empty() {
        let body = content.iter().position(|b| *b == b'\n').map_or(&content[..0], |i| &content[i + 1..]);
        into.extend_from_slice(body);
    } else {
        into.extend_from_slice(content);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn osm_labels_every_window_and_never_fails() {
        let csv = "timestamp,a,b\n".to_string() + &(0..40).map(|i| format!("{},{},{}\n", 100 + i, i % 5, i)).collect::<String>();
        let (ext, out) = result_for("osm", "agt_1", &json!({"window_size": 16}), "x.csv", csv.as_bytes());
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(ext, "csv");
        assert!(lines[0].starts_with("finish_timestamp,start_timestamp,predicted_state,invalid,p_idle"));
        assert_eq!(lines.len(), 1 + 3, "40 rows in windows of 16");
        assert!(lines[1].starts_with("115,100,"), "{}", lines[1]);
        for garbage in [&b""[..], b"\xff\x00\x01", b"no,numbers\nhere,at all"] {
            let _ = result_for("osm", "a", &json!({}), "g.csv", garbage);
            let _ = result_for("mga", "a", &json!({}), "g.mp4", garbage);
        }
        let (_, manual) = result_for("mga", "agt_1", &json!({}), "v.mp4", b"video bytes");
        let parsed: Value = serde_json::from_slice(&manual).unwrap();
        assert!(parsed["results"].as_array().unwrap().iter().all(|s| !s["instruction"].as_str().unwrap().is_empty()));
    }

    #[test]
    fn labels_come_from_the_named_column_or_from_state() {
        let csv = b"Time,a,Mode,state\n1,0.5,idle,x\n2,0.7,running,y\n";
        let named = read_labelled_csv(csv, Some("mode")).unwrap();
        assert_eq!(named.labels.as_deref(), Some(&["idle".to_string(), "running".to_string()][..]));
        assert_eq!(named.values[0], [0.5, 0.0], "the label column is no channel; `state` is one then");
        assert_eq!(named.timestamps, ["1", "2"]);
        assert_eq!(read_csv(csv).labels.as_deref(), Some(&["x".to_string(), "y".to_string()][..]));
        let missing = read_labelled_csv(csv, Some("phase")).err().unwrap_or_default();
        assert!(missing.contains("\"phase\"") && missing.contains("mode"), "{missing}");
        assert!(read_csv(b"t,a\n1,2\n").labels.is_none());
    }
}
