//! The terminal's [`EventSink`]: every agent event becomes the ACP
//! `session/update` an editor would get (recorded in the session's journal
//! as the ACP side records it), and is shown: as plain text
//! (the answer on stdout, the rest as short lines on stderr), as rendered
//! Markdown with a spinner (`chat`), or as one JSON object per line (`exec
//! --json`: the `session/update` params, exactly what an ACP client gets).

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use agent_client_protocol_schema::v1::{
    ContentBlock, ContentChunk, SessionId, SessionInfoUpdate, SessionNotification, SessionUpdate,
};

use super::lock;
use super::style::{self, Paint};
use crate::agent::{
    AgentEvent, CompactionEvent, CompactionOutcome, EventSink, SubagentChange, SubagentEvent, ToolCallChange,
    ToolCallStatus,
};
use crate::checkpoint::Outcome;
use crate::model::UserPart;
use crate::present::record::{COMPACTION_THOUGHT, Offers, Out, record, to_updates};
use crate::present::text::{Lines, shown};
use crate::session::Journal;
use crate::tools::{DisplayContent, PlanItem, PlanStatus, ToolKind};

/// How events are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// `exec`: the answer as plain text on stdout, the rest on stderr.
    Plain,
    /// `exec --json`: one `session/update` params object per line on stdout.
    Json,
    /// `chat`: Markdown rendered for the terminal, full diffs, a spinner.
    Chat,
}

/// Longest diff shown in `chat`, in lines.
const CHAT_DIFF_LINES: usize = 60;

/// Sends one session's events to the terminal and its journal.
pub struct TermEvents {
    session_id: SessionId,
    journal: Option<Journal>,
    screen: Arc<Mutex<Screen>>,
}

impl TermEvents {
    /// Events of session `session_id`, recorded in `journal`, shown as `output`.
    pub fn new(session_id: &Arc<str>, journal: Option<Journal>, output: Output) -> TermEvents {
        TermEvents {
            session_id: SessionId::new(Arc::clone(session_id)),
            journal,
            screen: Arc::new(Mutex::new(Screen::new(output))),
        }
    }

    /// The screen, shared with the approver (which must end lines and stop
    /// the spinner before it asks).
    pub fn screen(&self) -> Arc<Mutex<Screen>> {
        Arc::clone(&self.screen)
    }

    /// What the user typed, recorded for replay (it is on their screen already).
    pub fn record_user(&self, parts: &[UserPart]) {
        for part in parts {
            if let UserPart::Text { text } = part {
                let update = SessionUpdate::UserMessageChunk(ContentChunk::new(ContentBlock::from(text.as_str())));
                if let Some(journal) = &self.journal {
                    record(journal, &self.session_id, update);
                }
            }
        }
    }

    /// The session got a title: an editor is told (not recorded); JSON
    /// output carries it too.
    pub fn title(&self, title: &str) {
        let shown = shown(title, Lines::One).into_owned();
        let update = SessionUpdate::SessionInfoUpdate(
            SessionInfoUpdate::new().title(shown).updated_at(crate::store::now_rfc3339()),
        );
        lock(&self.screen).json(&SessionNotification::new(self.session_id.clone(), update));
    }

    /// What an undo or redo (`verb`) did to the files, as lines on stderr:
    /// each file put back or removed, each left alone with why. (The reply
    /// that follows says what happened to the conversation.) Not recorded:
    /// an editor that loads the session later replays the reply only, which
    /// counts the files.
    pub fn checkpoint_outcome(&self, verb: &str, outcome: &Outcome, cwd: &Path) {
        let mut screen = lock(&self.screen);
        let paint = screen.err_paint;
        let title = shown(&format!("{verb}: {}", outcome.turn.prompt), Lines::One).into_owned();
        let mut lines = vec![format!("{} {}", paint.cyan("▸"), paint.bold(&title))];
        for changed in &outcome.changed {
            let path = crate::tools::paths::display(&changed.path, cwd);
            let what = if changed.exists { "restored" } else { "removed" };
            lines.push(format!("  {} {}", paint.green(what), shown(&path, Lines::One)));
        }
        for (path, why) in &outcome.left {
            let path = crate::tools::paths::display(path, cwd);
            let line = format!("{}: {why}", shown(&path, Lines::One));
            lines.push(format!("  {} {}", paint.yellow("left"), shown(&line, Lines::One)));
        }
        screen.err_lines(&lines.join("\n"));
    }

    /// A warning on stderr (the spinner stopped and open lines ended first).
    pub fn warn(&self, text: &str) {
        lock(&self.screen).break_lines();
        style::warn_line(text);
    }

    /// Starts the spinner (chat), until the first event.
    pub fn waiting(&self) {
        lock(&self.screen).spin();
    }

    /// The turn is over: ends the answer's line and stops the spinner.
    pub fn finish(&self) {
        lock(&self.screen).finish();
    }
}

impl EventSink for TermEvents {
    fn emit(&self, event: AgentEvent) {
        // Recorded as for an editor that shows every kind of update (a
        // session/load by one that shows fewer translates them).
        let updates = to_updates(event.clone(), Offers::ALL, &self.session_id);
        if let Some(journal) = &self.journal {
            for out in &updates {
                if let Out::History(update) = out {
                    record(journal, &self.session_id, update.clone());
                }
            }
        }
        let mut screen = lock(&self.screen);
        match screen.output {
            Output::Json => {
                for out in updates {
                    let (session, update) = match out {
                        Out::History(update) | Out::Live(update) => (self.session_id.clone(), update),
                        Out::Child(session, update) => (session, update),
                    };
                    screen.json(&SessionNotification::new(session, update));
                }
            }
            Output::Plain | Output::Chat => screen.show(event),
        }
    }
}

/// A tool call as the screen knows it.
struct CallState {
    title: String,
    kind: ToolKind,
    announced: bool,
    /// A sub-agent's call: its lines are indented under the task's.
    nested: bool,
}

/// What is on the terminal: where the answer's line stands, the tool calls,
/// the Markdown not yet rendered, the spinner.
pub struct Screen {
    output: Output,
    err_paint: Paint,
    /// stdout and stderr are the same terminal (lines must not run into each other).
    shared_terminal: bool,
    /// The answer's last line is not finished.
    answer_open: bool,
    /// A reasoning line on stderr is not finished.
    thought_open: bool,
    /// The message the open reasoning line belongs to.
    thought_id: Option<Arc<str>>,
    calls: HashMap<String, CallState>,
    markdown: Markdown,
    spinner: Option<indicatif::ProgressBar>,
    skin: termimad::MadSkin,
}

impl Screen {
    fn new(output: Output) -> Screen {
        let skin = if Paint::stdout().on() { termimad::MadSkin::default() } else { termimad::MadSkin::no_style() };
        Screen {
            output,
            err_paint: Paint::stderr(),
            shared_terminal: std::io::stdout().is_terminal() && std::io::stderr().is_terminal(),
            answer_open: false,
            thought_open: false,
            thought_id: None,
            calls: HashMap::new(),
            markdown: Markdown::default(),
            spinner: None,
            skin,
        }
    }

    fn json<T: serde::Serialize>(&mut self, value: &T) {
        if self.output != Output::Json {
            return;
        }
        // The same JSON an editor gets, with no escape sequence or C1
        // control left raw for a terminal to act on.
        if let Ok(line) = crate::present::text::json_line(value) {
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "{line}");
            let _ = stdout.flush();
        }
    }

    fn spin(&mut self) {
        if self.output != Output::Chat || !std::io::stderr().is_terminal() {
            return;
        }
        let spinner = indicatif::ProgressBar::new_spinner();
        spinner.set_message("thinking…");
        spinner.enable_steady_tick(std::time::Duration::from_millis(100));
        self.spinner = Some(spinner);
    }

    fn stop_spinner(&mut self) {
        if let Some(spinner) = self.spinner.take() {
            spinner.finish_and_clear();
        }
    }

    /// Ends the open lines so what follows on stderr starts on its own line.
    pub fn break_lines(&mut self) {
        self.stop_spinner();
        self.flush_markdown(true);
        if self.answer_open && self.shared_terminal {
            let _ = writeln!(std::io::stdout().lock());
            self.answer_open = false;
        }
        if self.thought_open {
            style::err_line("");
            self.thought_open = false;
        }
    }

    fn finish(&mut self) {
        self.stop_spinner();
        self.flush_markdown(true);
        if self.thought_open {
            style::err_line("");
            self.thought_open = false;
        }
        if self.answer_open {
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout);
            let _ = stdout.flush();
            self.answer_open = false;
        }
    }

    /// Lines on stderr, after ending whatever line is open.
    fn err_lines(&mut self, text: &str) {
        self.break_lines();
        style::err_line(text);
    }

    fn show(&mut self, event: AgentEvent) {
        match event {
            AgentEvent::AgentText { text, .. } => {
                self.stop_spinner();
                if self.thought_open {
                    style::err_line("");
                    self.thought_open = false;
                }
                self.answer(&text);
            }
            AgentEvent::AgentThought { message_id, text } => {
                self.stop_spinner();
                // Each thought (a retry notice, say) on a line of its own.
                if self.thought_open && self.thought_id.as_ref() != Some(&message_id) {
                    style::err_line("");
                }
                self.thought_id = Some(message_id);
                self.flush_markdown(true);
                if self.answer_open && self.shared_terminal {
                    let _ = writeln!(std::io::stdout().lock());
                    self.answer_open = false;
                }
                let text = shown(&text, Lines::Many);
                let mut stderr = std::io::stderr().lock();
                let _ = write!(stderr, "{}", self.err_paint.dim(&text));
                let _ = stderr.flush();
                self.thought_open = !text.ends_with('\n');
            }
            AgentEvent::ToolCallStarted { id, title, kind, .. } => {
                self.calls.insert(id, CallState { title, kind, announced: false, nested: false });
            }
            AgentEvent::ToolCallUpdated { id, change } => self.tool_change(&id, change),
            AgentEvent::Plan(items) => self.plan(&items),
            // A sub-agent's steps: its tool calls, under the task's; its
            // prose is for the main agent.
            AgentEvent::Subagent(SubagentEvent { change: SubagentChange::Event(inner), .. }) => match *inner {
                AgentEvent::ToolCallStarted { id, title, kind, .. } => {
                    self.calls.insert(id, CallState { title, kind, announced: false, nested: true });
                }
                AgentEvent::ToolCallUpdated { id, change } => self.tool_change(&id, change),
                notice @ AgentEvent::Notice { .. } => self.show(notice),
                _ => {}
            },
            AgentEvent::Usage { .. } | AgentEvent::Subagent(_) => {}
            AgentEvent::UserText { text, .. } => {
                let paint = self.err_paint;
                self.err_lines(&format!("{} {}", paint.cyan("›"), paint.bold(&shown(&text, Lines::One))));
            }
            AgentEvent::Notice { text, .. } => {
                self.break_lines();
                style::warn_line(&shown(text.trim(), Lines::Many));
            }
            AgentEvent::PlanDocument { markdown } => self.plan_document(&markdown),
            AgentEvent::ModeChanged(mode) => {
                let paint = self.err_paint;
                self.err_lines(&paint.dim(&format!("mode: {}", mode.id())));
            }
            AgentEvent::Compaction(CompactionEvent::Started { .. }) => {
                let paint = self.err_paint;
                self.err_lines(&paint.dim(COMPACTION_THOUGHT.trim_end()));
            }
            AgentEvent::Compaction(CompactionEvent::Finished { outcome: CompactionOutcome::Failed(why), .. }) => {
                self.break_lines();
                style::warn_line(&format!("could not summarise the conversation: {}", shown(&why, Lines::One)));
            }
            AgentEvent::Compaction(CompactionEvent::Summary { .. } | CompactionEvent::Finished { .. }) => {}
        }
    }

    /// The plan written in plan mode: a Markdown block (rendered in chat; in
    /// `exec`, on stdout, where it is the answer).
    fn plan_document(&mut self, markdown: &str) {
        self.break_lines();
        match self.output {
            Output::Chat => {
                style::err_line(&self.err_paint.bold("Plan:"));
                let safe = shown(markdown, Lines::Many);
                let rendered = self.skin.term_text(&safe).to_string();
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "{}", rendered.trim_end());
                let _ = stdout.flush();
            }
            Output::Plain | Output::Json => {
                let text = if std::io::stdout().is_terminal() {
                    shown(markdown, Lines::Many)
                } else {
                    std::borrow::Cow::Borrowed(markdown)
                };
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "{}", text.trim_end());
                let _ = stdout.flush();
            }
        }
    }

    fn answer(&mut self, text: &str) {
        if self.output == Output::Chat {
            self.markdown.push(text);
            self.flush_markdown(false);
            return;
        }
        // On a terminal, nothing from the model may move the cursor or
        // recolour the screen; a pipe gets the answer as it was written.
        let text =
            if std::io::stdout().is_terminal() { shown(text, Lines::Many) } else { std::borrow::Cow::Borrowed(text) };
        let mut stdout = std::io::stdout().lock();
        let _ = write!(stdout, "{text}");
        let _ = stdout.flush();
        if !text.is_empty() {
            self.answer_open = !text.ends_with('\n');
        }
    }

    /// Renders the complete blocks of Markdown (all of it when `all`).
    fn flush_markdown(&mut self, all: bool) {
        let ready = if all { self.markdown.take_all() } else { self.markdown.take_complete() };
        if ready.trim().is_empty() {
            return;
        }
        let rendered = render_markdown(&self.skin, &ready);
        let mut stdout = std::io::stdout().lock();
        let _ = write!(stdout, "{rendered}");
        let _ = stdout.flush();
        self.answer_open = !rendered.ends_with('\n');
    }

    fn tool_change(&mut self, id: &str, change: ToolCallChange) {
        let paint = self.err_paint;
        let chat = self.output == Output::Chat;
        let Some(call) = self.calls.get_mut(id) else { return };
        if let Some(title) = change.title {
            call.title = title;
        }
        if let Some(kind) = change.kind {
            call.kind = kind;
        }
        let title = shown(&call.title, Lines::One).into_owned();
        let kind = call.kind;
        let nested = call.nested;
        let mut lines = Vec::new();
        match change.status {
            Some(ToolCallStatus::InProgress) if !call.announced => {
                call.announced = true;
                lines.push(format!("{} {}", paint.cyan("▸"), paint.bold(&title)));
            }
            Some(ToolCallStatus::Completed) => {
                if !call.announced {
                    call.announced = true;
                    lines.push(format!("{} {}", paint.cyan("▸"), paint.bold(&title)));
                }
                lines.extend(result_lines(paint, kind, change.content.as_deref(), chat, true));
            }
            Some(ToolCallStatus::Failed) => {
                if !call.announced {
                    call.announced = true;
                    lines.push(format!("{} {}", paint.cyan("▸"), paint.bold(&title)));
                }
                lines.extend(result_lines(paint, kind, change.content.as_deref(), chat, false));
            }
            _ => {}
        }
        if nested {
            lines = lines
                .into_iter()
                .map(|line| line.lines().map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n"))
                .collect();
        }
        if !lines.is_empty() {
            self.err_lines(lines.join("\n").trim_end());
        }
    }

    fn plan(&mut self, items: &[PlanItem]) {
        let paint = self.err_paint;
        let mut lines = vec![paint.bold("Plan:")];
        for item in items {
            let content = shown(&item.content, Lines::One);
            lines.push(match item.status {
                PlanStatus::Completed => format!("  {} {}", paint.green("[x]"), paint.dim(&content)),
                PlanStatus::InProgress => format!("  {} {}", paint.yellow("[~]"), paint.bold(&content)),
                PlanStatus::Pending => format!("  [ ] {content}"),
            });
        }
        self.err_lines(&lines.join("\n"));
    }
}

/// The short lines that tell how a call ended: the first line of its text,
/// or its diffs (whole in chat, counted in exec).
fn result_lines(paint: Paint, kind: ToolKind, content: Option<&[DisplayContent]>, chat: bool, ok: bool) -> Vec<String> {
    let mut lines = Vec::new();
    let mut said = false;
    for item in content.unwrap_or_default() {
        match item {
            DisplayContent::Diff { path, old_text, new_text } => {
                let name = path.display().to_string();
                if chat {
                    lines.push(style::diff(paint, &name, old_text.as_deref(), new_text, CHAT_DIFF_LINES));
                } else {
                    let (added, removed) = style::diff_stat(old_text.as_deref(), new_text);
                    let stat = format!("+{added} -{removed}");
                    lines.push(format!("  {} {}", paint.dim(&shown(&name, Lines::One)), paint.green(&stat)));
                }
                said = true;
            }
            // Results of reads and searches are for the model; a command's
            // or a failure's first line is worth a glance.
            DisplayContent::Text(text) if !said && (!ok || kind == ToolKind::Execute) => {
                let first = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with("```"));
                if let Some(first) = first {
                    let cut: String = first.chars().take(120).collect();
                    let line = shown(&cut, Lines::One);
                    lines.push(if ok { format!("  {}", paint.dim(&line)) } else { format!("  {}", paint.red(&line)) });
                    said = true;
                }
            }
            _ => {}
        }
    }
    if !ok && !said {
        lines.push(format!("  {}", paint.red("failed")));
    }
    lines
}

/// Column bars (`|`) in one line of a block past which the block is shown
/// as plain text: termimad lays a table out in time quadratic in its columns (a
/// 4,000-column row took 1.5 s, 100,000 would take many minutes), and no
/// table worth reading has this many.
const MAX_TABLE_CELLS: usize = 64;

/// A block of the model's answer for the terminal, escaped
/// ([`shown`]): rendered as Markdown, or as the plain text it is when a
/// line of it would be a table too wide to lay out in bounded time.
fn render_markdown(skin: &termimad::MadSkin, block: &str) -> String {
    let safe = shown(block, Lines::Many);
    if safe.lines().any(|line| line.matches('|').nth(MAX_TABLE_CELLS).is_some()) {
        return safe.into_owned();
    }
    skin.term_text(&safe).to_string()
}

/// Answer text waiting to be rendered: Markdown is rendered a block at a
/// time, once the block is complete (a blank line outside a code fence).
#[derive(Default)]
struct Markdown {
    pending: String,
}

impl Markdown {
    fn push(&mut self, text: &str) {
        self.pending.push_str(text);
    }

    /// The complete blocks, taken out.
    fn take_complete(&mut self) -> String {
        let mut in_fence = false;
        let mut cut = None;
        let mut offset = 0;
        let mut previous_blank = false;
        for line in self.pending.split_inclusive('\n') {
            let end = offset + line.len();
            let complete = line.ends_with('\n');
            if !complete {
                break;
            }
            let trimmed = line.trim();
            if trimmed.starts_with("```") {
                in_fence = !in_fence;
                if !in_fence {
                    cut = Some(end);
                }
            } else if trimmed.is_empty() && !in_fence && !previous_blank {
                cut = Some(end);
            }
            previous_blank = trimmed.is_empty();
            offset = end;
        }
        match cut {
            Some(at) => self.pending.drain(..at).collect(),
            None => String::new(),
        }
    }

    fn take_all(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model's Markdown nested 100,000 deep (block quotes, lists, links,
    /// emphasis, a code span; issue 29) renders as `chat` renders it,
    /// without a stack overflow: termimad reads a line and its spans at a
    /// time, never as a tree. A table 100,000 columns wide (termimad's
    /// layout is quadratic in columns: many minutes) is shown as the plain
    /// text it is.
    #[test]
    fn deeply_nested_markdown_renders() {
        let deep = 100_000;
        let skin = termimad::MadSkin::no_style();
        for text in [
            format!("{} quoted\n", ">".repeat(deep)),
            format!("{}item\n", "* ".repeat(deep)),
            format!("{}\n", "  - a\n".repeat(deep)),
            format!("{}x{}\n", "[".repeat(deep), "](u)".repeat(deep)),
            format!("{}x{}\n", "**".repeat(deep), "**".repeat(deep)),
            format!("{}x{}\n", "*_".repeat(deep), "_*".repeat(deep)),
            format!("{}\n", "`".repeat(deep)),
        ] {
            // It ends, and on this thread's stack (some shapes render empty).
            render_markdown(&skin, &text);
        }
        let wide = format!("{}|\n", "|a".repeat(deep));
        assert_eq!(render_markdown(&skin, &wide), wide, "shown as it is");
        let wide_table = format!("|h|h|\n|-|-|\n{}", "|a|b|\n|c|".to_owned() + &"d|".repeat(MAX_TABLE_CELLS) + "\n");
        assert_eq!(render_markdown(&skin, &wide_table), wide_table);
        // A table of ordinary width is still laid out as one.
        let table = "|h|i|\n|-|-|\n|a|b|\n";
        assert_ne!(render_markdown(&skin, table), table);
    }

    #[test]
    fn markdown_is_cut_at_blank_lines_outside_fences() {
        let mut markdown = Markdown::default();
        markdown.push("# Title\n\nSome **bold");
        assert_eq!(markdown.take_complete(), "# Title\n\n");
        markdown.push("** text\n```rust\nfn a() {}\n\nfn b() {}\n");
        assert_eq!(markdown.take_complete(), "", "no cut inside a fence");
        markdown.push("```\nafter");
        assert_eq!(markdown.take_complete(), "Some **bold** text\n```rust\nfn a() {}\n\nfn b() {}\n```\n");
        assert_eq!(markdown.take_all(), "after");
    }
}
