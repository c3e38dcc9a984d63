//! Answers that carry structure in their text, decoded through the real
//! stream path (`tests/support/sse.rs`: reqwest body, lathe's
//! `ResponseStream`, `StreamDecoder` as the agent drives it) with the text
//! cut at every boundary: between two content deltas at every character,
//! one character per delta, and the SSE bytes cut at every byte. A tool call
//! written as text (Hermes/Qwen, Llama 3, Mistral) comes out as the same
//! call and nothing shown; a `<think>` block as the same reasoning and
//! answer.

use bytes::Bytes;
use serde_json::json;

use crate::support::sse::{SseEnd, SseHarness, SseOutcome};
use lathe::model::ModelEvent;
use lathe::model::text_calls::TextCallFormat;

const OFFERED: [&str; 3] = ["read_file", "grep", "update_plan"];

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// An SSE body whose content arrives as exactly these deltas.
fn sse(pieces: &[&str]) -> String {
    let mut body = String::new();
    for piece in pieces {
        let chunk = json!({"choices": [{"index": 0, "delta": {"content": piece}}]});
        body.push_str(&format!("data: {chunk}\n\n"));
    }
    body.push_str("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
    body
}

/// `text` as two deltas cut at every character, then one delta per character.
fn every_cut(text: &str) -> Vec<Vec<String>> {
    let mut cuts: Vec<Vec<String>> =
        text.char_indices().skip(1).map(|(at, _)| vec![text[..at].to_owned(), text[at..].to_owned()]).collect();
    cuts.push(text.chars().map(String::from).collect());
    cuts
}

fn decode(harness: &SseHarness, rt: &tokio::runtime::Runtime, pieces: &[String]) -> SseOutcome {
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    rt.block_on(harness.decode(vec![Bytes::from(sse(&pieces))]))
}

/// The recovered calls as (name, arguments as JSON), with nothing shown.
fn recovered(outcome: &SseOutcome) -> (TextCallFormat, Vec<(String, serde_json::Value)>) {
    let SseEnd::Finished(output) = &outcome.end else { panic!("did not finish: {outcome:?}") };
    assert_eq!(output.text, "", "nothing of the block is text: {outcome:?}");
    let texts: Vec<&ModelEvent> = outcome.events.iter().filter(|e| matches!(e, ModelEvent::Text(_))).collect();
    assert!(texts.is_empty(), "nothing shown: {texts:?}");
    let started = outcome.events.iter().filter(|e| matches!(e, ModelEvent::ToolCallStarted { .. })).count();
    assert_eq!(started, output.tool_calls.len(), "each call announced");
    let calls = output
        .tool_calls
        .iter()
        .map(|call| (call.name.clone(), serde_json::from_str(&call.arguments).unwrap()))
        .collect();
    (output.text_tool_calls.expect("marked as recovered from text"), calls)
}

#[test]
fn tool_calls_written_as_text_survive_every_cut() {
    let rt = runtime();
    let harness = SseHarness::offering(&OFFERED);
    let read = ("read_file".to_owned(), json!({"path": "src/日本.rs"}));
    let grep = ("grep".to_owned(), json!({"pattern": "fn main"}));
    let fixtures = [
        (
            "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"src/日本.rs\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"grep\", \"arguments\": {\"pattern\": \"fn main\"}}\n</tool_call>",
            TextCallFormat::Hermes,
            vec![read.clone(), grep.clone()],
        ),
        (
            "<|python_tag|>{\"name\": \"read_file\", \"parameters\": {\"path\": \"src/日本.rs\"}}",
            TextCallFormat::Llama,
            vec![read.clone()],
        ),
        (
            "\n{\"name\": \"grep\", \"parameters\": {\"pattern\": \"fn main\"}}",
            TextCallFormat::Llama,
            vec![grep.clone()],
        ),
        (
            "[TOOL_CALLS][{\"name\": \"read_file\", \"arguments\": {\"path\": \"src/日本.rs\"}, \"id\": \"a1b2c3d4e\"}]",
            TextCallFormat::Mistral,
            vec![read.clone()],
        ),
        (
            "[TOOL_CALLS]read_file[ARGS]{\"path\": \"src/日本.rs\"}[TOOL_CALLS]grep[ARGS]{\"pattern\": \"fn main\"}",
            TextCallFormat::Mistral,
            vec![read, grep],
        ),
    ];
    for (text, format, calls) in fixtures {
        for pieces in every_cut(text) {
            let outcome = decode(&harness, &rt, &pieces);
            assert_eq!(recovered(&outcome), (format, calls.clone()), "{pieces:?}");
        }
    }
}

#[test]
fn the_sse_bytes_cut_anywhere_give_the_same_call() {
    let rt = runtime();
    let harness = SseHarness::offering(&OFFERED);
    let body = sse(&["<tool_call>{\"name\": \"grep\", ", "\"arguments\": {\"pattern\": \"ü\"}}</tool_call>"]);
    let whole = rt.block_on(harness.decode(vec![Bytes::from(body.clone())]));
    let expected = recovered(&whole);
    for at in 0..=body.len() {
        let outcome = rt.block_on(harness.decode_split(body.as_bytes(), &[at]));
        assert_eq!(outcome.events, whole.events, "cut at byte {at}");
        assert_eq!(recovered(&outcome), expected, "cut at byte {at}");
    }
}

#[test]
fn without_offered_tools_or_with_prose_it_is_text() {
    let rt = runtime();
    let block = "<tool_call>{\"name\": \"grep\", \"arguments\": {\"pattern\": \"x\"}}</tool_call>";
    let cases = [
        (SseHarness::new(), block.to_owned()),
        (SseHarness::offering(&OFFERED), format!("{block}\nThat should find it.")),
        (SseHarness::offering(&["read_file"]), block.to_owned()),
    ];
    for (harness, text) in cases {
        for pieces in every_cut(&text) {
            let outcome = decode(&harness, &rt, &pieces);
            let SseEnd::Finished(output) = &outcome.end else { panic!("{outcome:?}") };
            assert!(output.tool_calls.is_empty() && output.text == text, "{pieces:?}: {output:?}");
            let shown: String = outcome
                .events
                .iter()
                .filter_map(|e| match e {
                    ModelEvent::Text(t) => Some(t.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(shown, text, "all of it shown");
        }
    }
}

#[test]
fn think_blocks_survive_every_cut() {
    let rt = runtime();
    let harness = SseHarness::offering(&OFFERED);
    let text = "<think>\nIs a < b? Yes: </thi is no tag.\n</think>\n\nYes, a < b.";
    for pieces in every_cut(text) {
        let outcome = decode(&harness, &rt, &pieces);
        let SseEnd::Finished(output) = &outcome.end else { panic!("{outcome:?}") };
        assert_eq!(output.reasoning, "Is a < b? Yes: </thi is no tag.\n", "{pieces:?}");
        assert_eq!(output.text, "Yes, a < b.", "{pieces:?}");
        let (mut thought, mut shown) = (String::new(), String::new());
        for event in &outcome.events {
            match event {
                ModelEvent::Reasoning(t) => thought.push_str(t),
                ModelEvent::Text(t) => shown.push_str(t),
                ModelEvent::ToolCallStarted { .. } => panic!("no call: {pieces:?}"),
            }
        }
        assert_eq!((thought.as_str(), shown.as_str()), (output.reasoning.as_str(), output.text.as_str()));
    }
}
