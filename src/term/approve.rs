//! The terminal's [`Approver`]: the full command or diff on stderr, then one
//! key: y (allow once), a (always), n (no), d (deny always), o (run outside
//! the sandbox, when offered). Keys are read from the controlling terminal
//! in raw mode, so a prompt piped on stdin does not stop `exec --mode ask`
//! from asking. Ctrl-C at the question cancels the turn. Without a terminal
//! the call is declined and the model is told so.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use futures_util::future::BoxFuture;

use super::events::Screen;
use super::lock;
use super::style::{self, Paint};
use crate::permission::{Answer, ApprovalError, Approver, PermissionQuestion};
use crate::present::text::{Lines, shown};
use crate::session::Session;
use crate::tools::DisplayContent;

/// Longest diff shown in a question, in lines.
const QUESTION_DIFF_LINES: usize = 200;

/// Asks on the terminal.
pub struct TermApprover {
    /// Where the question goes (its open lines are ended first).
    pub screen: Arc<Mutex<Screen>>,
    /// Cancelled by Ctrl-C at the question.
    pub session: Arc<Session>,
}

/// What a key press meant.
enum Pressed {
    Answer(Answer),
    Interrupt,
}

/// The key for an answer.
fn key_of(answer: Answer) -> char {
    match answer {
        Answer::AllowOnce => 'y',
        Answer::AllowAlways => 'a',
        Answer::AllowOutside => 'o',
        Answer::RejectOnce => 'n',
        Answer::RejectAlways => 'd',
        Answer::Cancelled => 'c',
    }
}

/// Sets its flag when dropped: the key reader stops when the question is withdrawn.
struct Withdraw(Arc<AtomicBool>);

impl Drop for Withdraw {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl Approver for TermApprover {
    fn ask<'a>(&'a self, question: &'a PermissionQuestion) -> BoxFuture<'a, Result<Answer, ApprovalError>> {
        Box::pin(async move {
            lock(&self.screen).break_lines();
            let paint = Paint::stderr();
            style::err_line(&render_question(paint, question));
            let keys: Vec<(char, Answer)> = question.choices.iter().map(|c| (key_of(c.answer), c.answer)).collect();
            let stop = Arc::new(AtomicBool::new(false));
            let _withdraw = Withdraw(Arc::clone(&stop));
            let reading = {
                let keys = keys.clone();
                tokio::task::spawn_blocking(move || read_key(&keys, &stop))
            };
            match reading.await {
                Ok(Ok(Some(Pressed::Answer(answer)))) => {
                    let label = question.choices.iter().find(|c| c.answer == answer).map(|c| c.label.as_str());
                    style::err_line(&paint.dim(&format!("  → {}", shown(label.unwrap_or(""), Lines::One))));
                    Ok(answer)
                }
                Ok(Ok(Some(Pressed::Interrupt))) => {
                    style::err_line(&paint.dim("  → cancelled"));
                    self.session.cancel_turns();
                    Ok(Answer::Cancelled)
                }
                Ok(Ok(None)) => Ok(Answer::Cancelled),
                Ok(Err(err)) => {
                    style::warn_line(&format!(
                        "no terminal to ask on ({err}); declined. Choose what may run without asking with --mode."
                    ));
                    Ok(Answer::RejectOnce)
                }
                Err(err) => Err(ApprovalError(format!("asking on the terminal failed: {err}"))),
            }
        })
    }
}

/// The question: the call, the full command or diff, the keys.
fn render_question(paint: Paint, question: &PermissionQuestion) -> String {
    let mut out = format!("{} {}\n", paint.yellow("?"), paint.bold(&shown(&question.title, Lines::One)));
    for content in &question.preview {
        match content {
            DisplayContent::Text(text) => {
                for line in shown(text, Lines::Many).lines() {
                    out.push_str(&format!("  {line}\n"));
                }
            }
            DisplayContent::Diff { path, old_text, new_text } => {
                let name = path.display().to_string();
                out.push_str(&style::diff(paint, &name, old_text.as_deref(), new_text, QUESTION_DIFF_LINES));
            }
            DisplayContent::Terminal(_) | DisplayContent::Image { .. } | DisplayContent::ResourceLink { .. } => {}
        }
    }
    let keys: Vec<String> = question
        .choices
        .iter()
        .map(|c| format!("{} {}", paint.cyan(&format!("[{}]", key_of(c.answer))), shown(&c.label, Lines::One)))
        .collect();
    out.push_str(&format!("  {}", keys.join("  ")));
    out
}

/// Waits for one of `keys` (or Ctrl-C) on the terminal, in raw mode;
/// `None` once `stop` is set.
fn read_key(keys: &[(char, Answer)], stop: &AtomicBool) -> std::io::Result<Option<Pressed>> {
    crossterm::terminal::enable_raw_mode()?;
    let result = (|| {
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            if !event::poll(Duration::from_millis(100))? {
                continue;
            }
            let Event::Key(key) = event::read()? else { continue };
            if key.kind != KeyEventKind::Press {
                continue;
            }
            match key.code {
                KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                    return Ok(Some(Pressed::Interrupt));
                }
                KeyCode::Char(c) => {
                    let c = c.to_ascii_lowercase();
                    if let Some((_, answer)) = keys.iter().find(|(k, _)| *k == c) {
                        return Ok(Some(Pressed::Answer(*answer)));
                    }
                }
                KeyCode::Esc => {
                    if let Some((_, answer)) = keys.iter().find(|(_, a)| *a == Answer::RejectOnce) {
                        return Ok(Some(Pressed::Answer(*answer)));
                    }
                }
                _ => {}
            }
        }
    })();
    let _ = crossterm::terminal::disable_raw_mode();
    result
}
