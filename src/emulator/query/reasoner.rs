//! The stand-in reasoner: a deterministic answer that reports what it received, cut to
//! `max_new_tokens` whitespace-separated tokens.

use super::media::{describe_image, describe_json, excerpt};
use super::validate::{InputEvent, QueryInput};

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

pub(crate) fn describe_event(event: &InputEvent) -> String {
    match event {
        InputEvent::Text(t) => format!("data.text {}", excerpt(t)),
        InputEvent::Json(t) => format!("data.json {}", describe_json(t)),
        InputEvent::Image(info) => format!("data.base64_img {}", describe_image(info)),
        InputEvent::Images(list) => {
            let each: Vec<String> = list.iter().map(describe_image).collect();
            format!("data.base64_img_array of {}: {}", plural(list.len(), "image"), each.join(", "))
        }
        InputEvent::Numeric(channels) => format!(
            "data.numeric_array of {} x {} points",
            plural(channels.len(), "channel"),
            channels.first().map(Vec::len).unwrap_or(0)
        ),
    }
}

/// `file_descriptions` are in `input.file_ids` order (see `media::describe_file`).
pub(crate) fn answer(input: &QueryInput, file_descriptions: &[String]) -> String {
    let mut text = String::new();
    if !input.response_start_prompt.is_empty() {
        text.push_str(&input.response_start_prompt);
        text.push(' ');
    }
    text.push_str(&format!("[emulated {}] query {}", input.model, excerpt(&input.query)));
    if !file_descriptions.is_empty() {
        text.push_str(&format!(
            " with {}: {}",
            plural(file_descriptions.len(), "file"),
            file_descriptions.join("; ")
        ));
    }
    if !input.events.is_empty() {
        let each: Vec<String> = input.events.iter().map(describe_event).collect();
        let joiner = if file_descriptions.is_empty() { "with" } else { "and" };
        text.push_str(&format!(" {joiner} {}: {}", plural(each.len(), "event"), each.join("; ")));
    }
    if file_descriptions.is_empty() && input.events.is_empty() {
        text.push_str(" with no files or events");
    }
    cut_to_tokens(&text, input.max_new_tokens)
}

pub(crate) fn cut_to_tokens(text: &str, max_tokens: usize) -> String {
    text.split_whitespace().take(max_tokens).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulator::query::validate::parse;
    use serde_json::json;

    #[test]
    fn reports_inputs_and_honours_max_new_tokens() {
        let body = json!({"model": "Reasoner::c2_4_7b_251215a172f6d7", "query": "what is here?",
            "events": [{"type": "data.numeric_array", "event_data": {"contents": [[1, 2, 3], [4, 5, 6]]}},
                       {"type": "data.text", "event_data": {"contents": "some notes"}}]});
        let input = parse(body.to_string().as_bytes(), &Default::default()).unwrap();
        let files = vec!["notes.txt (text/plain, 5 bytes): \"hello\"".to_string()];
        let a = answer(&input, &files);
        assert_eq!(a, answer(&input, &files));
        assert!(a.starts_with("[emulated Reasoner::c2_4_7b_251215a172f6d7] query \"what is here?\" with 1 file: notes.txt"));
        assert!(a.contains("2 channels x 3 points"));
        assert!(a.contains("data.text \"some notes\""));
        let mut short = input.clone();
        short.max_new_tokens = 3;
        assert_eq!(answer(&short, &files), "[emulated Reasoner::c2_4_7b_251215a172f6d7] query");
    }
}
