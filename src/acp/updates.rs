//! Agent events -> `session/update` notifications, and the tool types the
//! editor sees (kinds, locations, content) in their ACP shapes.

use agent_client_protocol_schema::v1::{
    Content, ContentBlock, ContentChunk, Diff, MessageId, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus,
    SessionId, SessionNotification, SessionUpdate, Terminal, ToolCall, ToolCallContent, ToolCallLocation,
    ToolCallStatus as AcpToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind as AcpToolKind, UsageUpdate,
};

use crate::agent::{AgentEvent, EventSink, ToolCallChange, ToolCallStatus};
use crate::rpc::Outbox;
use crate::tools::{DisplayContent, Location, PlanItem, PlanPriority, PlanStatus, ToolKind};

/// Sends one session's agent events as `session/update` notifications.
pub struct SessionEvents {
    /// The connection.
    pub outbox: Outbox,
    /// The session the events belong to.
    pub session_id: SessionId,
}

impl SessionEvents {
    /// Sends one update.
    pub fn send(&self, update: SessionUpdate) {
        self.outbox.notify("session/update", &SessionNotification::new(self.session_id.clone(), update));
    }
}

impl EventSink for SessionEvents {
    fn emit(&self, event: AgentEvent) {
        self.send(to_update(event));
    }
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
        AgentEvent::ToolCallStarted { id, title, kind } => {
            SessionUpdate::ToolCall(ToolCall::new(id, title).kind(tool_kind(kind)).status(AcpToolCallStatus::Pending))
        }
        AgentEvent::ToolCallUpdated { id, change } => {
            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(id, fields(change)))
        }
        AgentEvent::Plan(items) => SessionUpdate::Plan(Plan::new(items.into_iter().map(plan_entry).collect())),
        AgentEvent::Usage { used, size } => SessionUpdate::UsageUpdate(UsageUpdate::new(used, size)),
    }
}

/// The ACP fields of a tool-call change.
pub fn fields(change: ToolCallChange) -> ToolCallUpdateFields {
    let mut fields = ToolCallUpdateFields::new();
    if let Some(title) = change.title {
        fields = fields.title(title);
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
            ToolCallContent::Diff(Diff::new(path, new_text).old_text(old_text))
        }
        DisplayContent::Terminal(id) => ToolCallContent::Terminal(Terminal::new(id)),
    }
}

/// The ACP location.
pub fn location(location: Location) -> ToolCallLocation {
    ToolCallLocation::new(location.path).line(location.line)
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
    PlanEntry::new(item.content, priority, status)
}
