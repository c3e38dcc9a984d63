//! Agent events -> `session/update` notifications, and the tool types the
//! editor sees (kinds, locations, content) in their ACP shapes.
//!
//! Also the one place where text from the model, the workspace or an MCP
//! server is made safe to show: every tool-call title, plan entry and
//! permission option passes through [`shown`] on its way out, so a
//! carriage return, an ANSI escape or a bidi override can never make a
//! title (or a command in a permission request) look like something else.

use std::sync::Arc;

use agent_client_protocol_schema::v1::{
    Content, ContentBlock, ContentChunk, Diff, ImageContent, MessageId, Plan, PlanEntry, PlanEntryPriority,
    PlanEntryStatus, ResourceLink, SessionId, SessionNotification, SessionUpdate, Terminal, ToolCall, ToolCallContent,
    ToolCallLocation, ToolCallStatus as AcpToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
    ToolKind as AcpToolKind, UsageUpdate,
};

use crate::agent::{AgentEvent, EventSink, ToolCallChange, ToolCallStatus};
use crate::rpc::{Outbox, encode_notification};
use crate::session::Journal;
use crate::store::{Chunk, ChunkKind};
use crate::tools::{DisplayContent, Location, PlanItem, PlanPriority, PlanStatus, ToolKind};

/// Sends one session's agent events as `session/update` notifications, and
/// records each in the session's journal so that `session/load` can replay
/// exactly what the user saw: streamed plain-text chunks as their text (the
/// store merges a message's chunks into one record, and the replay sends
/// them as one chunk), every other update byte for byte.
pub struct SessionEvents {
    /// The connection.
    pub outbox: Outbox,
    /// The session the events belong to.
    pub session_id: SessionId,
    /// Where the session's records go, if it is persisted.
    pub journal: Option<Journal>,
}

impl SessionEvents {
    /// Sends (and records) one update.
    pub fn send(&self, update: SessionUpdate) {
        let Some(journal) = &self.journal else {
            if let Some(line) = self.encode(update) {
                self.outbox.send_encoded(line);
            }
            return;
        };
        let chunk = streamed_text(&update);
        let Some(line) = self.encode(update) else { return };
        match chunk {
            // The editor first: the journal's copy, and waking its thread,
            // stay off the path every streamed token takes to the screen.
            Some(chunk) => {
                self.outbox.send_encoded(line);
                journal.record_chunk(chunk);
            }
            None => {
                let mut kept = Vec::with_capacity(line.len() + 1);
                kept.extend_from_slice(&line);
                self.outbox.send_encoded(line);
                journal.record_update_line(kept);
            }
        }
    }

    /// Records an update without sending it (what the user typed: the editor shows it already).
    pub fn record_only(&self, update: SessionUpdate) {
        let Some(journal) = &self.journal else { return };
        match streamed_text(&update) {
            Some(chunk) => journal.record_chunk(chunk),
            None => {
                if let Some(line) = self.encode(update) {
                    journal.record_update_line(line);
                }
            }
        }
    }

    /// Sends an update without recording it (state that is not conversation: commands, options, mode).
    pub fn send_unrecorded(&self, update: SessionUpdate) {
        if let Some(line) = self.encode(update) {
            self.outbox.send_encoded(line);
        }
    }

    fn encode(&self, update: SessionUpdate) -> Option<Vec<u8>> {
        let notification = SessionNotification::new(self.session_id.clone(), update);
        match encode_notification("session/update", &notification) {
            Ok(line) => Some(line),
            Err(err) => {
                tracing::error!(%err, "cannot encode a session update");
                None
            }
        }
    }
}

impl EventSink for SessionEvents {
    fn emit(&self, event: AgentEvent) {
        self.send(to_update(event));
    }
}

/// Records one update of session `session_id` in `journal` the way
/// [`SessionEvents`] does, for a front end that shows it some other way
/// (the terminal's): streamed text as a chunk, anything else as the line an
/// editor would have been sent.
pub fn record(journal: &Journal, session_id: &SessionId, update: SessionUpdate) {
    match streamed_text(&update) {
        Some(chunk) => journal.record_chunk(chunk),
        None => match encode_notification("session/update", &SessionNotification::new(session_id.clone(), update)) {
            Ok(line) => journal.record_update_line(line),
            Err(err) => tracing::error!(%err, "cannot encode a session update"),
        },
    }
}

/// A message chunk of plain text (what streaming sends), as the journal
/// keeps it; `None` for anything else, which is recorded as sent.
fn streamed_text(update: &SessionUpdate) -> Option<Chunk> {
    let (kind, chunk) = match update {
        SessionUpdate::AgentMessageChunk(chunk) => (ChunkKind::Agent, chunk),
        SessionUpdate::AgentThoughtChunk(chunk) => (ChunkKind::Thought, chunk),
        SessionUpdate::UserMessageChunk(chunk) => (ChunkKind::User, chunk),
        _ => return None,
    };
    let ContentBlock::Text(text) = &chunk.content else { return None };
    if chunk.meta.is_some() || text.meta.is_some() || text.annotations.is_some() {
        return None;
    }
    Some(Chunk { kind, message_id: chunk.message_id.as_ref().map(|id| Arc::clone(&id.0)), text: text.text.clone() })
}

/// The `session/update` for an agent event.
pub fn to_update(event: AgentEvent) -> SessionUpdate {
    match event {
        AgentEvent::AgentText { message_id, text } => SessionUpdate::AgentMessageChunk(
            ContentChunk::new(ContentBlock::from(text)).message_id(MessageId::new(message_id)),
        ),
        AgentEvent::AgentThought { message_id, text } => SessionUpdate::AgentThoughtChunk(
            ContentChunk::new(ContentBlock::from(text)).message_id(MessageId::new(message_id)),
        ),
        AgentEvent::ToolCallStarted { id, title, kind } => SessionUpdate::ToolCall(
            ToolCall::new(id, shown(&title, Lines::One)).kind(tool_kind(kind)).status(AcpToolCallStatus::Pending),
        ),
        AgentEvent::ToolCallUpdated { id, change } => {
            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(id, fields(change)))
        }
        AgentEvent::Plan(items) => SessionUpdate::Plan(Plan::new(items.into_iter().map(plan_entry).collect())),
        AgentEvent::Usage { used, size, estimated } => {
            let mut update = UsageUpdate::new(used, size);
            if estimated {
                // The server reported no usage: say that the figure is lathe's estimate.
                let mut meta = serde_json::Map::new();
                meta.insert("lathe".to_owned(), serde_json::json!({ "estimated": true }));
                update = update.meta(meta);
            }
            SessionUpdate::UsageUpdate(update)
        }
    }
}

/// The ACP fields of a tool-call change.
pub fn fields(change: ToolCallChange) -> ToolCallUpdateFields {
    let mut fields = ToolCallUpdateFields::new();
    if let Some(title) = change.title {
        fields = fields.title(shown(&title, Lines::One));
    }
    if let Some(kind) = change.kind {
        fields = fields.kind(tool_kind(kind));
    }
    if let Some(status) = change.status {
        fields = fields.status(match status {
            ToolCallStatus::Pending => AcpToolCallStatus::Pending,
            ToolCallStatus::InProgress => AcpToolCallStatus::InProgress,
            ToolCallStatus::Completed => AcpToolCallStatus::Completed,
            ToolCallStatus::Failed => AcpToolCallStatus::Failed,
        });
    }
    if let Some(content) = change.content {
        fields = fields.content(content.into_iter().map(tool_content).collect::<Vec<_>>());
    }
    if let Some(locations) = change.locations {
        fields = fields.locations(locations.into_iter().map(location).collect::<Vec<_>>());
    }
    if let Some(raw_input) = change.raw_input {
        fields = fields.raw_input(raw_input);
    }
    if let Some(raw_output) = change.raw_output {
        fields = fields.raw_output(raw_output);
    }
    fields
}

/// The ACP tool kind.
pub fn tool_kind(kind: ToolKind) -> AcpToolKind {
    match kind {
        ToolKind::Read => AcpToolKind::Read,
        ToolKind::Edit => AcpToolKind::Edit,
        ToolKind::Delete => AcpToolKind::Delete,
        ToolKind::Move => AcpToolKind::Move,
        ToolKind::Search => AcpToolKind::Search,
        ToolKind::Execute => AcpToolKind::Execute,
        ToolKind::Think => AcpToolKind::Think,
        ToolKind::Fetch => AcpToolKind::Fetch,
        ToolKind::Other => AcpToolKind::Other,
    }
}

/// The ACP tool-call content.
pub fn tool_content(content: DisplayContent) -> ToolCallContent {
    match content {
        DisplayContent::Text(text) => ToolCallContent::Content(Content::new(ContentBlock::from(text))),
        DisplayContent::Diff { path, old_text, new_text } => {
            ToolCallContent::Diff(Diff::new(wire_path(&path), new_text).old_text(old_text))
        }
        DisplayContent::Terminal(id) => ToolCallContent::Terminal(Terminal::new(id)),
        DisplayContent::Image { data, mime_type } => {
            ToolCallContent::Content(Content::new(ContentBlock::Image(ImageContent::new(data, mime_type))))
        }
        DisplayContent::ResourceLink { uri, name } => {
            ToolCallContent::Content(Content::new(ContentBlock::ResourceLink(ResourceLink::new(name, uri))))
        }
    }
}

/// The ACP location.
pub fn location(location: Location) -> ToolCallLocation {
    ToolCallLocation::new(wire_path(&location.path)).line(location.line)
}

/// A path as JSON can carry it. File names need not be UTF-8, but JSON
/// strings must be: an unrepresentable byte becomes U+FFFD rather than the
/// whole update failing to encode (and the editor never hearing of the call).
fn wire_path(path: &std::path::Path) -> std::path::PathBuf {
    match path.to_str() {
        Some(_) => path.to_path_buf(),
        None => std::path::PathBuf::from(path.to_string_lossy().into_owned()),
    }
}

fn plan_entry(item: PlanItem) -> PlanEntry {
    let priority = match item.priority {
        PlanPriority::High => PlanEntryPriority::High,
        PlanPriority::Medium => PlanEntryPriority::Medium,
        PlanPriority::Low => PlanEntryPriority::Low,
    };
    let status = match item.status {
        PlanStatus::Pending => PlanEntryStatus::Pending,
        PlanStatus::InProgress => PlanEntryStatus::InProgress,
        PlanStatus::Completed => PlanEntryStatus::Completed,
    };
    PlanEntry::new(shown(&item.content, Lines::One), priority, status)
}

/// Whether text shown may keep its line breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// A title or a label: one line; line breaks and tabs are escaped too.
    One,
    /// A block (a command in a permission request): `\n` and `\t` stay.
    Many,
}

/// `text` with everything that could hide or disguise what it says made
/// visible as an escape (`\u{1b}`, `\u{202e}`, and `\n`, `\r`, `\t`): C0
/// and C1 control characters and DEL (so no ANSI sequence, carriage return
/// or backspace reaches the screen), bidi overrides, embeddings, isolates and
/// marks (U+202A-U+202E, U+2066-U+2069, U+200E, U+200F, U+061C), and the
/// other invisible format characters: zero-width spaces and joiners, line
/// and paragraph separators, the word joiner and invisible operators, the
/// BOM, interlinear annotation marks and Unicode tags (U+E0000-U+E007F).
pub fn shown(text: &str, lines: Lines) -> std::borrow::Cow<'_, str> {
    let hidden = |c: char| match c {
        '\n' | '\t' => lines == Lines::One,
        _ => is_hidden(c),
    };
    if !text.chars().any(hidden) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !hidden(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            other => out.push_str(&format!("\\u{{{:x}}}", u32::from(other))),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Characters that change what text looks like without being seen.
fn is_hidden(c: char) -> bool {
    matches!(
        c,
        '\u{0}'..='\u{1f}'
            | '\u{7f}'..='\u{9f}'
            | '\u{ad}'
            | '\u{61c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{e0000}'..='\u{e007f}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_characters_are_escaped() {
        let table = [
            ("Run `cargo test`", Lines::One, "Run `cargo test`"),
            ("Run `git status\ntouch PWN`", Lines::One, "Run `git status\\ntouch PWN`"),
            ("a\rb\tc", Lines::One, "a\\rb\\tc"),
            ("\u{1b}[31mred\u{1b}[0m", Lines::One, "\\u{1b}[31mred\\u{1b}[0m"),
            ("\u{1b}]8;;http://evil\u{7}x", Lines::One, "\\u{1b}]8;;http://evil\\u{7}x"),
            ("rm -rf /\u{8}\u{8}\u{8}", Lines::One, "rm -rf /\\u{8}\\u{8}\\u{8}"),
            ("Read a\u{202e}txt.exe", Lines::One, "Read a\\u{202e}txt.exe"),
            ("x\u{2066}y\u{2069}", Lines::One, "x\\u{2066}y\\u{2069}"),
            ("zero\u{200b}width\u{feff}", Lines::One, "zero\\u{200b}width\\u{feff}"),
            ("tag\u{e0041}", Lines::One, "tag\\u{e0041}"),
            ("c1\u{9b}31m", Lines::One, "c1\\u{9b}31m"),
            ("del\u{7f}", Lines::One, "del\\u{7f}"),
            ("line\u{2028}sep", Lines::One, "line\\u{2028}sep"),
            ("git status\ntouch PWN\n", Lines::Many, "git status\ntouch PWN\n"),
            ("a\tb\r\n", Lines::Many, "a\tb\\r\n"),
            ("x\u{1b}[2Ky", Lines::Many, "x\\u{1b}[2Ky"),
            ("日本語 עברית émoji 🦀", Lines::One, "日本語 עברית émoji 🦀"),
        ];
        for (text, lines, expected) in table {
            assert_eq!(shown(text, lines), expected, "{text:?}");
        }
    }
}
