//! The stand-in pipelines: what a batch job writes for one input, computed from its bytes and
//! never failing on content (CHOICES: any bytes give a deterministic output).
//!
//! `machine-state-classification` reads a CSV as the job's `reader_config` says, embeds each
//! window with the stand-in encoder and labels it with the class of the nearest n-shot example
//! (cosine), writing `<timestamp_column>,Prediction`, one row per window in input order.
//! `activity-detection` answers every JSONL record with `{"line_index", "prediction"}`.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::emulator::query::encoder::embed_window;

/// Window of a job that does not set `reader_config.window_size`, and the training window of a
/// checkpoint whose reader said `auto`: the two defaults agree, so neither alone is a mismatch.
pub(crate) const DEFAULT_WINDOW: usize = 16;
pub(crate) const DEFAULT_TIMESTAMP_COLUMN: &str = "timestamp";
/// Labels when a job has neither n-shot examples nor a checkpoint's training labels.
const DEFAULT_CLASSES: &[&str] = &["idle", "running", "loaded", "fault"];
const ACTIVITIES: &[&str] = &["walking", "standing", "sitting", "running", "climbing stairs", "idle"];

/// A positive integer given as a number or as text (configs are taken as given); `None` for
/// `auto`, absent or anything else.
pub(crate) fn positive(v: Option<&Value>) -> Option<usize> {
    match v? {
        Value::Number(n) => n.as_u64().filter(|n| *n > 0).and_then(|n| usize::try_from(n).ok()),
        Value::String(s) => s.trim().parse::<usize>().ok().filter(|n| *n > 0),
        _ => None,
    }
}

/// How a CSV is cut into windows (`parameters.worker.config.reader_config`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reader {
    pub window_size: usize,
    pub step_size: usize,
    pub timestamp_column: String,
    pub data_columns: Option<Vec<String>>,
}

impl Reader {
    /// From a job's `parameters.worker.config`; sensible defaults for what it leaves out.
    pub fn from_config(config: &Value) -> Reader {
        let reader = &config["reader_config"];
        let window_size = positive(reader.get("window_size")).unwrap_or(DEFAULT_WINDOW);
        let data_columns = reader.get("data_columns").and_then(Value::as_array).map(|cols| {
            cols.iter().filter_map(Value::as_str).map(str::to_string).collect::<Vec<_>>()
        });
        Reader {
            window_size,
            step_size: positive(reader.get("step_size")).unwrap_or(window_size),
            timestamp_column: reader.get("timestamp_column").and_then(Value::as_str)
                .filter(|s| !s.is_empty()).unwrap_or(DEFAULT_TIMESTAMP_COLUMN).to_string(),
            data_columns: data_columns.filter(|c| !c.is_empty()),
        }
    }
}

/// A CSV as the reader sees it: one timestamp text per row and the chosen numeric columns.
struct Series {
    timestamps: Vec<String>,
    rows: Vec<Vec<f64>>,
}

fn read_series(bytes: &[u8], reader: &Reader) -> Series {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<String> = lines.next().unwrap_or("").split(',').map(|h| h.trim().to_ascii_lowercase()).collect();
    let wanted = reader.timestamp_column.to_ascii_lowercase();
    let time_col = header.iter().position(|h| *h == wanted).or_else(|| header.iter().position(|h| h.contains("time")));
    let named: Vec<usize> = reader.data_columns.iter().flatten()
        .filter_map(|c| header.iter().position(|h| *h == c.to_ascii_lowercase())).collect();
    let columns: Vec<usize> = if named.is_empty() { (0..header.len()).filter(|i| Some(*i) != time_col).collect() } else { named };
    let mut series = Series { timestamps: vec![], rows: vec![] };
    for (row, line) in lines.enumerate() {
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        series.timestamps.push(time_col.and_then(|c| cells.get(c)).map_or_else(|| row.to_string(), |s| s.to_string()));
        series.rows.push(columns.iter()
            .map(|c| cells.get(*c).and_then(|v| v.parse::<f64>().ok()).filter(|v| v.is_finite()).unwrap_or(0.0))
            .collect());
    }
    series
}

/// Row ranges `first..=last` of the windows: full windows every `step_size` rows; a recording
/// shorter than one window is one (short) window, so every input yields at least one row.
fn windows(rows: usize, reader: &Reader) -> Vec<(usize, usize)> {
    if rows == 0 {
        return vec![];
    }
    if rows < reader.window_size {
        return vec![(0, rows - 1)];
    }
    (0..=rows - reader.window_size).step_by(reader.step_size.max(1)).map(|first| (first, first + reader.window_size - 1)).collect()
}

fn embed(series: &Series, first: usize, last: usize) -> Vec<f32> {
    let flat: Vec<f64> = series.rows[first..=last].iter().flatten().copied().collect();
    embed_window(if flat.is_empty() { &[0.0] } else { &flat })
}

/// What windows are labelled with: a class per n-shot example (its mean window embedding), or
/// bare labels scored along fixed directions of the embedding when there are no examples.
pub(crate) struct Classes {
    examples: Vec<(String, Vec<f32>)>,
    labels: Vec<String>,
}

impl Classes {
    /// `examples`: (class, CSV bytes) of each n-shot input; `fallback_labels` when there are none
    /// (a checkpoint's training labels), else the defaults.
    pub fn new(examples: &[(String, Vec<u8>)], fallback_labels: &[String], reader: &Reader) -> Classes {
        let examples = examples.iter().map(|(class, bytes)| {
            let series = read_series(bytes, reader);
            let spans = windows(series.rows.len(), reader);
            let mut mean = vec![0f32; crate::emulator::query::encoder::EMBEDDING_DIM];
            for (first, last) in &spans {
                for (m, v) in mean.iter_mut().zip(embed(&series, *first, *last)) {
                    *m += v / spans.len() as f32;
                }
            }
            (class.clone(), mean)
        }).collect();
        let labels = if fallback_labels.is_empty() { DEFAULT_CLASSES.iter().map(|s| s.to_string()).collect() } else { fallback_labels.to_vec() };
        Classes { examples, labels }
    }

    fn label(&self, embedding: &[f32]) -> &str {
        if !self.examples.is_empty() {
            let mut best = (f32::MIN, "");
            for (class, proto) in &self.examples {
                let score = cosine(embedding, proto);
                if score > best.0 {
                    best = (score, class);
                }
            }
            return best.1;
        }
        let n = self.labels.len().max(1);
        let scores = (0..n).map(|c| embedding.iter().skip(c).step_by(n).sum::<f32>());
        let best = scores.enumerate().fold((0, f32::MIN), |acc, (i, s)| if s > acc.1 { (i, s) } else { acc }).0;
        self.labels.get(best).map_or("", String::as_str)
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let denominator = norm(a) * norm(b);
    if denominator > 0.0 { dot / denominator } else { 0.0 }
}

/// `<timestamp_column>,Prediction`, one row per window, stamped with the window's last row.
pub(crate) fn machine_state_csv(bytes: &[u8], reader: &Reader, classes: &Classes) -> Vec<u8> {
    let series = read_series(bytes, reader);
    let mut out = format!("{},Prediction\n", reader.timestamp_column);
    for (first, last) in windows(series.rows.len(), reader) {
        out.push_str(&format!("{},{}\n", series.timestamps[last], classes.label(&embed(&series, first, last))));
    }
    out.into_bytes()
}

/// `{"line_index": N, "prediction": "..."}` per non-empty line, N counting those lines from 0;
/// the prediction is derived from the line's bytes, whatever they are.
pub(crate) fn activity_jsonl(bytes: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::new();
    for (index, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let digest = Sha256::digest(line.trim().as_bytes());
        let activity = ACTIVITIES[usize::from(digest[0]) % ACTIVITIES.len()];
        out.push_str(&json!({"line_index": index, "prediction": activity}).to_string());
        out.push('\n');
    }
    out.into_bytes()
}

/// `pred_<input stem>_part_<n>.<ext>`: the stem keeps the input recognisable (public scripts
/// match outputs to inputs by it); `n`, the input's position, keeps two inputs with one stem
/// (`a.csv`, `a.CSV`) apart.
pub(crate) fn output_name(input: &str, n: usize, ext: &str) -> String {
    let base = input.rsplit('/').next().unwrap_or(input);
    let stem = base.rsplit_once('.').map_or(base, |(stem, _)| stem);
    format!("pred_{stem}_part_{n}.{ext}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rows` rows of time and two channels: flat at 1 (`busy` false) or swinging +-10.
    fn csv(rows: usize, busy: bool) -> Vec<u8> {
        let mut s = String::from("time,a,b\n");
        for i in 0..rows {
            let v = if !busy { 1.0 } else if i % 2 == 0 { 10.0 } else { -10.0 };
            s.push_str(&format!("2026-01-01T00:00:{:02},{v},{}\n", i % 60, -v));
        }
        s.into_bytes()
    }

    #[test]
    fn windows_follow_the_reader_config() {
        let r = Reader::from_config(&json!({"reader_config": {"window_size": "4", "step_size": 2, "timestamp_column": "time"}}));
        assert_eq!((r.window_size, r.step_size, r.timestamp_column.as_str()), (4, 2, "time"));
        assert_eq!(windows(10, &r), vec![(0, 3), (2, 5), (4, 7), (6, 9)]);
        assert_eq!(windows(3, &r), vec![(0, 2)], "a short recording is one window");
        assert_eq!(windows(0, &r), vec![]);
        let d = Reader::from_config(&json!({"reader_config": {"window_size": "auto"}}));
        assert_eq!((d.window_size, d.step_size), (DEFAULT_WINDOW, DEFAULT_WINDOW));
    }

    #[test]
    fn machine_state_labels_each_window_with_an_n_shot_class() {
        let r = Reader::from_config(&json!({"reader_config": {"window_size": 4, "timestamp_column": "time"}}));
        let classes = Classes::new(&[("idle".into(), csv(8, false)), ("busy".into(), csv(8, true))], &[], &r);
        let out = String::from_utf8(machine_state_csv(&csv(10, false), &r, &classes)).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines, ["time,Prediction", "2026-01-01T00:00:03,idle", "2026-01-01T00:00:07,idle"], "10 rows in windows of 4");
        let busy = String::from_utf8(machine_state_csv(&csv(4, true), &r, &classes)).unwrap();
        assert_eq!(busy.lines().nth(1), Some("2026-01-01T00:00:03,busy"), "the nearest example's class");
        assert_eq!(out, String::from_utf8(machine_state_csv(&csv(10, false), &r, &classes)).unwrap(), "deterministic");
        for garbage in [&b""[..], b"\xff\x00\x01", b"no,numbers\nhere,at all"] {
            let out = machine_state_csv(garbage, &r, &classes);
            assert!(out.starts_with(b"time,Prediction\n"));
        }
        let no_examples = Classes::new(&[], &["a".into(), "b".into()], &r);
        let out = String::from_utf8(machine_state_csv(&csv(4, true), &r, &no_examples)).unwrap();
        let label = out.lines().nth(1).unwrap().rsplit(',').next().unwrap().to_string();
        assert!(label == "a" || label == "b", "{out}");
    }

    #[test]
    fn activity_answers_every_line() {
        let out = String::from_utf8(activity_jsonl(b"{\"prompt\": \"x\"}\n\nnot json\n{\"inputs\": [1]}")).unwrap();
        let rows: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(rows.iter().map(|r| r["line_index"].as_u64().unwrap()).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(rows.iter().all(|r| ACTIVITIES.contains(&r["prediction"].as_str().unwrap())));
        assert_eq!(output_name("dir/pump a.csv", 2, "csv"), "pred_pump a_part_2.csv");
        assert_eq!(output_name("noext", 0, "jsonl"), "pred_noext_part_0.jsonl");
    }
}
