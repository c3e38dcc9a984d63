//! The SSE/delta decoder is split-invariant: however a response's bytes are
//! cut into chunks by the network (inside a multi-byte character, between the
//! `\r` and `\n` of a line end, one byte at a time), the user sees exactly the
//! same events and the turn gets exactly the same output as from the bytes in
//! one piece. The bytes go through the real path (reqwest body, lathe's
//! `ResponseStream` over eventsource-stream, our `ChatChunk`, the skip rule,
//! `StreamDecoder`); see `tests/support/sse.rs`.

use bytes::Bytes;
use lathe::model::ToolCallRequest;
use lathe::model::decode::{FinishReason, ModelEvent, Usage};
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

use crate::support::sse::{SseEnd, SseHarness, SseOutcome, split};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// A realistic response: a comment, `\r\n` and `\n` line ends, blank
/// keep-alives, multi-byte UTF-8 in text, reasoning and arguments, both
/// reasoning spellings, two parallel tool calls whose arguments arrive in
/// pieces, a `keepalive` event, a data line that is not JSON, an event whose
/// data spans two `data:` lines, `id:`/`retry:` fields, usage on its own chunk,
/// `[DONE]`, and something after `[DONE]` that must be ignored.
const FIXTURE: &str = concat!(
    ": OPENROUTER PROCESSING\r\n\r\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\r\n\r\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"Let me think… ü\"}}]}\n\n",
    "\n",
    "data:{\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"ﬁne 🤔\"}}]}\n\n",
    "\r\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"héllo ✓ 日本\"}}]}\r\n\r\n",
    "event: keepalive\ndata: {}\n\n",
    "data: this is not json\n\n",
    "id: 7\nretry: 100\ndata: {\"choices\":[{\"index\":0,\n",
    "data: \"delta\":{\"content\":\" — ok\"}}]}\n\n",
    ": ping\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"arguments\":\"\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"grep\",\"arguments\":\"{\\\"pattern\\\":\"}}]}}]}\r\n\r\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"path\\\":\\\"src/日本.rs\\\"}\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"\\\"✓\\\"}\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":34,\"total_tokens\":46}}\r\n\r\n",
    "data: [DONE]\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"after done\"}}]}\n\n",
);

fn fixture_outcome() -> SseOutcome {
    let text = |t: &str| ModelEvent::Text(t.to_owned());
    let reasoning = |t: &str| ModelEvent::Reasoning(t.to_owned());
    SseOutcome {
        events: vec![
            reasoning("Let me think… ü"),
            reasoning("ﬁne 🤔"),
            text("héllo ✓ 日本"),
            text(" — ok"),
            ModelEvent::ToolCallStarted { position: 0, id: "call_a".into(), name: "read_file".into() },
            ModelEvent::ToolCallStarted { position: 1, id: "call_b".into(), name: "grep".into() },
        ],
        chunks: 11,
        skipped: 1,
        end: SseEnd::Finished(lathe::model::ModelOutput {
            text: "héllo ✓ 日本 — ok".into(),
            reasoning: "Let me think… üﬁne 🤔".into(),
            reasoning_field: Some(lathe::model::ReasoningField::ReasoningContent),
            reasoning_details: None,
            text_tool_calls: None,
            tool_calls: vec![
                ToolCallRequest {
                    id: "call_a".into(),
                    name: "read_file".into(),
                    arguments: r#"{"path":"src/日本.rs"}"#.into(),
                },
                ToolCallRequest { id: "call_b".into(), name: "grep".into(), arguments: r#"{"pattern":"✓"}"#.into() },
            ],
            finish_reason: FinishReason::ToolCalls,
            usage: Some(Usage { input_tokens: 12, output_tokens: 34, cost: None }),
            refused: false,
            oversized: Vec::new(),
        }),
    }
}

#[test]
fn the_fixture_decodes_to_what_the_server_meant() {
    let harness = SseHarness::new();
    let outcome = runtime().block_on(harness.decode(vec![Bytes::from_static(FIXTURE.as_bytes())]));
    assert_eq!(outcome, fixture_outcome());
}

/// Every single cut point, then every byte on its own: cheap, and it finds
/// boundary bugs a random search can miss.
#[test]
fn every_cut_point_of_the_fixture_yields_the_same_result() {
    let rt = runtime();
    let harness = SseHarness::new();
    let bytes = FIXTURE.as_bytes();
    let expected = fixture_outcome();
    for at in 0..=bytes.len() {
        let got = rt.block_on(harness.decode_split(bytes, &[at]));
        assert_eq!(got, expected, "cut at byte {at}");
    }
    let one_byte_chunks: Vec<Bytes> = bytes.iter().map(|&b| Bytes::copy_from_slice(&[b])).collect();
    assert_eq!(rt.block_on(harness.decode(one_byte_chunks)), expected, "one byte per chunk");
}

/// Pieces a realistic stream is made of; each is a whole event or a line.
fn piece() -> impl Strategy<Value = String> {
    let eol = prop_oneof![Just("\n"), Just("\r\n")];
    let text = prop_oneof![
        Just("héllo ✓ 日本"),
        Just("plain"),
        Just("🤔 emoji"),
        Just("ü"),
        Just("line\nbreak \"quoted\" \\ back"),
        Just(""),
    ];
    let field = prop_oneof![Just("content"), Just("reasoning_content"), Just("reasoning"), Just("refusal")];
    let args = prop_oneof![Just("{\"path\":"), Just("\"日本.rs\"}"), Just(""), Just("{\"a\":[1,2,"), Just("✓")];
    prop_oneof![
        4 => (field, text.clone(), eol.clone()).prop_map(|(field, text, eol)| {
            let chunk = serde_json::json!({"choices":[{"index":0,"delta":{field: text}}]});
            format!("data: {chunk}{eol}{eol}")
        }),
        3 => (0u32..3, proptest::option::of(prop_oneof![Just("call_x"), Just("call_y")]),
              proptest::option::of(prop_oneof![Just("read_file"), Just("grep")]), args, eol.clone())
            .prop_map(|(index, id, name, args, eol)| {
                let chunk = serde_json::json!({"choices":[{"index":0,"delta":{"tool_calls":[
                    {"index":index,"id":id,"function":{"name":name,"arguments":args}}]}}]});
                format!("data: {chunk}{eol}{eol}")
            }),
        1 => (0u64..100, 0u64..100, eol.clone()).prop_map(|(p, c, eol)| {
            format!("data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{p},\"completion_tokens\":{c}}}}}{eol}{eol}")
        }),
        1 => (prop_oneof![Just("stop"), Just("length"), Just("tool_calls")], eol.clone()).prop_map(|(reason, eol)| {
            format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{reason}\"}}]}}{eol}{eol}")
        }),
        1 => eol.clone().prop_map(|eol| format!(": keep-alive comment ✓{eol}{eol}")),
        1 => eol.clone().prop_map(str::to_owned),
        1 => eol.clone().prop_map(|eol| format!("data: not json ✗{eol}{eol}")),
        1 => eol.clone().prop_map(|eol| format!("event: keepalive{eol}data: {{}}{eol}{eol}")),
        1 => (text, eol.clone()).prop_map(|(text, eol)| {
            // One event whose data spans two `data:` lines.
            let text = serde_json::to_string(text).unwrap_or_default();
            format!("data: {{\"choices\":[{{\"index\":0,{eol}data: \"delta\":{{\"content\":{text}}}}}]}}{eol}{eol}")
        }),
        1 => (0u32..1000, eol).prop_map(|(id, eol)| format!("id: {id}{eol}retry: 5{eol}")),
    ]
}

fn stream() -> impl Strategy<Value = Vec<u8>> {
    (proptest::collection::vec(piece(), 0..24), any::<bool>()).prop_map(|(pieces, done)| {
        let mut bytes = pieces.concat();
        if done {
            bytes.push_str("data: [DONE]\n\n");
        }
        bytes.into_bytes()
    })
}

#[test]
fn any_split_of_a_stream_yields_the_same_events_and_output() {
    let rt = runtime();
    let harness = SseHarness::new();
    let config = Config { cases: 256, failure_persistence: None, ..Config::default() };
    let cuts = proptest::collection::vec(any::<prop::sample::Index>(), 0..16);
    // A fixed seed, as the edit matcher's property tests: the suite is
    // deterministic; new inputs are searched for by the fuzz target
    // `sse_decoder`.
    let mut runner = TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let result = runner.run(&(stream(), cuts, prop::bool::weighted(0.25)), |(bytes, cuts, bytewise)| {
        let whole = rt.block_on(harness.decode(vec![Bytes::from(bytes.clone())]));
        let chunks = if bytewise {
            bytes.iter().map(|&b| Bytes::copy_from_slice(&[b])).collect()
        } else {
            let at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            split(&bytes, &at)
        };
        let pieces = rt.block_on(harness.decode(chunks));
        if whole != pieces {
            return Err(TestCaseError::fail(format!("whole: {whole:#?}\nsplit: {pieces:#?}")));
        }
        Ok(())
    });
    if let Err(err) = result {
        panic!("{err}");
    }
}

/// Regression (found while writing the `sse_decoder` fuzz target, whose seed
/// `04_bom_and_cr_only` starts with a BOM): a body starting with
/// a UTF-8 byte-order mark made eventsource-stream panic inside async-openai's
/// stream task (which lathe used then), so the answer silently came back empty. The SSE format says
/// to ignore a leading BOM; lathe now does, wherever its bytes are split.
#[test]
fn a_leading_byte_order_mark_is_ignored_wherever_it_is_split() {
    let rt = runtime();
    let harness = SseHarness::new();
    let body = "\u{feff}data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\r\n\r\ndata: [DONE]\n\n";
    let bytes = body.as_bytes();
    for at in 0..=bytes.len() {
        let got = rt.block_on(harness.decode_split(bytes, &[at]));
        assert_eq!(got.events, vec![ModelEvent::Text("hi".into())], "cut at byte {at}");
        assert!(matches!(&got.end, SseEnd::Finished(out) if out.text == "hi"), "cut at byte {at}: {got:?}");
    }
    let bytewise: Vec<Bytes> = bytes.iter().map(|&b| Bytes::copy_from_slice(&[b])).collect();
    assert_eq!(rt.block_on(harness.decode(bytewise)).events, vec![ModelEvent::Text("hi".into())]);
    // Only a leading one: a BOM later in the stream is part of a line (here a
    // field name that is not `data`, so that event is ignored, per the SSE spec).
    let later = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n\u{feff}data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n";
    let got = rt.block_on(harness.decode(vec![Bytes::from_static(later.as_bytes())]));
    assert_eq!(got.events, vec![ModelEvent::Text("a".into())]);
}

/// Regression (found by the `sse_decoder` fuzz target): with the first BOM
/// dropped, a second one still reached eventsource-stream first and panicked
/// it, losing everything after. Per the SSE format the second one is part of
/// the first line's field name, so that line is ignored; what follows is not.
#[test]
fn a_second_byte_order_mark_does_not_kill_the_stream() {
    let rt = runtime();
    let harness = SseHarness::new();
    let body = concat!(
        "\u{feff}\u{feff}data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ignored\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"kept\"}}]}\n\n",
    );
    let bytes = body.as_bytes();
    for at in 0..=bytes.len() {
        let got = rt.block_on(harness.decode_split(bytes, &[at]));
        assert_eq!(got.events, vec![ModelEvent::Text("kept".into())], "cut at byte {at}");
    }
    // The fuzzer's input, as it found it: nothing to show, and a clean end.
    let found = b"\xEF\xBB\xBF\xEF\xBB\xBFa: { asoninONE]\r\r";
    let got = rt.block_on(harness.decode(vec![Bytes::from_static(found)]));
    assert!(got.events.is_empty() && matches!(got.end, SseEnd::Finished(_)), "{got:?}");
}

/// The same, end to end: a real HTTP response from the mock server.
#[tokio::test]
async fn a_byte_order_mark_from_the_server_does_not_lose_the_answer() {
    use crate::support::acp_client::{agent_text, prompt};
    use crate::support::harness::Harness;
    use crate::support::mock_openai::{Reply, Step, ev_finish};

    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::Sse(vec![
        Step::Raw("\u{feff}data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"héllo\"}}]}\n\n".into()),
        ev_finish("stop"),
        Step::Done,
    ]));
    let id = prompt(&mut h.agent, &session, "hi").await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(agent_text(&before), "héllo");
}

/// A chunk nested 100,000 deep (issue 29) is one unreadable event, skipped
/// like any other, not a crashed stream: serde_json stops at 128 levels.
#[test]
fn a_deeply_nested_chunk_is_skipped_not_fatal() {
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let body = format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{deep}}}}}]}}\n\n\
         data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"after\"}}}}]}}\n\ndata: [DONE]\n\n"
    );
    let outcome = runtime().block_on(SseHarness::new().decode(vec![Bytes::from(body)]));
    assert_eq!(outcome.skipped, 1);
    assert_eq!(outcome.events, vec![ModelEvent::Text("after".to_owned())]);
}
