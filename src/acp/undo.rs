//! How an editor sees `/undo` and `/redo` (the work, shared with the
//! terminal, is [`crate::undo`]'s), and the list of undoable turns editors
//! get in `_meta`.
//!
//! The list travels in a `session_info_update` whose `_meta` holds
//! `{"lathe": {"checkpoints": [...], "canRedo": bool}}`, sent after every
//! turn, undo and redo, and after `session/load` (not recorded: it is state,
//! not conversation). Each entry is `{turn, prompt, startedAt, files: [{path,
//! shown, change: created|modified|deleted|unrestorable, notSaved?}]}`,
//! newest first: the first entry is what `/undo` takes back.
//!
//! An undo or redo is shown as a tool call (kind `edit`) whose content is a
//! `diff` per file it changed and a line per file it left alone, followed by
//! a message saying what happened to the conversation; both are recorded, so
//! a `session/load` replays them.

use agent_client_protocol_schema::v1::{SessionInfoUpdate, SessionUpdate};

use super::Server;
use super::updates::SessionEvents;
use crate::agent::{AgentEvent, EventSink, ToolCallChange, ToolCallStatus};
use crate::checkpoint::{self, Outcome};
use crate::session::{Session, TurnGuard};
use crate::tools::{DisplayContent, Location, ToolKind};
use crate::undo::{Done, blocking};

/// Largest text shown as a diff (as the file tools show theirs).
const DIFF_MAX_BYTES: usize = 1024 * 1024;

impl Server {
    /// `/undo [--force]` (the work is [`crate::undo::undo`]).
    pub(super) async fn undo_command(&self, turn: &mut TurnGuard, events: &SessionEvents, arguments: &str) -> String {
        let done = crate::undo::undo(turn, arguments).await;
        self.show_done(turn.session(), events, "Undo", done).await
    }

    /// `/redo` (the work is [`crate::undo::redo`]).
    pub(super) async fn redo_command(&self, turn: &mut TurnGuard, events: &SessionEvents) -> String {
        let done = crate::undo::redo(turn).await;
        self.show_done(turn.session(), events, "Redo", done).await
    }

    /// Shows what an undo or redo changed, and the new list; the reply.
    async fn show_done(&self, session: &Session, events: &SessionEvents, verb: &str, done: Done) -> String {
        if let Some(outcome) = &done.outcome {
            show(events, session, verb, outcome);
            self.send_checkpoints(session, events, false).await;
        }
        done.reply
    }

    /// Tells the editor the undoable turns (see the module docs); when
    /// `only_if_any`, only if there are some (a session just loaded).
    pub(super) async fn send_checkpoints(&self, session: &Session, events: &SessionEvents, only_if_any: bool) {
        let Some(checkpoints) = session.checkpoints().cloned() else { return };
        let Some((turns, can_redo)) = blocking(&checkpoints, |c| (c.turns(), c.can_redo())).await else { return };
        if only_if_any && turns.is_empty() && !can_redo {
            return;
        }
        let list = checkpoint::describe(&turns, &session.setup().cwd);
        let mut meta = serde_json::Map::new();
        meta.insert("lathe".to_owned(), serde_json::json!({ "checkpoints": list, "canRedo": can_redo }));
        events.send_unrecorded(SessionUpdate::SessionInfoUpdate(SessionInfoUpdate::new().meta(meta)));
    }
}

/// Shows an undo or redo as a tool call with a diff per file.
fn show(events: &SessionEvents, session: &Session, verb: &str, outcome: &Outcome) {
    let id = format!("{}_{}", verb.to_lowercase(), uuid::Uuid::new_v4().simple());
    let title = format!("{verb}: {}", outcome.turn.prompt);
    events.emit(AgentEvent::ToolCallStarted { id: id.clone(), title, kind: ToolKind::Edit });
    let cwd = &session.setup().cwd;
    let mut content = Vec::new();
    for changed in &outcome.changed {
        let shown = crate::tools::paths::display(&changed.path, cwd);
        let too_big = |text: &Option<String>| text.as_ref().is_some_and(|text| text.len() > DIFF_MAX_BYTES);
        if too_big(&changed.old_text) || too_big(&changed.new_text) {
            let what = if changed.exists { "Restored" } else { "Removed" };
            content.push(DisplayContent::Text(format!("{what} {shown} (too large to show as a diff).")));
            continue;
        }
        match (&changed.old_text, &changed.new_text) {
            (old, Some(new)) if changed.existed == old.is_some() => content.push(DisplayContent::Diff {
                path: changed.path.clone(),
                old_text: old.clone(),
                new_text: new.clone(),
            }),
            (Some(old), None) if !changed.exists => content.push(DisplayContent::Diff {
                path: changed.path.clone(),
                old_text: Some(old.clone()),
                new_text: String::new(),
            }),
            _ if !changed.exists => content.push(DisplayContent::Text(format!("Removed {shown}."))),
            _ => content.push(DisplayContent::Text(format!("Restored {shown} (not text, no diff shown)."))),
        }
    }
    for (path, why) in &outcome.left {
        let shown = crate::tools::paths::display(path, cwd);
        content.push(DisplayContent::Text(format!("{shown}: {why}")));
    }
    let locations = outcome.changed.iter().map(|changed| Location { path: changed.path.clone(), line: None }).collect();
    events.emit(AgentEvent::ToolCallUpdated {
        id,
        change: ToolCallChange {
            status: Some(ToolCallStatus::Completed),
            content: Some(content),
            locations: Some(locations),
            ..ToolCallChange::default()
        },
    });
}
