//! Turns decoded chat-completion chunks into model events and, at the end,
//! one complete assistant output. Pure: no I/O, no clocks, no async.
//!
//! What it absorbs from real servers: tool calls whose id, name and arguments
//! arrive in many fragments, several calls interleaved by `index`; servers that
//! omit `index` or send each call whole; arguments sent as a JSON object
//! instead of a string; reasoning under `reasoning_content` or `reasoning`
//! (and OpenRouter's `reasoning_details`, merged piece by piece), or as a
//! `<think>` block opening the text ([`think`]); tool calls written as text
//! when the server has no parser for the model ([`text_calls`], only when
//! tools were offered: [`StreamDecoder::offering`]); usage on the last chunk,
//! on every chunk, or never; errors inside the stream.
//!
//! [`think`]: crate::model::think
//! [`text_calls`]: crate::model::text_calls

use crate::model::text_calls::{self, TextCallFormat, TextCallGate};
use crate::model::think::{Split, ThinkSplitter};
use crate::model::wire::{ChatChunk, Delta, ToolCallDelta, WireUsage};
use crate::model::{ReasoningField, ToolCallRequest};

/// Something the user can see as soon as it arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelEvent {
    /// A piece of the answer.
    Text(String),
    /// A piece of the model's reasoning.
    Reasoning(String),
    /// The model began a tool call (its name is known; arguments still streaming).
    ToolCallStarted {
        /// Position among this response's calls.
        position: usize,
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
    },
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// A natural end.
    Stop,
    /// The output-token limit was reached.
    Length,
    /// The model wants tools run.
    ToolCalls,
    /// The provider's content filter stopped it.
    ContentFilter,
    /// Anything else the server said.
    Other(String),
}

impl FinishReason {
    fn parse(reason: &str) -> Self {
        match reason {
            "stop" | "end_turn" | "eos" | "stop_sequence" => FinishReason::Stop,
            "length" | "max_tokens" => FinishReason::Length,
            "tool_calls" | "function_call" | "tool_use" => FinishReason::ToolCalls,
            "content_filter" | "safety" => FinishReason::ContentFilter,
            other => FinishReason::Other(other.to_owned()),
        }
    }
}

/// Token counts of one request.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// What the request cost, when the server said.
    pub cost: Option<f64>,
}

/// Everything one model response produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelOutput {
    /// The answer text.
    pub text: String,
    /// The reasoning text.
    pub reasoning: String,
    /// The field the reasoning came in, if any came.
    pub reasoning_field: Option<ReasoningField>,
    /// OpenRouter's `reasoning_details`, merged (a JSON array), if any came.
    pub reasoning_details: Option<serde_json::Value>,
    /// Set when the tool calls were recovered from the answer text.
    pub text_tool_calls: Option<TextCallFormat>,
    /// Completed tool calls, in order.
    pub tool_calls: Vec<ToolCallRequest>,
    /// Why it stopped.
    pub finish_reason: FinishReason,
    /// Token usage, when the server reported it.
    pub usage: Option<Usage>,
    /// Whether the model refused (an explicit `refusal`).
    pub refused: bool,
    /// Calls whose arguments passed the cap (see
    /// [`StreamDecoder::max_argument_bytes`]): their `arguments` are `{}`.
    pub oversized: Vec<OversizedCall>,
}

/// A tool call whose arguments were dropped for being over the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OversizedCall {
    /// Its index in [`ModelOutput::tool_calls`].
    pub index: usize,
    /// How many bytes of arguments the model sent for it.
    pub bytes: usize,
}

/// The server reported an error inside the stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StreamReportedError(pub String);

#[derive(Debug, Default)]
struct PartialCall {
    index: Option<u32>,
    id: String,
    name: String,
    arguments: String,
    /// Bytes of arguments received, kept or not.
    argument_bytes: usize,
    /// Whether the arguments passed the cap (and were dropped).
    oversized: bool,
    announced: bool,
}

impl PartialCall {
    /// Adds a piece of arguments, unless the whole would pass `cap`: then
    /// nothing more is kept and what was is freed.
    fn push_arguments(&mut self, piece: &str, cap: usize) {
        self.argument_bytes = self.argument_bytes.saturating_add(piece.len());
        if self.oversized {
            return;
        }
        if self.argument_bytes > cap {
            self.oversized = true;
            self.arguments = String::new();
        } else {
            self.arguments.push_str(piece);
        }
    }
}

/// Accumulates one response.
#[derive(Debug)]
pub struct StreamDecoder {
    text: String,
    reasoning: String,
    calls: Vec<PartialCall>,
    finish_reason: Option<FinishReason>,
    usage: Option<Usage>,
    refused: bool,
    id_prefix: String,
    reasoning_field: Option<ReasoningField>,
    reasoning_details: Vec<serde_json::Value>,
    think: ThinkSplitter,
    /// Holds the answer back while it may be a tool call written as text.
    gate: TextCallGate,
    /// The tools the request offered (calls written as text may name only these).
    offered: Vec<String>,
    /// Whether calls written as text are recovered at all.
    recover_text_calls: bool,
    text_tool_calls: Option<TextCallFormat>,
    max_argument_bytes: Option<usize>,
}

impl StreamDecoder {
    /// A decoder; `id_prefix` names tool calls whose server gave no id.
    pub fn new(id_prefix: impl Into<String>) -> Self {
        Self {
            text: String::new(),
            reasoning: String::new(),
            calls: Vec::new(),
            finish_reason: None,
            usage: None,
            refused: false,
            id_prefix: id_prefix.into(),
            reasoning_field: None,
            reasoning_details: Vec::new(),
            think: ThinkSplitter::default(),
            gate: TextCallGate::open(),
            offered: Vec::new(),
            recover_text_calls: false,
            text_tool_calls: None,
            max_argument_bytes: None,
        }
    }

    /// The request offered these tools: with
    /// [`StreamDecoder::recovering_text_calls`], an answer that is nothing
    /// but calls to them written as text is held back while it streams and
    /// recovered as tool calls by [`StreamDecoder::end`].
    pub fn offering<'a>(mut self, tools: impl IntoIterator<Item = &'a str>) -> Self {
        self.offered = tools.into_iter().map(str::to_owned).collect();
        self.set_gate();
        self
    }

    /// Whether tool calls the model wrote as answer text are recovered (see
    /// [`text_calls`]). Off unless asked for: a model that quotes a file or
    /// a page holding such a block looks exactly like one whose server has no
    /// parser, so the turn asks for this only for a server that needs it.
    pub fn recovering_text_calls(mut self, recover: bool) -> Self {
        self.recover_text_calls = recover;
        self.set_gate();
        self
    }

    /// Holds the answer back only while it may become calls.
    fn set_gate(&mut self) {
        self.gate = if self.recover_text_calls && !self.offered.is_empty() {
            TextCallGate::default()
        } else {
            TextCallGate::open()
        };
    }

    /// Keeps at most `max` bytes of one call's arguments: past that, the
    /// rest is counted but not kept, and the call is reported in
    /// [`ModelOutput::oversized`]. Unlimited by default.
    pub fn max_argument_bytes(mut self, max: usize) -> Self {
        self.max_argument_bytes = Some(max);
        self
    }

    /// The answer text received so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The reasoning received so far.
    pub fn reasoning(&self) -> &str {
        &self.reasoning
    }

    /// Whether the server said why it stopped.
    pub fn has_finish_reason(&self) -> bool {
        self.finish_reason.is_some()
    }

    /// Feeds one chunk; events the user should see now go to `emit`.
    pub fn push(&mut self, chunk: ChatChunk, emit: &mut impl FnMut(ModelEvent)) -> Result<(), StreamReportedError> {
        if let Some(error) = chunk.error {
            let message = error
                .get("message")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| error.to_string());
            return Err(StreamReportedError(message));
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(to_usage(usage));
        }
        for choice in chunk.choices {
            if choice.index != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                self.apply(delta, emit);
            }
            if let Some(message) = choice.message {
                self.apply(message, emit);
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.finish_reason = Some(FinishReason::parse(&reason));
            }
        }
        Ok(())
    }

    fn apply(&mut self, delta: Delta, emit: &mut impl FnMut(ModelEvent)) {
        // Servers in transition send the same reasoning under both names: take one.
        let reasoning = match (delta.reasoning_content.filter(|r| !r.is_empty()), delta.reasoning) {
            (Some(text), _) => Some((ReasoningField::ReasoningContent, text)),
            (None, Some(text)) if !text.is_empty() => Some((ReasoningField::Reasoning, text)),
            (None, _) => None,
        };
        let shown_from_details = reasoning.is_none();
        for detail in delta.reasoning_details {
            if shown_from_details
                && let Some(text) = ["text", "summary"].iter().find_map(|key| detail.get(*key)?.as_str())
                && !text.is_empty()
            {
                self.reasoning.push_str(text);
                emit(ModelEvent::Reasoning(text.to_owned()));
            }
            merge_reasoning_detail(&mut self.reasoning_details, detail);
        }
        if let Some((field, text)) = reasoning {
            self.reasoning_field.get_or_insert(field);
            self.reasoning.push_str(&text);
            emit(ModelEvent::Reasoning(text));
        }
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            let split = self.think.push(text);
            self.take_split(split, emit);
        }
        if let Some(refusal) = delta.refusal.filter(|r| !r.is_empty()) {
            self.refused = true;
            self.text.push_str(&refusal);
            emit(ModelEvent::Text(refusal));
        }
        for fragment in delta.tool_calls {
            self.apply_tool_fragment(fragment, emit);
        }
    }

    fn apply_tool_fragment(&mut self, fragment: ToolCallDelta, emit: &mut impl FnMut(ModelEvent)) {
        let id = fragment.id.filter(|id| !id.is_empty());
        let slot = match fragment.index {
            Some(index) => match self.calls.iter().rposition(|c| c.index == Some(index)) {
                // The same index with a different id is a new call (servers that
                // number every call 0).
                Some(at) if id.as_ref().is_none_or(|id| self.calls[at].id.is_empty() || *id == self.calls[at].id) => at,
                _ => self.new_call(Some(index)),
            },
            None => match (self.calls.last(), &id) {
                (Some(last), Some(id)) if !last.id.is_empty() && last.id != *id => self.new_call(None),
                (Some(_), _) => self.calls.len() - 1,
                (None, _) => self.new_call(None),
            },
        };
        let position = slot;
        let call = &mut self.calls[slot];
        if let Some(id) = id
            && call.id.is_empty()
        {
            call.id = id;
        }
        if let Some(function) = fragment.function {
            if let Some(name) = function.name.filter(|n| !n.is_empty())
                && name != call.name
            {
                call.name.push_str(&name);
            }
            let cap = self.max_argument_bytes.unwrap_or(usize::MAX);
            match function.arguments {
                Some(serde_json::Value::String(piece)) => call.push_arguments(&piece, cap),
                Some(serde_json::Value::Null) | None => {}
                Some(whole) => {
                    // A whole object replaces whatever came before.
                    call.arguments = String::new();
                    call.argument_bytes = 0;
                    call.oversized = false;
                    call.push_arguments(&whole.to_string(), cap);
                }
            }
        }
        if !call.announced && !call.name.is_empty() {
            call.announced = true;
            if call.id.is_empty() {
                call.id = format!("{}{position}", self.id_prefix);
            }
            emit(ModelEvent::ToolCallStarted { position, id: call.id.clone(), name: call.name.clone() });
        }
    }

    /// Reasoning from a `<think>` block, and answer text (through the gate).
    fn take_split(&mut self, split: Split, emit: &mut impl FnMut(ModelEvent)) {
        if !split.reasoning.is_empty() {
            self.reasoning_field.get_or_insert(ReasoningField::ReasoningContent);
            self.reasoning.push_str(&split.reasoning);
            emit(ModelEvent::Reasoning(split.reasoning));
        }
        if !split.text.is_empty()
            && let Some(text) = self.gate.push(split.text)
        {
            self.text.push_str(&text);
            emit(ModelEvent::Text(text));
        }
    }

    /// The stream ended normally: what was held back is shown, or, when
    /// the answer is nothing but tool calls written as text (and the server
    /// sent no structured ones), it becomes those calls.
    pub fn end(&mut self, emit: &mut impl FnMut(ModelEvent)) {
        let split = self.think.finish();
        self.take_split(split, emit);
        let held = self.gate.take_held();
        if held.is_empty() {
            return;
        }
        let offered = &self.offered;
        let recovered = if self.recover_text_calls && self.calls.is_empty() {
            text_calls::parse(&held, |name| offered.iter().any(|tool| tool == name))
        } else {
            None
        };
        let Some((format, calls)) = recovered else {
            self.text.push_str(&held);
            emit(ModelEvent::Text(held));
            return;
        };
        for call in calls {
            let position = self.calls.len();
            let id = call.id.filter(|id| !id.is_empty()).unwrap_or_else(|| format!("{}{position}", self.id_prefix));
            emit(ModelEvent::ToolCallStarted { position, id: id.clone(), name: call.name.clone() });
            let mut partial = PartialCall {
                index: None,
                id,
                name: call.name,
                arguments: String::new(),
                argument_bytes: 0,
                oversized: false,
                announced: true,
            };
            partial.push_arguments(&call.arguments, self.max_argument_bytes.unwrap_or(usize::MAX));
            self.calls.push(partial);
        }
        self.text_tool_calls = Some(format);
        if matches!(self.finish_reason, None | Some(FinishReason::Stop)) {
            self.finish_reason = Some(FinishReason::ToolCalls);
        }
    }

    fn new_call(&mut self, index: Option<u32>) -> usize {
        self.calls.push(PartialCall { index, ..PartialCall::default() });
        self.calls.len() - 1
    }

    /// The complete output. Calls without a name are dropped (nothing can
    /// run them); an oversized call keeps `{}` as its arguments. Text still
    /// held back (the stream did not [`end`]) is kept as text, unshown.
    ///
    /// [`end`]: StreamDecoder::end
    pub fn finish(mut self) -> ModelOutput {
        let split = self.think.finish();
        self.reasoning.push_str(&split.reasoning);
        self.text.push_str(&self.gate.take_held());
        self.text.push_str(&split.text);
        let id_prefix = self.id_prefix;
        let mut oversized = Vec::new();
        let tool_calls: Vec<ToolCallRequest> = self
            .calls
            .into_iter()
            .enumerate()
            .filter(|(_, call)| !call.name.is_empty())
            .enumerate()
            .map(|(index, (position, call))| {
                if call.oversized {
                    oversized.push(OversizedCall { index, bytes: call.argument_bytes });
                }
                ToolCallRequest {
                    id: if call.id.is_empty() { format!("{id_prefix}{position}") } else { call.id },
                    name: call.name,
                    arguments: if call.arguments.trim().is_empty() { "{}".to_owned() } else { call.arguments },
                }
            })
            .collect();
        let finish_reason = match self.finish_reason {
            Some(reason) => reason,
            None if !tool_calls.is_empty() => FinishReason::ToolCalls,
            None => FinishReason::Stop,
        };
        ModelOutput {
            text: self.text,
            reasoning: self.reasoning,
            reasoning_field: self.reasoning_field,
            reasoning_details: (!self.reasoning_details.is_empty())
                .then(|| serde_json::Value::Array(self.reasoning_details)),
            text_tool_calls: self.text_tool_calls,
            tool_calls,
            finish_reason,
            usage: self.usage,
            refused: self.refused,
            oversized,
        }
    }
}

/// Adds one streamed `reasoning_details` item: a piece of the item before
/// it (same `index` and `type`) has its strings appended and its other
/// fields (`signature`, `id`, ...) filled in; anything else is a new item.
fn merge_reasoning_detail(details: &mut Vec<serde_json::Value>, piece: serde_json::Value) {
    use serde_json::Value;
    let continues = piece.get("index").is_some()
        && details.last().is_some_and(|last| ["index", "type"].iter().all(|key| last.get(*key) == piece.get(*key)));
    match (details.last_mut(), piece) {
        (Some(Value::Object(last)), Value::Object(piece)) if continues => {
            for (key, value) in piece {
                let appended = ["text", "summary", "data"].contains(&key.as_str());
                match (last.get_mut(&key), value) {
                    (Some(Value::String(existing)), Value::String(more)) if appended => existing.push_str(&more),
                    (_, Value::Null) => {}
                    (_, value) => {
                        last.insert(key, value);
                    }
                }
            }
        }
        (_, piece) => details.push(piece),
    }
}

fn to_usage(usage: WireUsage) -> Usage {
    let output_tokens = match usage.total_tokens {
        Some(total) if usage.completion_tokens == 0 && total > usage.prompt_tokens => total - usage.prompt_tokens,
        _ => usage.completion_tokens,
    };
    Usage { input_tokens: usage.prompt_tokens, output_tokens, cost: usage.cost }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chunk(value: serde_json::Value) -> ChatChunk {
        serde_json::from_value(value).unwrap()
    }

    fn run(chunks: Vec<serde_json::Value>) -> (Vec<ModelEvent>, ModelOutput) {
        let mut decoder = StreamDecoder::new("call_");
        let mut events = Vec::new();
        for value in chunks {
            decoder.push(chunk(value), &mut |e| events.push(e)).unwrap();
        }
        (events, decoder.finish())
    }

    fn delta(d: serde_json::Value) -> serde_json::Value {
        json!({"choices":[{"index":0,"delta":d,"finish_reason":null}]})
    }

    fn finish(reason: &str) -> serde_json::Value {
        json!({"choices":[{"index":0,"delta":{},"finish_reason":reason}]})
    }

    /// Calls written as text are read only when asked for (issue 29): a
    /// decoder that offers tools but does not recover them streams a
    /// `<tool_call>` block as the text it is, at once, and makes no call of
    /// it; one that recovers holds the block back and makes it a call.
    #[test]
    fn calls_written_as_text_are_read_only_when_asked_for() {
        let block = "<tool_call>{\"name\": \"grep\", \"arguments\": {\"pattern\": \"x\"}}</tool_call>";
        for recover in [false, true] {
            let mut decoder = StreamDecoder::new("call_").offering(["grep"]).recovering_text_calls(recover);
            let mut events = Vec::new();
            decoder.push(chunk(delta(json!({"content": block}))), &mut |e| events.push(e)).unwrap();
            assert_eq!(events.len(), usize::from(!recover), "{recover}: {events:?}");
            decoder.end(&mut |e| events.push(e));
            let output = decoder.finish();
            if recover {
                assert_eq!(output.text, "");
                assert_eq!(output.tool_calls.len(), 1);
                assert_eq!(output.text_tool_calls, Some(TextCallFormat::Hermes));
            } else {
                assert_eq!(events, vec![ModelEvent::Text(block.to_owned())]);
                assert_eq!(output.text, block);
                assert!(output.tool_calls.is_empty() && output.text_tool_calls.is_none());
            }
        }
    }

    #[test]
    fn text_and_both_reasoning_spellings() {
        let (events, out) = run(vec![
            delta(json!({"role":"assistant","content":""})),
            delta(json!({"reasoning_content":"think "})),
            delta(json!({"reasoning":"more"})),
            delta(json!({"reasoning_content":"x","reasoning":"x"})),
            delta(json!({"content":"Hel"})),
            delta(json!({"content":"lo","reasoning_content":null})),
            finish("stop"),
            json!({"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}),
        ]);
        assert_eq!(
            events,
            vec![
                ModelEvent::Reasoning("think ".into()),
                ModelEvent::Reasoning("more".into()),
                ModelEvent::Reasoning("x".into()),
                ModelEvent::Text("Hel".into()),
                ModelEvent::Text("lo".into()),
            ]
        );
        assert_eq!(out.text, "Hello");
        assert_eq!(out.reasoning, "think morex");
        assert_eq!(out.finish_reason, FinishReason::Stop);
        assert_eq!(out.usage, Some(Usage { input_tokens: 11, output_tokens: 7, cost: None }));
    }

    /// OpenRouter's `usage.cost` is the request's cost; anything but a
    /// number of 0 or more is no cost, never a failed stream.
    #[test]
    fn usage_may_carry_the_cost() {
        for (cost, expected) in [(json!(0.0021), Some(0.0021)), (json!("0.1"), None), (json!(-1.0), None)] {
            let (_, out) = run(vec![
                finish("stop"),
                json!({"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7,"cost":cost}}),
            ]);
            assert_eq!(out.usage, Some(Usage { input_tokens: 11, output_tokens: 7, cost: expected }), "{cost}");
        }
    }

    #[test]
    fn parallel_tool_calls_interleaved_by_index() {
        let (events, out) = run(vec![
            delta(
                json!({"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"read_file","arguments":""}}]}),
            ),
            delta(
                json!({"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"grep","arguments":"{\"pat"}}]}),
            ),
            delta(json!({"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]})),
            delta(json!({"tool_calls":[{"index":1,"function":{"arguments":"tern\":\"x\"}"}}]})),
            delta(json!({"tool_calls":[{"index":0,"function":{"arguments":"\"a.rs\"}"}}]})),
            finish("tool_calls"),
        ]);
        assert_eq!(
            events,
            vec![
                ModelEvent::ToolCallStarted { position: 0, id: "a".into(), name: "read_file".into() },
                ModelEvent::ToolCallStarted { position: 1, id: "b".into(), name: "grep".into() },
            ]
        );
        assert_eq!(
            out.tool_calls,
            vec![
                ToolCallRequest { id: "a".into(), name: "read_file".into(), arguments: r#"{"path":"a.rs"}"#.into() },
                ToolCallRequest { id: "b".into(), name: "grep".into(), arguments: r#"{"pattern":"x"}"#.into() },
            ]
        );
        assert_eq!(out.finish_reason, FinishReason::ToolCalls);
    }

    #[test]
    fn calls_without_index_or_id_and_whole_object_arguments() {
        let (_, out) = run(vec![
            delta(json!({"tool_calls":[{"id":"x1","function":{"name":"a","arguments":{"k":1}}}]})),
            delta(json!({"tool_calls":[{"id":"x2","function":{"name":"b","arguments":"{}"}}]})),
            delta(json!({"tool_calls":[{"function":{"name":"c"}}]})),
            delta(json!({"tool_calls":[{"function":{"arguments":"{\"z\":2}"}}]})),
        ]);
        let names: Vec<_> =
            out.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str())).collect();
        // The third fragment has no id and no index: it continues the last call.
        assert_eq!(names, vec![("x1", "a", r#"{"k":1}"#), ("x2", "bc", r#"{}{"z":2}"#)]);
        assert_eq!(out.finish_reason, FinishReason::ToolCalls);
    }

    #[test]
    fn every_call_numbered_zero_with_distinct_ids() {
        let (_, out) = run(vec![
            delta(json!({"tool_calls":[{"index":0,"id":"p","function":{"name":"a","arguments":"{}"}}]})),
            delta(json!({"tool_calls":[{"index":0,"id":"q","function":{"name":"b","arguments":"{}"}}]})),
        ]);
        assert_eq!(out.tool_calls.len(), 2);
        assert_eq!(out.tool_calls[1].id, "q");
    }

    #[test]
    fn missing_ids_are_generated_and_empty_arguments_become_an_object() {
        let (events, out) = run(vec![delta(json!({"tool_calls":[{"index":0,"function":{"name":"plan"}}]}))]);
        assert_eq!(events, vec![ModelEvent::ToolCallStarted { position: 0, id: "call_0".into(), name: "plan".into() }]);
        assert_eq!(out.tool_calls[0].id, "call_0");
        assert_eq!(out.tool_calls[0].arguments, "{}");
    }

    #[test]
    fn a_whole_completion_reads_like_a_stream() {
        let (events, out) = run(vec![json!({
            "id":"x","object":"chat.completion",
            "choices":[{"index":0,"message":{"role":"assistant","content":"whole answer"},"finish_reason":"length"}],
            "usage":{"prompt_tokens":3,"completion_tokens":2}
        })]);
        assert_eq!(events, vec![ModelEvent::Text("whole answer".into())]);
        assert_eq!(out.finish_reason, FinishReason::Length);
    }

    /// Issue 11, defect 18: arguments past the cap are counted, not kept.
    #[test]
    fn arguments_past_the_cap_are_dropped() {
        let mut decoder = StreamDecoder::new("call_").max_argument_bytes(10);
        let chunks = [
            json!({"tool_calls":[{"index":0,"id":"big","function":{"name":"write_file","arguments":"{\"content\":"}}]}),
            json!({"tool_calls":[{"index":1,"id":"small","function":{"name":"read_file","arguments":"{}"}}]}),
            json!({"tool_calls":[{"index":0,"function":{"arguments":"\"0123456789\"}"}}]}),
            json!({"tool_calls":[{"index":0,"function":{"arguments":"more"}}]}),
        ];
        for value in chunks {
            decoder.push(chunk(delta(value)), &mut |_| {}).unwrap();
            assert!(decoder.calls[0].arguments.len() <= 10);
        }
        let out = decoder.finish();
        assert_eq!(out.tool_calls[0].arguments, "{}");
        assert_eq!(out.tool_calls[1].arguments, "{}");
        assert_eq!(out.oversized, vec![OversizedCall { index: 0, bytes: 28 }]);
        let (_, out) = run(vec![delta(
            json!({"tool_calls":[{"index":0,"id":"a","function":{"name":"x","arguments":"{\"k\":1}"}}]}),
        )]);
        assert!(out.oversized.is_empty(), "no cap by default");
    }

    #[test]
    fn finish_reasons() {
        for (wire, expected) in [
            ("stop", FinishReason::Stop),
            ("length", FinishReason::Length),
            ("tool_calls", FinishReason::ToolCalls),
            ("content_filter", FinishReason::ContentFilter),
            ("weird", FinishReason::Other("weird".into())),
        ] {
            assert_eq!(run(vec![finish(wire)]).1.finish_reason, expected);
        }
    }

    #[test]
    fn an_error_inside_the_stream_is_reported() {
        let mut decoder = StreamDecoder::new("c");
        let err = decoder
            .push(chunk(json!({"error":{"message":"upstream overloaded","code":502}})), &mut |_| {})
            .unwrap_err();
        assert_eq!(err.0, "upstream overloaded");
    }

    #[test]
    fn refusals_are_text_and_flagged() {
        let (_, out) = run(vec![delta(json!({"refusal":"I can't help with that."}))]);
        assert!(out.refused);
        assert_eq!(out.text, "I can't help with that.");
    }

    #[test]
    fn unknown_fields_and_nulls_are_tolerated() {
        let (_, out) = run(vec![
            json!({"choices":null,"usage":null,"system_fingerprint":"x"}),
            json!({"choices":[{"delta":{"content":"a","tool_calls":null,"audio":{}},"logprobs":null}]}),
            json!({}),
        ]);
        assert_eq!(out.text, "a");
    }
}
