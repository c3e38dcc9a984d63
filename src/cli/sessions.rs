//! `lathe sessions`: the saved sessions from a terminal. `list` (optionally
//! for one directory), `show` (the conversation as Markdown), `fork` (a
//! copy that goes on separately), `rm` and `prune --older-than`. Everything goes through [`Store`]: this module
//! reads no session file itself; it only decides what to show and what to
//! remove.
//!
//! What it prints holds text from the model, the workspace and tools (the
//! conversation, titles, directory names): all of it is written through
//! [`Printer`], which passes every line through [`shown`] (the escaping
//! `exec` and `chat` use), and JSON through [`json_line`], so no escape
//! sequence of theirs reaches a terminal. Only `show --raw`, to a pipe or a
//! file, writes the conversation as it is.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::model::{Message, UserPart};
use crate::present::text::{Lines, json_line, shown};
use crate::store::{Record, Retention, SessionSummary, Store, StoreError, StoredSession};

/// `lathe sessions` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum SessionsCommand {
    /// The saved sessions, most recent first.
    List {
        /// Only sessions whose working directory is DIR.
        #[arg(long, value_name = "DIR")]
        cwd: Option<PathBuf>,
        /// One JSON object per line (the stored metadata) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One session's conversation, as Markdown (control characters and
    /// escape sequences shown as escapes).
    Show {
        /// The session id (or a prefix of at least 4 characters after `sess_` that matches only one).
        id: String,
        /// Write the conversation as it was said, escape sequences and all:
        /// only to a pipe or a file, never to a terminal.
        #[arg(long)]
        raw: bool,
    },
    /// Copy a session into a new one that goes on separately (the source
    /// is left as it is); prints the new session's id.
    Fork {
        /// The session id (or a prefix that matches only one).
        id: String,
        /// Keep the conversation only up to this message (an id an editor
        /// saw on its chunks, `msg_...`), and its tool results.
        #[arg(long, value_name = "MESSAGE_ID")]
        at: Option<String>,
    },
    /// Remove sessions.
    #[command(visible_alias = "remove")]
    Rm {
        /// Session ids (or unique prefixes of at least 4 characters after `sess_`).
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Remove the sessions not used for a while.
    Prune {
        /// How long unused: e.g. 30d, 12h, 2weeks.
        #[arg(long, value_name = "AGE", value_parser = humantime::parse_duration)]
        older_than: Duration,
        /// Say what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Why a sessions command failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    /// No data directory is known.
    #[error("no data directory (set --data-dir or LATHE_DATA_DIR)")]
    NoDataDir,
    /// The store said no.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An empty (or blank) id was given: it names no session.
    #[error("an empty session id names no session")]
    EmptyId,
    /// A prefix too short to name a session with any confidence.
    #[error(
        "{0:?} is too short to name a session: give at least {MIN_PREFIX_CHARS} characters of its id after `sess_`"
    )]
    TooShort(String),
    /// `show --raw` with the output on a terminal.
    #[error(
        "--raw writes the session's escape sequences as they are, so not to a terminal: send it to a file or a pipe"
    )]
    RawToTerminal,
    /// An id matched several sessions.
    #[error("{prefix:?} matches {} sessions: {}", .matches.len(), .matches.join(", "))]
    Ambiguous {
        /// What was given.
        prefix: String,
        /// What it matched.
        matches: Vec<String>,
    },
    /// Writing the answer failed.
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
    /// Some of several removals failed (each was reported already).
    #[error("{0} of the sessions could not be removed")]
    Partly(usize),
    /// The fork could not be made.
    #[error(transparent)]
    Fork(#[from] crate::fork::ForkError),
}

/// Fewest characters of a session id's own part (after `sess_`, which every
/// id lathe makes begins with) a prefix must give: `lathe sessions rm s`
/// must not remove the only session there is.
pub const MIN_PREFIX_CHARS: usize = 4;

/// Where a command's output goes: every line passes through [`shown`]
/// (control characters, escape sequences, bidi and invisible characters
/// made visible as escapes), except a `show --raw`'s conversation. There is
/// no other way to write: this is what holds untrusted text off the terminal.
pub struct Printer<'a> {
    out: &'a mut dyn Write,
}

impl<'a> Printer<'a> {
    /// Prints to `out`.
    pub fn new(out: &'a mut dyn Write) -> Printer<'a> {
        Printer { out }
    }

    /// `text` (any number of lines: `\n` and `\t` stay), shown.
    fn text(&mut self, text: &str) -> std::io::Result<()> {
        self.out.write_all(shown(text, Lines::Many).as_bytes())
    }

    /// One line: any line break inside `line` is shown as `\n`.
    fn line(&mut self, line: &str) -> std::io::Result<()> {
        self.out.write_all(shown(line, Lines::One).as_bytes())?;
        self.out.write_all(b"\n")
    }

    /// `value` as one line of JSON with its hidden characters as `\u` escapes.
    fn json(&mut self, value: &serde_json::Value) -> std::io::Result<()> {
        let line = json_line(value).map_err(std::io::Error::other)?;
        self.out.write_all(line.as_bytes())?;
        self.out.write_all(b"\n")
    }

    /// `text` as it is: only for `show --raw` to what is not a terminal.
    fn raw(&mut self, text: &str) -> std::io::Result<()> {
        self.out.write_all(text.as_bytes())
    }
}

/// Runs one `lathe sessions` command against the store under `data_dir`.
/// `out_is_terminal` says whether `out` is a terminal (`show --raw` refuses
/// to write to one).
pub async fn run(
    command: SessionsCommand,
    data_dir: Option<&Path>,
    out: &mut dyn Write,
    out_is_terminal: bool,
    err: &mut dyn Write,
) -> Result<(), SessionsError> {
    let (mut out, mut err) = (Printer::new(out), Printer::new(err));
    let data_dir = data_dir.ok_or(SessionsError::NoDataDir)?;
    // Reading never creates the store: with none yet, there are no sessions.
    let exists = data_dir.join("sessions").is_dir();
    match command {
        SessionsCommand::List { cwd, json } => {
            let sessions = if exists { all(&open(data_dir)?, cwd.as_deref()) } else { Vec::new() };
            list(&sessions, json, &mut out)
        }
        SessionsCommand::Show { id, raw } => {
            if raw && out_is_terminal {
                return Err(SessionsError::RawToTerminal);
            }
            check_prefix(&id)?;
            if !exists {
                return Err(StoreError::NotFound(id).into());
            }
            let store = open(data_dir)?;
            let id = resolve(&store, &id)?;
            let stored = store.load(&id)?;
            let text = markdown(&stored);
            if raw {
                out.raw(&text)?
            } else {
                out.text(&text)?
            }
            Ok(())
        }
        SessionsCommand::Fork { id, at } => {
            check_prefix(&id)?;
            if !exists {
                return Err(StoreError::NotFound(id).into());
            }
            let store = std::sync::Arc::new(open(data_dir)?);
            let id = resolve(&store, &id)?;
            let new_id = crate::setup::new_session_id();
            crate::fork::fork(&store, &id, &new_id, at.as_deref()).await?;
            out.line(&new_id)?;
            Ok(())
        }
        SessionsCommand::Rm { ids } => {
            let store = if exists { Some(open(data_dir)?) } else { None };
            let mut failed = 0;
            for given in ids {
                let removed = match (check_prefix(&given), &store) {
                    (Err(why), _) => Err(why),
                    (Ok(()), None) => Err(StoreError::NotFound(given).into()),
                    (Ok(()), Some(store)) => match resolve(store, &given) {
                        Ok(id) => store.delete(&id).await.map(|()| id).map_err(SessionsError::from),
                        Err(why) => Err(why),
                    },
                };
                match removed {
                    Ok(id) => out.line(&format!("removed {id}"))?,
                    Err(why) => {
                        failed += 1;
                        err.line(&format!("lathe: {why}"))?;
                    }
                }
            }
            if failed > 0 { Err(SessionsError::Partly(failed)) } else { Ok(()) }
        }
        SessionsCommand::Prune { older_than, dry_run } => {
            if !exists {
                out.line("no sessions")?;
                return Ok(());
            }
            let store = open(data_dir)?;
            let cutoff = SystemTime::now().checked_sub(older_than).unwrap_or(SystemTime::UNIX_EPOCH);
            let mut removed = 0;
            for meta in all(&store, None) {
                let last_used = humantime::parse_rfc3339_weak(&meta.updated_at).ok();
                // A session whose time cannot be read is left alone.
                if last_used.is_none_or(|when| when >= cutoff) {
                    continue;
                }
                if !dry_run {
                    store.delete(&meta.session_id).await?;
                }
                removed += 1;
                let verb = if dry_run { "would remove" } else { "removed" };
                out.line(&format!("{verb} {} (last used {})", meta.session_id, meta.updated_at))?;
            }
            let verb = if dry_run { "would be removed" } else { "removed" };
            out.line(&format!("{removed} session{} {verb}", if removed == 1 { "" } else { "s" }))?;
            Ok(())
        }
    }
}

/// The store, opened without its retention rule: listing or showing
/// sessions never deletes any.
fn open(data_dir: &Path) -> Result<Store, StoreError> {
    Store::open(
        data_dir,
        Retention::default(),
        Box::new(
            |failure: crate::store::SaveFailure| tracing::warn!(session = %failure.session_id, error = %failure.error, "not saved"),
        ),
    )
}

/// Every saved session (in `cwd`, when given), most recently used first.
fn all(store: &Store, cwd: Option<&Path>) -> Vec<SessionSummary> {
    let cwd = cwd.map(|dir| crate::platform::paths::canonical(dir).unwrap_or_else(|_| dir.to_path_buf()));
    store.list(cwd.as_deref(), None, usize::MAX).sessions
}

/// Refuses an id that could name sessions it was not meant for: an empty or
/// blank one, and a prefix with fewer than [`MIN_PREFIX_CHARS`] characters
/// after `sess_` (so not `s`, `sess`, `sess_` or `sess_4b`).
pub fn check_prefix(given: &str) -> Result<(), SessionsError> {
    if given.trim().is_empty() {
        return Err(SessionsError::EmptyId);
    }
    let own = match given.strip_prefix("sess_") {
        Some(own) => own,
        // `s`, `se`, `ses`, `sess`: the start every id shares.
        None if "sess_".starts_with(given) => "",
        None => given,
    };
    if own.chars().count() < MIN_PREFIX_CHARS {
        return Err(SessionsError::TooShort(given.to_owned()));
    }
    Ok(())
}

/// The one session `given` names: its exact id, else the only id it begins
/// (given passed [`check_prefix`]).
fn resolve(store: &Store, given: &str) -> Result<String, SessionsError> {
    check_prefix(given)?;
    match store.load_meta(given) {
        Ok(meta) => return Ok(meta.session_id),
        Err(StoreError::NotFound(_)) => {}
        Err(other) => return Err(other.into()),
    }
    let mut matches: Vec<String> =
        all(store, None).into_iter().map(|meta| meta.session_id).filter(|id| id.starts_with(given)).collect();
    match matches.len() {
        0 => Err(StoreError::NotFound(given.to_owned()).into()),
        1 => Ok(matches.remove(0)),
        _ => {
            matches.sort();
            Err(SessionsError::Ambiguous { prefix: given.to_owned(), matches })
        }
    }
}

fn list(sessions: &[SessionSummary], json: bool, out: &mut Printer<'_>) -> Result<(), SessionsError> {
    if json {
        for summary in sessions {
            let line = serde_json::json!({
                "sessionId": summary.session_id,
                "cwd": summary.cwd,
                "additionalDirectories": summary.additional_directories,
                "title": summary.title,
                "updatedAt": summary.updated_at,
            });
            out.json(&line)?;
        }
        return Ok(());
    }
    if sessions.is_empty() {
        out.line("no sessions")?;
        return Ok(());
    }
    for summary in sessions {
        let title = summary.title.as_deref().map(one_line).unwrap_or_else(|| "(untitled)".to_owned());
        out.line(&format!("{}  {}  {}  {}", summary.session_id, summary.updated_at, summary.cwd.display(), title))?;
    }
    Ok(())
}

/// A title or a line of text as one line of at most 80 characters.
fn one_line(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}

/// Longest tool result shown in full; longer ones keep their head.
const SHOWN_RESULT_CHARS: usize = 4000;

/// The conversation as Markdown: every message the log holds, in order,
/// including what came before a compaction (marked where it happened).
pub fn markdown(stored: &StoredSession) -> String {
    let meta = &stored.meta;
    let mut text =
        format!("# {}\n\n", meta.title.as_deref().map(one_line).unwrap_or_else(|| "Untitled session".into()));
    text.push_str(&format!("- id: `{}`\n- directory: `{}`\n", meta.session_id, meta.cwd.display()));
    text.push_str(&format!("- created: {}\n- last used: {}\n", meta.created_at, meta.updated_at));
    if let Some(model) = &meta.model {
        text.push_str(&format!("- model: {model}\n"));
    }
    if let Some(mode) = &meta.mode {
        text.push_str(&format!("- mode: {mode}\n"));
    }
    for record in &stored.records {
        match record {
            Record::Message(message) => message_markdown(message, &mut text),
            Record::Reset(messages) => {
                text.push_str("\n---\n\n*The conversation was compacted here; the model went on from this summary:*\n");
                for message in messages {
                    message_markdown(message, &mut text);
                }
                text.push_str("\n---\n");
            }
            Record::Rewind(keep) => {
                text.push_str(&format!(
                    "\n---\n\n*`/undo` took the conversation back here: the model went on from its first {keep} messages.*\n\n---\n"
                ));
            }
            Record::Update(_) | Record::Chunk(_) | Record::Steers(_) => {}
        }
    }
    text
}

fn message_markdown(message: &Message, text: &mut String) {
    match message {
        Message::User { parts } => {
            text.push_str("\n## User\n\n");
            for part in parts {
                match part {
                    UserPart::Text { text: said } => {
                        text.push_str(said.trim_end());
                        text.push('\n');
                    }
                    UserPart::Image { mime_type, .. } => text.push_str(&format!("*[an image, {mime_type}]*\n")),
                }
            }
        }
        Message::Assistant { text: said, reasoning, tool_calls, interrupted, .. } => {
            text.push_str("\n## Assistant\n\n");
            if !reasoning.trim().is_empty() {
                for line in reasoning.trim().lines() {
                    text.push_str(&format!("> {line}\n"));
                }
                text.push('\n');
            }
            if !said.trim().is_empty() {
                text.push_str(said.trim_end());
                text.push('\n');
            }
            for call in tool_calls {
                text.push_str(&format!("\n**Tool call** `{}` (`{}`)\n\n", call.name, call.id));
                text.push_str(&fenced(&call.arguments, "json"));
            }
            if *interrupted {
                text.push_str("\n*(cancelled by the user)*\n");
            }
        }
        Message::Tool { tool_call_id, content } => {
            text.push_str(&format!("\n**Tool result** (`{tool_call_id}`)\n\n"));
            let shown = match content.char_indices().nth(SHOWN_RESULT_CHARS) {
                Some((at, _)) => format!("{}\n… ({} more bytes)", &content[..at], content.len() - at),
                None => content.clone(),
            };
            text.push_str(&fenced(&shown, ""));
        }
    }
}

/// `body` in a code fence longer than any backtick run inside it.
fn fenced(body: &str, language: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in body.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}{language}\n{}\n{fence}\n", body.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCallRequest;
    use crate::store::SessionMeta;

    #[test]
    fn markdown_keeps_everything_in_order_and_fences_safely() {
        let stored = StoredSession {
            meta: SessionMeta {
                session_id: "sess_1".into(),
                cwd: PathBuf::from("/p"),
                additional_directories: vec![],
                title: Some("Fix the build".into()),
                created_at: "2026-01-01T00:00:00Z".into(),
                updated_at: "2026-01-02T00:00:00Z".into(),
                model: Some("mock".into()),
                mode: Some("ask".into()),
                thought_level: None,
            },
            records: vec![
                Record::Message(Message::User { parts: vec![UserPart::Text { text: "fix it".into() }] }),
                Record::Message(Message::Assistant {
                    text: "Looking.".into(),
                    reasoning: "think".into(),
                    reasoning_field: None,
                    reasoning_details: None,
                    tool_calls: vec![ToolCallRequest {
                        id: "c1".into(),
                        name: "read_file".into(),
                        arguments: "{\"path\":\"a\"}".into(),
                    }],
                    interrupted: false,
                }),
                Record::Message(Message::Tool { tool_call_id: "c1".into(), content: "```inner```".into() }),
                Record::Reset(vec![Message::User { parts: vec![UserPart::Text { text: "summary".into() }] }]),
            ],
        };
        let text = markdown(&stored);
        let order =
            ["# Fix the build", "fix it", "> think", "Looking.", "`read_file`", "````\n```inner```\n````", "summary"];
        let mut at = 0;
        for needle in order {
            let found = text[at..].find(needle).unwrap_or_else(|| panic!("{needle} after {at} in\n{text}"));
            at += found + needle.len();
        }
    }
}
