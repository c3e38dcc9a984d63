//! A stored session read back from its journal: what `session/load` replays
//! (what the user saw: the logged updates, consecutive chunks of one message
//! merged into one chunk, state updates that are not conversation left out,
//! the last usage figure last), and the model transcript the session
//! continues from, for the editor's `session/load` and `session/resume` and
//! the terminal's `--resume` alike.

use std::borrow::Cow;
use std::sync::Arc;

use agent_client_protocol_schema::v1::{
    ContentBlock, ContentChunk, MessageId, SessionId, SessionNotification, SessionUpdate,
};

use serde_json::{Value, json};

use super::record::{self, Offers};
use crate::model::{Message, UserPart};
use crate::rpc::encode_notification;
use crate::store::{ChunkKind, Record, SessionMeta, Store, StoreError};

/// Update kinds that are state rather than conversation: not replayed
/// (the last usage figure is, at the end).
const NOT_REPLAYED: [&str; 5] =
    ["available_commands_update", "current_mode_update", "config_option_update", "session_info_update", "usage_update"];

/// What a logged update line says about itself: just enough to filter and
/// merge it, read without building a tree.
#[derive(serde::Deserialize)]
struct UpdatePeek<'a> {
    #[serde(borrow)]
    params: ParamsPeek<'a>,
}

#[derive(serde::Deserialize)]
struct ParamsPeek<'a> {
    #[serde(borrow)]
    update: InnerPeek<'a>,
}

/// Whose a logged update line is, and of what kind, whatever its content.
#[derive(serde::Deserialize)]
struct HeadPeek<'a> {
    #[serde(borrow)]
    params: HeadParams<'a>,
}

#[derive(serde::Deserialize)]
struct HeadParams<'a> {
    #[serde(rename = "sessionId", borrow, default)]
    session_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    update: HeadUpdate<'a>,
}

#[derive(serde::Deserialize)]
struct HeadUpdate<'a> {
    #[serde(rename = "sessionUpdate", borrow)]
    kind: Cow<'a, str>,
}

#[derive(serde::Deserialize)]
struct InnerPeek<'a> {
    #[serde(rename = "sessionUpdate", borrow)]
    kind: Cow<'a, str>,
    #[serde(rename = "messageId", borrow, default)]
    message_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<ContentPeek<'a>>,
    #[serde(rename = "_meta", default)]
    meta: Option<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize)]
struct ContentPeek<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(default)]
    annotations: Option<serde::de::IgnoredAny>,
    #[serde(rename = "_meta", default)]
    meta: Option<serde::de::IgnoredAny>,
}

fn chunk_kind(update: &str) -> Option<ChunkKind> {
    match update {
        "agent_message_chunk" => Some(ChunkKind::Agent),
        "agent_thought_chunk" => Some(ChunkKind::Thought),
        "user_message_chunk" => Some(ChunkKind::User),
        _ => None,
    }
}

/// A stored session's metadata and the model transcript it continues from
/// (what `session/resume` starts from; nothing is replayed), for a front end
/// that shows no replay. Blocking: it reads the log.
pub fn stored_transcript(store: &Store, id: &str) -> Result<(SessionMeta, Restored), StoreError> {
    let mut replayer = Replayer::new(SessionId::new(id), None);
    let meta = store.read(id, &mut |record| replayer.record(record))?;
    Ok((meta, replayer.finish()))
}

/// Consecutive text of one message being merged for the replay.
struct Held {
    kind: ChunkKind,
    message_id: Option<Arc<str>>,
    text: String,
    /// The line as it was sent, while the run is that one line.
    sent: Option<Vec<u8>>,
}

/// Turns a session's log, record by record, into what `session/load`
/// replays (what the user saw: the logged updates, consecutive chunks of one
/// message merged, state updates left out, the last usage figure last) and
/// the model transcript it continues from (repaired if the process died
/// mid-turn).
pub(crate) struct Replayer<'a> {
    session_id: SessionId,
    /// Where replay lines go; `None` for `session/resume`.
    send: Option<&'a mut dyn FnMut(Vec<u8>)>,
    /// What the loading client shows of the newer updates: the others are
    /// replayed the way it would have been sent them.
    offers: Offers,
    held: Option<Held>,
    last_usage: Option<Vec<u8>>,
    messages: Vec<Message>,
    /// Steering messages waiting, as last journaled.
    waiting: Vec<Vec<UserPart>>,
    /// Answer text the user saw after the last transcript change.
    streamed: String,
}

/// What a stored session goes on from.
#[derive(Debug, Default)]
pub struct Restored {
    /// The model transcript (repaired if the process died mid-turn).
    pub messages: Vec<Message>,
    /// Steering messages no turn had read yet.
    pub waiting: Vec<Vec<UserPart>>,
    /// What its requests had cost, from the last usage figure, when known.
    pub cost: Option<f64>,
}

impl<'a> Replayer<'a> {
    pub(crate) fn new(session_id: SessionId, send: Option<&'a mut dyn FnMut(Vec<u8>)>) -> Self {
        Self {
            session_id,
            send,
            offers: Offers::ALL,
            held: None,
            last_usage: None,
            messages: Vec::new(),
            waiting: Vec::new(),
            streamed: String::new(),
        }
    }

    /// Replays for a client that shows `offers`.
    pub(crate) fn offering(mut self, offers: Offers) -> Self {
        self.offers = offers;
        self
    }

    pub(crate) fn record(&mut self, record: Record) {
        match record {
            Record::Message(message) => {
                self.messages.push(message);
                self.streamed.clear();
            }
            Record::Reset(replacement) => {
                self.messages = replacement;
                self.streamed.clear();
            }
            Record::Rewind(keep) => {
                self.messages.truncate(keep);
                self.streamed.clear();
            }
            Record::Chunk(chunk) if chunk.session.is_some() => self.subagent_chunk(chunk),
            Record::Chunk(chunk) => {
                if chunk.kind == ChunkKind::Agent {
                    self.streamed.push_str(&chunk.text);
                }
                self.hold(chunk.kind, chunk.message_id, &chunk.text, None);
            }
            Record::Update(sent) => self.update(sent),
            Record::Steers(waiting) => self.waiting = waiting,
        }
    }

    fn update(&mut self, sent: String) {
        if let Ok(head) = serde_json::from_str::<HeadPeek<'_>>(&sent) {
            // A sub-agent's own session (see `record::Offers::subagents`):
            // its lines as sent, to a client that shows subagent sessions;
            // none of them is the parent's answer.
            if head.params.session_id.as_deref().is_some_and(|id| id != &*self.session_id.0) {
                drop(head);
                if self.offers.subagents {
                    self.emit_after_held(sent.into_bytes());
                }
                return;
            }
            if !self.offers.subagents {
                match &*head.params.update.kind {
                    "subagent_update" | "session_message" | "session_message_chunk" => return,
                    "tool_call_update" if sent.contains(r#""type":"session""#) => {
                        drop(head);
                        if let Some(line) = self.unlinked(&sent) {
                            self.emit_after_held(line);
                        }
                        return;
                    }
                    _ => {}
                }
            }
        }
        let Ok(peek) = serde_json::from_str::<UpdatePeek<'_>>(&sent) else {
            // Not an update lathe wrote: sent as it is.
            return self.emit_after_held(sent.into_bytes());
        };
        let update = &peek.params.update;
        let text = update.content.as_ref().filter(|c| c.kind == "text").and_then(|c| c.text.as_deref());
        if update.kind == "agent_message_chunk"
            && let Some(text) = text
        {
            self.streamed.push_str(text);
        }
        if update.kind == "usage_update" {
            self.last_usage = Some(sent.into_bytes());
            return;
        }
        if NOT_REPLAYED.contains(&&*update.kind) {
            return;
        }
        if !self.offered(&update.kind) {
            let kind = update.kind.to_string();
            drop(peek);
            if let Some(line) = self.translated(&kind, &sent) {
                self.emit_after_held(line);
            }
            return;
        }
        let plain = update.meta.is_none()
            && update.content.as_ref().is_some_and(|c| c.annotations.is_none() && c.meta.is_none());
        match (chunk_kind(&update.kind), text) {
            (Some(kind), Some(text)) if plain => {
                let message_id = update.message_id.as_deref().map(Arc::from);
                let text = text.to_owned();
                drop(peek);
                self.hold(kind, message_id, &text, Some(sent.into_bytes()));
            }
            _ => {
                drop(peek);
                self.emit_after_held(sent.into_bytes());
            }
        }
    }

    /// Adds text to the message being merged (or starts a new one).
    fn hold(&mut self, kind: ChunkKind, message_id: Option<Arc<str>>, text: &str, sent: Option<Vec<u8>>) {
        if self.send.is_none() {
            return;
        }
        if let Some(held) = &mut self.held
            && held.kind == kind
            && held.message_id == message_id
        {
            held.text.push_str(text);
            held.sent = None;
            return;
        }
        self.flush_held();
        self.held = Some(Held { kind, message_id, text: text.to_owned(), sent });
    }

    fn flush_held(&mut self) {
        let Some(held) = self.held.take() else { return };
        let line = match held.sent {
            Some(sent) => Some(sent),
            None => {
                let mut chunk = ContentChunk::new(ContentBlock::from(held.text));
                if let Some(id) = held.message_id {
                    chunk = chunk.message_id(MessageId::new(id));
                }
                let update = match held.kind {
                    ChunkKind::Agent => SessionUpdate::AgentMessageChunk(chunk),
                    ChunkKind::Thought => SessionUpdate::AgentThoughtChunk(chunk),
                    ChunkKind::User => SessionUpdate::UserMessageChunk(chunk),
                };
                let notification = SessionNotification::new(self.session_id.clone(), update);
                encode_notification("session/update", &notification)
                    .inspect_err(|err| tracing::error!(%err, "cannot encode a replayed chunk"))
                    .ok()
            }
        };
        if let (Some(line), Some(send)) = (line, &mut self.send) {
            send(line);
        }
    }

    /// A sub-agent's streamed text, under its own session's id, to a client
    /// that shows subagent sessions (to another it was never sent).
    fn subagent_chunk(&mut self, chunk: crate::store::Chunk) {
        let (Some(session), true) = (chunk.session, self.offers.subagents) else { return };
        let mut content = ContentChunk::new(ContentBlock::from(chunk.text));
        if let Some(id) = chunk.message_id {
            content = content.message_id(MessageId::new(id));
        }
        let update = match chunk.kind {
            ChunkKind::Agent => SessionUpdate::AgentMessageChunk(content),
            ChunkKind::Thought => SessionUpdate::AgentThoughtChunk(content),
            ChunkKind::User => SessionUpdate::UserMessageChunk(content),
        };
        let notification = SessionNotification::new(SessionId::new(session), update);
        match encode_notification("session/update", &notification) {
            Ok(line) => self.emit_after_held(line),
            Err(err) => tracing::error!(%err, "cannot encode a replayed chunk"),
        }
    }

    fn emit_after_held(&mut self, line: Vec<u8>) {
        self.flush_held();
        if let Some(send) = &mut self.send {
            send(line);
        }
    }

    /// Whether the loading client shows updates of this kind.
    fn offered(&self, kind: &str) -> bool {
        match kind {
            "plan_update" | "plan_removed" => self.offers.plan,
            "compaction_update" | "compaction_summary_chunk" => self.offers.compaction,
            "notice" => self.offers.notices,
            _ => true,
        }
    }

    /// An update recorded for a client that showed it, as a client that
    /// does not would have been sent it (see [`record::to_updates`]): a
    /// Markdown plan as `plan` entries, a finished compaction as the
    /// thought line; `None` when such a client got nothing.
    fn translated(&self, kind: &str, sent: &str) -> Option<Vec<u8>> {
        let line: Value = serde_json::from_str(sent).ok()?;
        let update = line.pointer("/params/update")?;
        let translated = match kind {
            "plan_update" if update.pointer("/plan/type") == Some(&json!("markdown")) => {
                SessionUpdate::Plan(record::markdown_plan(update.pointer("/plan/content")?.as_str()?))
            }
            "compaction_update" if update["status"] == "completed" => {
                let id = update["compactionId"].as_str()?;
                SessionUpdate::AgentThoughtChunk(
                    ContentChunk::new(ContentBlock::from(record::COMPACTION_THOUGHT)).message_id(MessageId::new(id)),
                )
            }
            _ => return None,
        };
        encode_notification("session/update", &SessionNotification::new(self.session_id.clone(), translated))
            .inspect_err(|err| tracing::error!(%err, "cannot encode a replayed update"))
            .ok()
    }

    /// A task call's update recorded for a client that shows subagent
    /// sessions, without its links to them (`session` content), for one
    /// that does not; `None` when nothing else is left in it.
    fn unlinked(&self, sent: &str) -> Option<Vec<u8>> {
        let mut line: Value = serde_json::from_str(sent).ok()?;
        let update = line.pointer_mut("/params/update")?.as_object_mut()?;
        if let Some(Value::Array(content)) = update.get_mut("content") {
            content.retain(|item| item["type"] != "session");
            if content.is_empty() {
                update.remove("content");
            }
        }
        if update.keys().all(|key| key == "sessionUpdate" || key == "toolCallId") {
            return None;
        }
        serde_json::to_vec(&line).ok()
    }

    /// Sends what is still held and the last usage figure; returns what the
    /// session goes on from.
    pub(crate) fn finish(mut self) -> Restored {
        self.flush_held();
        let cost = self
            .last_usage
            .as_deref()
            .and_then(|line| serde_json::from_slice::<Value>(line).ok())
            .and_then(|line| line.pointer("/params/update/cost/amount").and_then(Value::as_f64));
        if let (Some(usage), Some(send)) = (self.last_usage.take(), &mut self.send) {
            send(usage);
        }
        let mut messages = std::mem::take(&mut self.messages);
        crate::agent::repair_transcript(&mut messages, std::mem::take(&mut self.streamed));
        Restored { messages, waiting: std::mem::take(&mut self.waiting), cost }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Chunk;

    /// A chunk line as lathe sent (and format 1 logged) it.
    fn chunk(kind: &str, id: &str, text: &str) -> Record {
        let chunk = ContentChunk::new(ContentBlock::from(text)).message_id(MessageId::new(id));
        let update = match kind {
            "agent_message_chunk" => SessionUpdate::AgentMessageChunk(chunk),
            "agent_thought_chunk" => SessionUpdate::AgentThoughtChunk(chunk),
            _ => SessionUpdate::UserMessageChunk(chunk),
        };
        let line = encode_notification("session/update", &SessionNotification::new(SessionId::new("s"), update));
        Record::Update(String::from_utf8(line.unwrap()).unwrap())
    }

    fn merged(kind: ChunkKind, id: Option<&str>, text: &str) -> Record {
        Record::Chunk(Chunk { kind, message_id: id.map(Arc::from), text: text.to_owned(), session: None })
    }

    fn replay(records: Vec<Record>) -> (Vec<Vec<u8>>, Vec<Message>) {
        let mut lines = Vec::new();
        let mut send = |line: Vec<u8>| lines.push(line);
        let mut replayer = Replayer::new(SessionId::new("s"), Some(&mut send));
        for record in records {
            replayer.record(record);
        }
        let transcript = replayer.finish().messages;
        (lines, transcript)
    }

    fn kinds_and_texts(lines: &[Vec<u8>]) -> Vec<(String, String)> {
        lines
            .iter()
            .map(|l| {
                let value: Value = serde_json::from_slice(l).unwrap();
                let u = &value["params"]["update"];
                (
                    u["sessionUpdate"].as_str().unwrap().to_owned(),
                    u["content"]["text"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn replay_merges_chunks_and_drops_state_updates() {
        let records = vec![
            chunk("user_message_chunk", "u1", "hello"),
            chunk("agent_thought_chunk", "t1", "hm"),
            chunk("agent_message_chunk", "m1", "Hel"),
            chunk("agent_message_chunk", "m1", "lo"),
            Record::Update(
                json!({"method":"session/update","params":{"update":{"sessionUpdate":"usage_update","used":1,"size":9}}})
                    .to_string(),
            ),
            Record::Update(
                json!({"method":"session/update","params":{"update":{"sessionUpdate":"current_mode_update","currentModeId":"ask"}}})
                    .to_string(),
            ),
            chunk("agent_message_chunk", "m2", "Next"),
            Record::Message(Message::Tool { tool_call_id: "x".into(), content: "y".into() }),
        ];
        let (lines, _) = replay(records);
        assert_eq!(
            kinds_and_texts(&lines),
            [
                ("user_message_chunk".to_owned(), "hello".to_owned()),
                ("agent_thought_chunk".to_owned(), "hm".to_owned()),
                ("agent_message_chunk".to_owned(), "Hello".to_owned()),
                ("agent_message_chunk".to_owned(), "Next".to_owned()),
                ("usage_update".to_owned(), String::new())
            ]
        );
    }

    /// A format-2 log (merged chunk records) and a format-1 log (one line
    /// per chunk) of the same conversation replay the same lines; a lone
    /// logged update goes out byte for byte as it was sent.
    #[test]
    fn both_log_formats_replay_the_same() {
        let tool = json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{
            "sessionUpdate":"tool_call","toolCallId":"c1","title":"Read","kind":"read","status":"pending"}}})
        .to_string();
        let old = vec![
            chunk("agent_thought_chunk", "t1", "Let me "),
            chunk("agent_thought_chunk", "t1", "think."),
            chunk("agent_message_chunk", "m1", "An "),
            chunk("agent_message_chunk", "m1", "answer"),
            Record::Update(tool.clone()),
            chunk("agent_message_chunk", "m2", "More."),
        ];
        let new = vec![
            merged(ChunkKind::Thought, Some("t1"), "Let me "),
            merged(ChunkKind::Thought, Some("t1"), "think."),
            merged(ChunkKind::Agent, Some("m1"), "An answer"),
            Record::Update(tool.clone()),
            merged(ChunkKind::Agent, Some("m2"), "More."),
        ];
        let (old_lines, old_transcript) = replay(old);
        let (new_lines, new_transcript) = replay(new);
        assert_eq!(old_lines, new_lines);
        assert_eq!(old_lines[2], tool.as_bytes(), "sent as it was logged");
        assert_eq!(old_transcript, new_transcript);
        // A chunk merged from two lines is encoded as the live events are.
        let live = encode_notification(
            "session/update",
            &SessionNotification::new(
                SessionId::new("s"),
                SessionUpdate::AgentMessageChunk(
                    ContentChunk::new(ContentBlock::from("An answer")).message_id(MessageId::new("m1")),
                ),
            ),
        )
        .unwrap();
        assert_eq!(old_lines[1], live);
    }
}
