//! Checkpoints as a session uses them, the same for every front end (the
//! editor's, [`crate::acp`], and the terminal's, [`crate::term`]): a turn
//! recorded ([`TurnRecording`]), and `/undo`, `/redo` and `/checkpoints`
//! run on the session's checkpoints and conversation. The file work is
//! [`crate::checkpoint`]'s; this module ties it to the conversation (the
//! rewind, the redo's messages) and to what the model last saw of each file.
//!
//! What happened comes back as an [`Outcome`] and the reply's text; how it is
//! shown (a tool call with diffs for an editor, lines on a terminal) is each
//! front end's. It knows the engine and nothing of any front end: no ACP
//! types, no terminal.

use std::path::PathBuf;
use std::sync::Arc;

use crate::checkpoint::{self, CheckpointError, Checkpoints, Outcome, RecordingHost};
use crate::model::{Message, UserPart};
use crate::session::{Conversation, Session, TurnGuard};
use crate::tools::Host;

const NO_CHECKPOINTS: &str = "This session keeps no checkpoints: lathe saves them with the session, and sessions are \
                              not saved (no data directory).";

/// Runs blocking checkpoint work off the async threads; `None` if the work
/// panicked (logged).
pub async fn blocking<T: Send + 'static>(
    checkpoints: &Arc<Checkpoints>,
    work: impl FnOnce(&Checkpoints) -> T + Send + 'static,
) -> Option<T> {
    let checkpoints = Arc::clone(checkpoints);
    match tokio::task::spawn_blocking(move || work(&checkpoints)).await {
        Ok(value) => Some(value),
        Err(err) => {
            tracing::warn!(%err, "checkpoint work failed");
            None
        }
    }
}

/// Writes what the session's last turn left to its checkpoints (see
/// [`Checkpoints::finish_turn`]): called once the turn has been answered,
/// so the answer never waits on the disk.
pub async fn persist(session: &Session) {
    if let Some(checkpoints) = session.checkpoints() {
        blocking(checkpoints, Checkpoints::persist).await;
    }
}

/// Why the session's checkpoints are off (an index of a newer lathe), the
/// first time it is asked, for the front end to tell the user once.
pub async fn notice(session: &Session) -> Option<String> {
    let checkpoints = session.checkpoints()?;
    blocking(checkpoints, Checkpoints::take_notice).await.flatten()
}

/// A turn being checkpointed: started with [`TurnRecording::begin`] before
/// the turn runs, its tools given [`TurnRecording::host`], ended with
/// [`TurnRecording::finish`].
pub struct TurnRecording {
    checkpoints: Arc<Checkpoints>,
    roots: Vec<PathBuf>,
    messages_before: usize,
    user: Message,
}

impl TurnRecording {
    /// Starts recording the turn about to run `parts` on the conversation,
    /// if the session keeps checkpoints.
    pub async fn begin(session: &Session, conversation: &Conversation, parts: &[UserPart]) -> Option<TurnRecording> {
        let checkpoints = Arc::clone(session.checkpoints()?);
        let messages_before = conversation.messages().len();
        let prompt = prompt_text(parts);
        if blocking(&checkpoints, move |c| c.begin_turn(&prompt, messages_before)).await.is_none() {
            tracing::warn!("cannot start the turn's checkpoint");
        }
        let user = Message::User { parts: parts.to_vec() };
        Some(TurnRecording { checkpoints, roots: session.roots(), messages_before, user })
    }

    /// The host the turn's tools use: `inner`, with every change to a file
    /// saved first.
    pub fn host<'a>(&self, inner: &'a dyn Host) -> RecordingHost<'a> {
        RecordingHost::new(inner, Arc::clone(&self.checkpoints), self.roots.clone())
    }

    /// The turn ended: its checkpoint is kept (written by [`persist`] once
    /// the turn is answered), or dropped when the session
    /// is still only in memory (the model never answered, so nothing of the
    /// turn ran, and the session must leave nothing on disk: issue 13).
    /// Whether the undoable turns changed (a front end may show them again).
    pub async fn finish(self, session: &Session, conversation: &Conversation) -> bool {
        let unsaved = session.journal().is_some_and(|journal| journal.pending_meta().is_some());
        if unsaved && self.checkpoints.abandon_turn() {
            return false;
        }
        let messages = conversation.messages();
        // The turn can be rewound only if the conversation still starts it
        // where it did (a compaction during the turn rewrites what came before).
        let rewindable = messages.get(self.messages_before) == Some(&self.user);
        let messages_after = messages.len();
        if blocking(&self.checkpoints, move |c| c.finish_turn(messages_after, rewindable)).await.is_none() {
            tracing::warn!("cannot finish the turn's checkpoint");
        }
        true
    }
}

/// What `/undo` or `/redo` did: the outcome when files and conversation were
/// worked on (for the front end to show), and the reply to the user.
pub struct Done {
    /// What changed; `None` when nothing was done (the reply says why).
    pub outcome: Option<Outcome>,
    /// The reply.
    pub reply: String,
}

impl Done {
    fn nothing(reply: impl Into<String>) -> Done {
        Done { outcome: None, reply: reply.into() }
    }
}

/// `/undo [--force]`: puts the last turn's files back and takes the turn out
/// of the conversation, if it is still there as the turn left it.
pub async fn undo(turn: &mut TurnGuard, arguments: &str) -> Done {
    let session = Arc::clone(turn.session());
    let Some(checkpoints) = session.checkpoints().cloned() else { return Done::nothing(NO_CHECKPOINTS) };
    let force = match arguments.trim() {
        "" => false,
        "--force" | "-f" => true,
        other => return Done::nothing(format!("`/undo` takes no argument but `--force` (got `{other}`).")),
    };
    let roots = session.roots();
    let Some(undone) = blocking(&checkpoints, move |c| c.undo(&roots, force)).await else {
        return Done::nothing("The undo failed; see lathe's log.");
    };
    let outcome = match undone {
        Ok(outcome) => outcome,
        Err(error) => return Done::nothing(error.to_string()),
    };
    let conversation = turn.conversation();
    let rewound = match outcome.turn.messages_before {
        Some(before) if conversation.messages().len() == outcome.turn.messages_after => {
            Some(conversation.rewind(before))
        }
        _ => None,
    };
    let messages_now = conversation.messages().len();
    let rewound_any = rewound.is_some();
    let record = outcome.clone();
    blocking(&checkpoints, move |c| c.undone(&record, rewound.unwrap_or_default(), messages_now)).await;
    remember_texts(&session, &outcome);
    let mut reply = format!("Undid the turn \"{}\": {}.", outcome.turn.prompt, files_summary(&outcome));
    if rewound_any {
        reply.push_str(" The model no longer sees that turn. `/redo` applies it again.");
    } else {
        reply.push_str(
            " The conversation was not rewound: it was compacted or cleared since, so the model still sees what it \
             did.",
        );
    }
    let changed_since = outcome.left.iter().any(|(_, why)| why.contains(checkpoint::CHANGED_SINCE));
    if changed_since && !force {
        reply.push_str(
            " Files changed since the turn were left alone. To restore them as well, losing those changes: `/redo`, \
             then `/undo --force`.",
        );
    }
    Done { outcome: Some(outcome), reply }
}

/// `/redo`: applies the last undone turn again, files and conversation.
pub async fn redo(turn: &mut TurnGuard) -> Done {
    let session = Arc::clone(turn.session());
    let Some(checkpoints) = session.checkpoints().cloned() else { return Done::nothing(NO_CHECKPOINTS) };
    let roots = session.roots();
    let messages_now = turn.conversation().messages().len();
    let Some(redone) = blocking(&checkpoints, move |c| c.redo(&roots, messages_now)).await else {
        return Done::nothing("The redo failed; see lathe's log.");
    };
    let mut outcome = match redone {
        Ok(outcome) => outcome,
        Err(error @ CheckpointError::Io { .. }) => {
            return Done::nothing(format!("The redo may be incomplete: {error}"));
        }
        Err(error) => return Done::nothing(error.to_string()),
    };
    let conversation = turn.conversation();
    for message in std::mem::take(&mut outcome.messages) {
        conversation.push(message);
    }
    remember_texts(&session, &outcome);
    let reply = format!("Redid the turn \"{}\": {}.", outcome.turn.prompt, files_summary(&outcome));
    Done { outcome: Some(outcome), reply }
}

/// `/checkpoints`: the turns `/undo` can take back, newest first, with the
/// files each changed.
pub async fn list(session: &Session) -> String {
    let Some(checkpoints) = session.checkpoints().cloned() else { return NO_CHECKPOINTS.to_owned() };
    let Some((off, turns)) = blocking(&checkpoints, |c| (c.off_reason(), c.turns())).await else {
        return "The checkpoints could not be read; see lathe's log.".to_owned();
    };
    if let Some(why) = off {
        return why;
    }
    if turns.is_empty() {
        return "There is no turn to undo.".to_owned();
    }
    let cwd = &session.setup().cwd;
    let mut text = String::from("Turns `/undo` can take back, newest first:\n");
    for turn in turns.iter().rev() {
        text.push_str(&format!("\n- \"{}\" ({})", turn.prompt, turn.started_at));
        if turn.files.is_empty() {
            text.push_str(": no file changes");
        }
        for entry in &turn.files {
            let shown = crate::tools::paths::display(&entry.path, cwd);
            let change = match (&entry.before, &entry.after, &entry.not_saved) {
                (_, _, Some(why)) => format!("cannot be restored: {why}"),
                (None, Some(_), None) => "created".to_owned(),
                (Some(_), None, None) => "deleted".to_owned(),
                _ => "modified".to_owned(),
            };
            text.push_str(&format!("\n  - `{shown}`: {change}"));
        }
    }
    text
}

/// The model's next edit of a restored file must not be refused as a change
/// made behind its back: what it "saw" is what the file holds now.
fn remember_texts(session: &Session, outcome: &Outcome) {
    for changed in &outcome.changed {
        if let Some(text) = &changed.new_text {
            session.file_versions().record(&changed.path, text);
        }
    }
}

fn files_summary(outcome: &Outcome) -> String {
    let restored = outcome.changed.len();
    let left = outcome.left.len();
    let files = |n: usize| if n == 1 { "1 file".to_owned() } else { format!("{n} files") };
    match (restored, left) {
        (0, 0) => "it changed no file".to_owned(),
        (_, 0) => format!("{} put back", files(restored)),
        (_, _) => format!("{} put back, {} left as they are", files(restored), files(left)),
    }
}

/// The text of a prompt, for naming its turn.
fn prompt_text(parts: &[UserPart]) -> String {
    parts
        .iter()
        .filter_map(|part| match part {
            UserPart::Text { text } => Some(text.as_str()),
            UserPart::Image { .. } => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}
