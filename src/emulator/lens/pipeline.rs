//! A lens's `model_pipeline` made runnable: its processors in order, and the channel its outputs
//! go to. Every analysing processor sees each input event and adds its outputs in pipeline order.

use serde_json::Value;

use super::outbox::Channel;
use super::processors::{self, Event, NShot};

enum Step {
    Noop,
    Camera,
    Video,
    Timeseries(Box<NShot>),
}

pub(crate) struct Pipeline {
    steps: Vec<Step>,
    pub channel: Channel,
    /// A processor that answers `model.query` (the camera processor).
    pub answers_queries: bool,
}

/// `(processor_name, processor_config)` of each entry, or the plain-string reasons it is not a
/// pipeline (used by register's `error_messages` and session creation's `{errors}`).
pub(crate) fn entries(lens_config: &Value) -> Result<Vec<(String, Value)>, Vec<String>> {
    let list = match lens_config.get("model_pipeline") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(vec!["model_pipeline must be a list of processors.".into()]),
    };
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        match entry.get("processor_name").and_then(Value::as_str) {
            Some(name) if !name.is_empty() => {
                let config = entry.get("processor_config").cloned().unwrap_or(Value::Object(Default::default()));
                if config.is_object() {
                    out.push((name.to_string(), config));
                } else {
                    errors.push(format!("model_pipeline[{i}].processor_config must be an object."));
                }
            }
            _ => errors.push(format!("model_pipeline[{i}] needs a processor_name.")),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

impl Pipeline {
    /// Builds the runtime of `lens_config`; `read` gives an organization file's bytes (n-shot CSVs).
    pub fn build(lens_config: &Value, read: &dyn Fn(&str) -> Option<Vec<u8>>) -> Result<Pipeline, Vec<String>> {
        let mut steps = Vec::new();
        let mut channel = Channel::Mailbox;
        let mut errors = Vec::new();
        for (name, config) in entries(lens_config)? {
            match name.as_str() {
                processors::NOOP => steps.push(Step::Noop),
                processors::CAMERA => steps.push(Step::Camera),
                processors::VIDEO => steps.push(Step::Video),
                processors::SSE_WRITER => channel = Channel::Sse,
                processors::TIMESERIES => match NShot::from_config(&config, read) {
                    Ok(model) => steps.push(Step::Timeseries(Box::new(model))),
                    Err(e) => errors.push(e),
                },
                other => errors.push(format!(
                    "Unknown processor '{other}'; the emulator runs {}.",
                    processors::KNOWN.join(", ")
                )),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let answers_queries = steps.iter().any(|s| matches!(s, Step::Camera));
        Ok(Pipeline { steps, channel, answers_queries })
    }

    pub fn process(&self, input: &Value) -> Vec<Event> {
        self.steps
            .iter()
            .map(|step| match step {
                Step::Noop => processors::noop(input),
                Step::Camera => processors::camera(input),
                Step::Video => processors::video(input),
                Step::Timeseries(model) => model.classify(input),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn none(_: &str) -> Option<Vec<u8>> {
        None
    }

    #[test]
    fn channel_and_outputs_follow_the_pipeline() {
        let config = json!({"model_pipeline": [
            {"processor_name": "lens_noop_processor", "processor_config": {}},
            {"processor_name": "lens_camera_processor"},
            {"processor_name": "server_sent_events_writer", "processor_config": {}},
        ]});
        let p = Pipeline::build(&config, &none).unwrap();
        assert_eq!(p.channel, Channel::Sse);
        assert!(p.answers_queries);
        let out = p.process(&json!({"type": "data.json", "event_data": {"k": 1}}));
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].1, json!({"k": 1}));
        let mailbox = Pipeline::build(&json!({"model_pipeline": [{"processor_name": "lens_noop_processor"}]}), &none).unwrap();
        assert_eq!(mailbox.channel, Channel::Mailbox);
    }

    #[test]
    fn bad_pipelines_say_why() {
        let e = Pipeline::build(&json!({"model_pipeline": [{"processor_name": "warp_drive"}]}), &none).err().unwrap();
        assert!(e[0].contains("warp_drive"), "{e:?}");
        let e = Pipeline::build(&json!({"model_pipeline": [{"processor_name": "lens_timeseries_state_processor"}]}), &none).err().unwrap();
        assert!(e[0].contains("n_shot_files"), "{e:?}");
        assert!(entries(&json!({"model_pipeline": {}})).is_err());
        assert_eq!(entries(&json!({"model_pipeline": [{}, {"processor_name": "x", "processor_config": 3}]})).err().unwrap().len(), 2);
    }
}
