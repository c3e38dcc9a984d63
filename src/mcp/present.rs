//! How an MCP tool call looks: its title, kind and permission preview before
//! it runs, and its result afterwards, for the user (tool-call content: text,
//! images, resource links) and for the model (text). Pure.

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents, Tool};
use serde_json::{Map, Value};

use super::catalog::cap_chars;
use crate::tools::{DisplayContent, OutcomeStatus, ToolKind, ToolOutcome};

/// Characters of the argument summary in a title.
const SUMMARY_CHARS: usize = 80;

/// Characters of one argument value in a title.
const VALUE_CHARS: usize = 40;

/// Characters of the arguments shown when asking for permission.
const PREVIEW_CHARS: usize = 4000;

/// Characters of one text part shown in the editor (the model's copy is
/// capped by the turn).
const SHOWN_TEXT_CHARS: usize = 64 * 1024;

/// Base64 characters of an image shown in the editor; a larger one is described.
const SHOWN_IMAGE_CHARS: usize = 8 * 1024 * 1024;

/// The name shown for a tool: its annotated title, else its title, else its name.
pub(super) fn display_name(tool: &Tool) -> String {
    tool.annotations
        .as_ref()
        .and_then(|annotations| annotations.title.clone())
        .or_else(|| tool.title.clone())
        .filter(|title| !title.trim().is_empty())
        .unwrap_or_else(|| tool.name.to_string())
}

/// The title of a call: the tool's name, its server, and a short summary of
/// the arguments, e.g. `Search (docs): query="tokio select"`.
pub(super) fn title(server: &str, tool: &Tool, arguments: &Map<String, Value>) -> String {
    let head = format!("{} ({server})", display_name(tool));
    let summary = summary(arguments);
    if summary.is_empty() { head } else { format!("{head}: {summary}") }
}

fn summary(arguments: &Map<String, Value>) -> String {
    let parts: Vec<String> = arguments
        .iter()
        .map(|(name, value)| {
            let shown = match value {
                Value::String(text) => format!("\"{}\"", cap_chars(&text.replace(['\n', '\r'], " "), VALUE_CHARS)),
                Value::Array(items) if items.is_empty() => "[]".to_owned(),
                Value::Array(_) => "[…]".to_owned(),
                Value::Object(_) => "{…}".to_owned(),
                other => cap_chars(&other.to_string(), VALUE_CHARS),
            };
            format!("{name}={shown}")
        })
        .collect();
    cap_chars(&parts.join(", "), SUMMARY_CHARS)
}

/// The kind shown for a tool, from its annotations (hints the server gives):
/// read-only tools read (or fetch, when they reach an open world), explicitly
/// destructive ones delete, explicitly additive ones edit; the rest is `other`.
pub(super) fn kind(tool: &Tool) -> ToolKind {
    let Some(annotations) = &tool.annotations else { return ToolKind::Other };
    match (annotations.read_only_hint, annotations.destructive_hint, annotations.open_world_hint) {
        (Some(true), _, Some(true)) => ToolKind::Fetch,
        (Some(true), _, _) => ToolKind::Read,
        (_, Some(true), _) => ToolKind::Delete,
        (_, Some(false), _) => ToolKind::Edit,
        _ => ToolKind::Other,
    }
}

/// Whether the server says the tool changes nothing.
pub(super) fn read_only(tool: &Tool) -> bool {
    tool.annotations.as_ref().and_then(|annotations| annotations.read_only_hint).unwrap_or(false)
}

/// What the user sees when asked: which tool of which server, and the arguments.
pub(super) fn preview(server: &str, tool: &Tool, arguments: &Map<String, Value>) -> Vec<DisplayContent> {
    let json = serde_json::to_string_pretty(arguments).unwrap_or_default();
    vec![DisplayContent::Text(format!(
        "MCP server `{server}`, tool `{}`:\n\n```json\n{}\n```",
        tool.name,
        cap_chars(&json, PREVIEW_CHARS)
    ))]
}

/// A call's result as an outcome: every content part shown (text as text,
/// images as images, embedded resources as text or a description, resource
/// links as links), and for the model the text parts, a description of the
/// others, and the structured content as JSON when there is no text.
/// `isError` makes it a failure the model reads.
pub(super) fn outcome(result: CallToolResult) -> ToolOutcome {
    let mut for_model: Vec<String> = Vec::new();
    let mut shown: Vec<DisplayContent> = Vec::new();
    let mut has_text = false;
    for block in result.content {
        match block {
            ContentBlock::Text(text) => {
                has_text = true;
                shown.push(DisplayContent::Text(cap_chars(&text.text, SHOWN_TEXT_CHARS)));
                for_model.push(text.text);
            }
            ContentBlock::Image(image) => {
                let about = format!("[image: {}, {}]", image.mime_type, size(&image.data));
                shown.push(if image.data.len() <= SHOWN_IMAGE_CHARS {
                    DisplayContent::Image { data: image.data, mime_type: image.mime_type }
                } else {
                    DisplayContent::Text(about.clone())
                });
                for_model.push(about);
            }
            ContentBlock::Audio(audio) => {
                let about = format!("[audio: {}, {}]", audio.mime_type, size(&audio.data));
                shown.push(DisplayContent::Text(about.clone()));
                for_model.push(about);
            }
            ContentBlock::Resource(embedded) => match embedded.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    shown.push(DisplayContent::Text(format!(
                        "`{uri}`\n\n```\n{}\n```",
                        cap_chars(&text, SHOWN_TEXT_CHARS)
                    )));
                    for_model.push(format!("[resource {uri}]\n{text}"));
                }
                ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => {
                    let mime_type = mime_type.unwrap_or_else(|| "application/octet-stream".to_owned());
                    let about = format!("[binary resource {uri}: {mime_type}, {}]", size(&blob));
                    shown.push(if mime_type.starts_with("image/") && blob.len() <= SHOWN_IMAGE_CHARS {
                        DisplayContent::Image { data: blob, mime_type }
                    } else {
                        DisplayContent::Text(about.clone())
                    });
                    for_model.push(about);
                }
                // A resource kind newer than this code.
                _ => for_model.push("[a resource of a kind lathe does not know]".to_owned()),
            },
            ContentBlock::ResourceLink(link) => {
                for_model.push(format!("[resource link: {} <{}>]", link.name, link.uri));
                shown.push(DisplayContent::ResourceLink { uri: link.uri, name: link.name });
            }
            // A content kind newer than this code.
            _ => for_model.push("[content of a kind lathe does not know]".to_owned()),
        }
    }
    if !has_text && let Some(structured) = &result.structured_content {
        let json = serde_json::to_string_pretty(structured).unwrap_or_default();
        shown.push(DisplayContent::Text(format!("```json\n{}\n```", cap_chars(&json, SHOWN_TEXT_CHARS))));
        for_model.push(json);
    }
    if for_model.is_empty() {
        for_model.push("(The tool returned no content.)".to_owned());
    }
    let text = for_model.join("\n");
    let failed = result.is_error == Some(true);
    if shown.is_empty() {
        shown.push(DisplayContent::Text(text.clone()));
    }
    ToolOutcome {
        status: if failed { OutcomeStatus::Failed } else { OutcomeStatus::Completed },
        for_model: if failed { format!("The tool reported an error:\n{text}") } else { text },
        content: shown,
        locations: None,
        raw_output: result.structured_content,
    }
}

/// The decoded size of base64 data, roughly, for people.
fn size(base64: &str) -> String {
    let bytes = base64.len() / 4 * 3;
    if bytes < 10 * 1024 { format!("{bytes} bytes") } else { format!("{} KiB", bytes / 1024) }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rmcp::model::{EmbeddedResource, Resource, ToolAnnotations};
    use serde_json::json;

    use super::*;

    fn tool() -> Tool {
        Tool::new("search", "Search.", Arc::new(Map::new()))
    }

    fn args(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn titles_name_the_tool_the_server_and_the_arguments() {
        let mut titled = tool();
        titled.annotations = Some(ToolAnnotations::with_title("Search the docs"));
        let arguments = args(json!({"query": "tokio select", "limit": 3, "filters": {"a": 1}}));
        assert_eq!(
            title("docs", &titled, &arguments),
            r#"Search the docs (docs): query="tokio select", limit=3, filters={…}"#
        );
        assert_eq!(title("docs", &tool(), &Map::new()), "search (docs)");
        let long = args(json!({"text": "x".repeat(500)}));
        assert!(title("docs", &tool(), &long).chars().count() < 120);
    }

    #[test]
    fn kinds_follow_the_annotations() {
        let with = |annotations: ToolAnnotations| {
            let mut tool = tool();
            tool.annotations = Some(annotations);
            kind(&tool)
        };
        assert_eq!(kind(&tool()), ToolKind::Other);
        assert_eq!(with(ToolAnnotations::new().read_only(true)), ToolKind::Read);
        let mut open = ToolAnnotations::new().read_only(true);
        open.open_world_hint = Some(true);
        assert_eq!(with(open), ToolKind::Fetch);
        assert_eq!(with(ToolAnnotations::new().destructive(true)), ToolKind::Delete);
        assert_eq!(with(ToolAnnotations::new().destructive(false)), ToolKind::Edit);
        assert!(read_only(&{
            let mut t = tool();
            t.annotations = Some(ToolAnnotations::new().read_only(true));
            t
        }));
        assert!(!read_only(&tool()));
    }

    #[test]
    fn results_are_shown_and_told() {
        let result = CallToolResult::success(vec![
            ContentBlock::text("hello"),
            ContentBlock::image("aGVsbG8=", "image/png"),
            ContentBlock::Resource(EmbeddedResource::new(ResourceContents::text("body", "file:///a.txt"))),
            ContentBlock::resource_link(Resource::new("file:///b.txt", "b.txt")),
        ]);
        let outcome = outcome(result);
        assert_eq!(outcome.status, OutcomeStatus::Completed);
        assert_eq!(
            outcome.for_model,
            "hello\n[image: image/png, 6 bytes]\n[resource file:///a.txt]\nbody\n[resource link: b.txt <file:///b.txt>]"
        );
        assert_eq!(outcome.content[0], DisplayContent::Text("hello".to_owned()));
        assert_eq!(
            outcome.content[1],
            DisplayContent::Image { data: "aGVsbG8=".to_owned(), mime_type: "image/png".to_owned() }
        );
        assert_eq!(
            outcome.content[3],
            DisplayContent::ResourceLink { uri: "file:///b.txt".to_owned(), name: "b.txt".to_owned() }
        );
    }

    #[test]
    fn structured_content_speaks_when_there_is_no_text() {
        let mut result = CallToolResult::success(Vec::new());
        result.structured_content = Some(json!({"temperature": 21}));
        let outcome = outcome(result);
        assert_eq!(outcome.for_model, "{\n  \"temperature\": 21\n}");
        assert_eq!(outcome.raw_output, Some(json!({"temperature": 21})));
        let empty = super::outcome(CallToolResult::success(Vec::new()));
        assert_eq!(empty.for_model, "(The tool returned no content.)");
    }

    #[test]
    fn errors_are_failures_the_model_reads() {
        let outcome = outcome(CallToolResult::error(vec![ContentBlock::text("no such page")]));
        assert_eq!(outcome.status, OutcomeStatus::Failed);
        assert_eq!(outcome.for_model, "The tool reported an error:\nno such page");
        assert_eq!(outcome.content, vec![DisplayContent::Text("no such page".to_owned())]);
    }
}
