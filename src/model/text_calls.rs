//! Tool calls a model wrote as answer text, because its server has no
//! parser for its format (llama.cpp without a matching template, older
//! Ollama models, vLLM without `--tool-call-parser`): Hermes/Qwen
//! `<tool_call>{…}</tool_call>`, Llama 3 `<|python_tag|>{…}` or a bare
//! `{"name": …, "parameters": …}`, Mistral `[TOOL_CALLS][…]` or
//! `[TOOL_CALLS]name[ARGS]{…}`.
//!
//! A call is recovered only when tools were offered, the whole answer is
//! such a block (whitespace aside), and every call in it names an offered
//! tool with a JSON object of arguments: prose that mentions a tool, or a
//! block followed by more text, stays text. While an answer may still turn
//! out to be a block, [`TextCallGate`] holds it back so the user does not
//! watch raw markup stream by. Pure: no I/O.

use serde_json::Value;

/// The format a call was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextCallFormat {
    /// `<tool_call>{"name": …, "arguments": {…}}</tool_call>` (Hermes, Qwen).
    Hermes,
    /// `<|python_tag|>{"name": …, "parameters": {…}}`, or the bare JSON object (Llama 3).
    Llama,
    /// `[TOOL_CALLS][{"name": …, "arguments": {…}}]` or `[TOOL_CALLS]name[ARGS]{…}` (Mistral).
    Mistral,
}

impl TextCallFormat {
    /// A name for logs.
    pub fn name(self) -> &'static str {
        match self {
            TextCallFormat::Hermes => "Hermes <tool_call>",
            TextCallFormat::Llama => "Llama 3 JSON",
            TextCallFormat::Mistral => "Mistral [TOOL_CALLS]",
        }
    }
}

/// One recovered call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextCall {
    /// The id the model gave it (Mistral does), if any.
    pub id: Option<String>,
    /// The tool's name.
    pub name: String,
    /// The arguments as compact JSON text.
    pub arguments: String,
}

const HERMES_OPEN: &str = "<tool_call>";
const HERMES_CLOSE: &str = "</tool_call>";
const PYTHON_TAG: &str = "<|python_tag|>";
const MISTRAL_TAG: &str = "[TOOL_CALLS]";
const MISTRAL_ARGS: &str = "[ARGS]";
const MISTRAL_CALL_ID: &str = "[CALL_ID]";

/// How an answer may begin when it is a call written as text.
const MARKERS: [&str; 4] = [HERMES_OPEN, PYTHON_TAG, MISTRAL_TAG, "{"];

/// The calls `text` is made of, if it is nothing but calls to tools for
/// which `offered` holds.
pub fn parse(text: &str, offered: impl Fn(&str) -> bool) -> Option<(TextCallFormat, Vec<TextCall>)> {
    let text = text.trim();
    let (format, calls) = if text.starts_with(HERMES_OPEN) {
        (TextCallFormat::Hermes, hermes(text)?)
    } else if let Some(rest) = text.strip_prefix(PYTHON_TAG) {
        (TextCallFormat::Llama, json_objects(rest)?)
    } else if let Some(rest) = text.strip_prefix(MISTRAL_TAG) {
        (TextCallFormat::Mistral, mistral(rest)?)
    } else if text.starts_with('{') {
        (TextCallFormat::Llama, json_objects(text)?)
    } else {
        return None;
    };
    (!calls.is_empty() && calls.iter().all(|call| offered(&call.name))).then_some((format, calls))
}

/// `<tool_call>…</tool_call>` blocks separated by whitespace; the last one
/// may lack its closing tag (servers that stop on it).
fn hermes(text: &str) -> Option<Vec<TextCall>> {
    let mut calls = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let body = rest.strip_prefix(HERMES_OPEN)?;
        let (inner, after) = match body.find(HERMES_CLOSE) {
            Some(at) => (&body[..at], &body[at + HERMES_CLOSE.len()..]),
            None => (body, ""),
        };
        calls.push(call_object(&serde_json::from_str(inner.trim()).ok()?, false)?);
        rest = after.trim_start();
    }
    Some(calls)
}

/// One or more JSON call objects separated by whitespace or `;`.
fn json_objects(text: &str) -> Option<Vec<TextCall>> {
    let mut calls = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        let value = values.next()?.ok()?;
        calls.push(call_object(&value, true)?);
        rest = rest[values.byte_offset()..].trim_start().trim_start_matches(';').trim_start();
    }
    Some(calls)
}

/// A JSON array of call objects, or `name[ARGS]{…}` segments separated by
/// `[TOOL_CALLS]` (with `[CALL_ID]id` after the name in newer tokenizers).
fn mistral(text: &str) -> Option<Vec<TextCall>> {
    let text = text.trim_start();
    if text.starts_with('[') {
        let calls: Vec<Value> = serde_json::from_str(text).ok()?;
        return calls.iter().map(|call| call_object(call, false)).collect();
    }
    text.split(MISTRAL_TAG)
        .map(|segment| {
            let (head, arguments) = segment.split_once(MISTRAL_ARGS)?;
            let (name, id) = match head.split_once(MISTRAL_CALL_ID) {
                Some((name, id)) => (name, Some(id.trim().to_owned())),
                None => (head, None),
            };
            let arguments: Value = serde_json::from_str(arguments.trim()).ok()?;
            Some(TextCall { id, name: valid_name(name)?, arguments: object_text(&arguments)? })
        })
        .collect()
}

/// `{"name": …, "arguments" | "parameters": {…}}`, with an optional `id`
/// (and `type`). `strict`: nothing else may be in it, since a bare object
/// could be an answer that happens to have a `name`.
fn call_object(value: &Value, strict: bool) -> Option<TextCall> {
    let object = value.as_object()?;
    let name = valid_name(object.get("name")?.as_str()?)?;
    let arguments = object.get("arguments").or_else(|| object.get("parameters"))?;
    let arguments = match arguments {
        Value::String(text) => object_text(&serde_json::from_str(text).ok()?)?,
        other => object_text(other)?,
    };
    let id = object.get("id").and_then(Value::as_str).map(str::to_owned);
    let known = ["name", "arguments", "parameters", "id", "type"];
    if strict && object.keys().any(|key| !known.contains(&key.as_str())) {
        return None;
    }
    Some(TextCall { id, name, arguments })
}

fn object_text(value: &Value) -> Option<String> {
    value.is_object().then(|| value.to_string())
}

fn valid_name(name: &str) -> Option<String> {
    let name = name.trim();
    let valid = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    valid.then(|| name.to_owned())
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// Only whitespace, or the start of a marker, so far.
    #[default]
    Undecided,
    /// The answer began with a marker: held back until it ends.
    Holding,
    /// The answer is text: everything passes through.
    Open,
}

/// Holds an answer back while it may be a call written as text.
#[derive(Debug, Default)]
pub struct TextCallGate {
    state: Gate,
    held: String,
}

impl TextCallGate {
    /// A gate that holds nothing back (no tools were offered).
    pub fn open() -> Self {
        Self { state: Gate::Open, held: String::new() }
    }

    /// Takes the next piece of answer text; returns what the user may see now.
    pub fn push(&mut self, piece: String) -> Option<String> {
        match self.state {
            Gate::Open => Some(piece),
            Gate::Holding => {
                self.held.push_str(&piece);
                None
            }
            Gate::Undecided => {
                self.held.push_str(&piece);
                let start = self.held.trim_start();
                if start.is_empty() || MARKERS.iter().any(|marker| marker.starts_with(start)) {
                    None
                } else if MARKERS.iter().any(|marker| start.starts_with(marker)) {
                    self.state = Gate::Holding;
                    None
                } else {
                    self.state = Gate::Open;
                    Some(std::mem::take(&mut self.held))
                }
            }
        }
    }

    /// The text held back (at the end of the answer).
    pub fn take_held(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered(name: &str) -> bool {
        ["read_file", "grep"].contains(&name)
    }

    /// An answer nested 100,000 deep in any of the formats (issue 29) stays
    /// text: serde_json stops at 128 levels.
    #[test]
    fn deeply_nested_answers_stay_text() {
        let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        for text in [
            format!("<tool_call>{{\"name\":\"grep\",\"arguments\":{{\"pattern\":{deep}}}}}</tool_call>"),
            format!("{{\"name\":\"grep\",\"parameters\":{{\"pattern\":{deep}}}}}"),
            format!("<|python_tag|>{deep}"),
            format!("[TOOL_CALLS]{deep}"),
            format!("[TOOL_CALLS]grep[ARGS]{deep}"),
        ] {
            assert_eq!(parse(&text, offered), None);
        }
    }

    fn call(name: &str, arguments: &str) -> TextCall {
        TextCall { id: None, name: name.into(), arguments: arguments.into() }
    }

    #[test]
    fn each_format_is_recovered() {
        let read = call("read_file", r#"{"path":"a.rs"}"#);
        let cases = [
            (
                "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.rs\"}}\n</tool_call>",
                TextCallFormat::Hermes,
                vec![read.clone()],
            ),
            (
                "<tool_call>{\"name\":\"read_file\",\"arguments\":{\"path\":\"a.rs\"}}</tool_call>\n<tool_call>{\"name\":\"grep\",\"arguments\":\"{\\\"pattern\\\":\\\"x\\\"}\"}",
                TextCallFormat::Hermes,
                vec![read.clone(), call("grep", r#"{"pattern":"x"}"#)],
            ),
            (
                "<|python_tag|>{\"name\": \"read_file\", \"parameters\": {\"path\": \"a.rs\"}}",
                TextCallFormat::Llama,
                vec![read.clone()],
            ),
            (
                "{\"type\": \"function\", \"name\": \"read_file\", \"parameters\": {\"path\": \"a.rs\"}}",
                TextCallFormat::Llama,
                vec![read.clone()],
            ),
            (
                "[TOOL_CALLS][{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.rs\"}, \"id\": \"abc123XYZ\"}]",
                TextCallFormat::Mistral,
                vec![TextCall { id: Some("abc123XYZ".into()), ..read.clone() }],
            ),
            (
                "[TOOL_CALLS]read_file[ARGS]{\"path\": \"a.rs\"}[TOOL_CALLS]grep[CALL_ID]k9[ARGS]{\"pattern\":\"x\"}",
                TextCallFormat::Mistral,
                vec![read.clone(), TextCall { id: Some("k9".into()), ..call("grep", r#"{"pattern":"x"}"#) }],
            ),
        ];
        for (text, format, calls) in cases {
            assert_eq!(parse(text, offered), Some((format, calls)), "{text}");
        }
    }

    #[test]
    fn prose_and_near_misses_stay_text() {
        for text in [
            "I will call read_file on a.rs next.",
            "<tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.rs\"}}</tool_call> Then I will grep.",
            "<tool_call>{\"name\": \"delete_everything\", \"arguments\": {}}</tool_call>",
            "<tool_call>{\"name\": \"read_file\", \"arguments\": [1]}</tool_call>",
            "<tool_call>not json</tool_call>",
            "{\"name\": \"read_file\", \"parameters\": {\"path\": \"a.rs\"}, \"note\": \"an answer\"}",
            "{\"name\": \"Bob\", \"age\": 3}",
            "[TOOL_CALLS]read_file",
            "",
        ] {
            assert_eq!(parse(text, offered), None, "{text}");
        }
    }

    #[test]
    fn the_gate_holds_only_what_may_be_a_call() {
        let mut gate = TextCallGate::default();
        assert_eq!(gate.push("  <tool".into()), None);
        assert_eq!(gate.push("_call>{".into()), None);
        assert_eq!(gate.push("}</tool_call>".into()), None);
        assert_eq!(gate.take_held(), "  <tool_call>{}</tool_call>");

        let mut gate = TextCallGate::default();
        assert_eq!(gate.push("\n<".into()), None, "may be a tag");
        assert_eq!(gate.push("b>bold".into()), Some("\n<b>bold".into()));
        assert_eq!(gate.push(" text".into()), Some(" text".into()));
        assert_eq!(gate.take_held(), "");

        let mut gate = TextCallGate::open();
        assert_eq!(gate.push("{\"a\":1}".into()), Some("{\"a\":1}".into()));
    }
}
