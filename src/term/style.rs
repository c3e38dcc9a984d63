//! Colour on the terminal: only where the stream is a terminal and
//! `NO_COLOR` is not set (<https://no-color.org>). Everything shown from the
//! model, the workspace or a tool passes through [`crate::present::text::shown`]
//! first, so no escape sequence of theirs reaches the screen.

use std::io::{IsTerminal, Write};

use crossterm::style::{Color, Stylize};

/// Whether to colour what goes to one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paint {
    colour: bool,
}

/// Whether `NO_COLOR` asks for no colour (set and not empty).
fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty())
}

impl Paint {
    /// For stderr.
    pub fn stderr() -> Paint {
        Paint { colour: std::io::stderr().is_terminal() && !no_color() }
    }

    /// For stdout.
    pub fn stdout() -> Paint {
        Paint { colour: std::io::stdout().is_terminal() && !no_color() }
    }

    /// No colour, wherever it goes.
    #[cfg(test)]
    pub fn plain() -> Paint {
        Paint { colour: false }
    }

    /// Whether colour is on.
    pub fn on(self) -> bool {
        self.colour
    }

    fn with(self, text: &str, style: impl FnOnce(&str) -> String) -> String {
        if self.colour { style(text) } else { text.to_owned() }
    }

    /// Less important: reasoning, results.
    pub fn dim(self, text: &str) -> String {
        self.with(text, |t| t.dim().to_string())
    }

    /// Emphasis: tool titles, questions.
    pub fn bold(self, text: &str) -> String {
        self.with(text, |t| t.bold().to_string())
    }

    /// Failures and removed lines.
    pub fn red(self, text: &str) -> String {
        self.with(text, |t| t.with(Color::Red).to_string())
    }

    /// Success and added lines.
    pub fn green(self, text: &str) -> String {
        self.with(text, |t| t.with(Color::Green).to_string())
    }

    /// Warnings and hunk headers.
    pub fn yellow(self, text: &str) -> String {
        self.with(text, |t| t.with(Color::Yellow).to_string())
    }

    /// Keys to press.
    pub fn cyan(self, text: &str) -> String {
        self.with(text, |t| t.with(Color::Cyan).to_string())
    }
}

/// Writes one line to stderr, ignoring a closed stream (nothing to tell then).
pub fn err_line(line: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{line}");
    let _ = stderr.flush();
}

/// A warning line on stderr. `text` is shown through
/// [`crate::present::text::shown`]: a warning may quote a stored session (an
/// error reading its log) or the workspace.
pub fn warn_line(text: &str) {
    let paint = Paint::stderr();
    let text = crate::present::text::shown(text, crate::present::text::Lines::Many);
    err_line(&format!("{} {text}", paint.yellow("lathe:")));
}

/// A unified diff of `old` -> `new` for `path`, coloured when `paint` is on,
/// at most `max_lines` lines (a note says how many more there were).
pub fn diff(paint: Paint, path: &str, old: Option<&str>, new: &str, max_lines: usize) -> String {
    let lines = diff_lines(path, old, new);
    let mut out = String::new();
    for line in lines.iter().take(max_lines) {
        out.push_str(&diff_colour(paint, line));
        out.push('\n');
    }
    if lines.len() > max_lines {
        out.push_str(&paint.dim(&format!("… {} more lines\n", lines.len() - max_lines)));
    }
    out
}

/// The lines of a unified diff of `old` -> `new` for `path`, uncoloured,
/// each shown through [`crate::present::text::shown`] as one line.
pub fn diff_lines(path: &str, old: Option<&str>, new: &str) -> Vec<String> {
    let diff = similar::TextDiff::from_lines(old.unwrap_or(""), new);
    let unified = diff.unified_diff().context_radius(3).header(path, path).to_string();
    unified
        .lines()
        .map(|line| crate::present::text::shown(line, crate::present::text::Lines::One).into_owned())
        .collect()
}

/// One line of [`diff_lines`] in its colour: headers bold, added green,
/// removed red, hunks cyan.
pub fn diff_colour(paint: Paint, line: &str) -> String {
    if line.starts_with("+++") || line.starts_with("---") {
        paint.bold(line)
    } else if line.starts_with('+') {
        paint.green(line)
    } else if line.starts_with('-') {
        paint.red(line)
    } else if line.starts_with("@@") {
        paint.cyan(line)
    } else {
        line.to_owned()
    }
}

/// Lines added and removed between `old` and `new`.
pub fn diff_stat(old: Option<&str>, new: &str) -> (usize, usize) {
    let diff = similar::TextDiff::from_lines(old.unwrap_or(""), new);
    let (mut added, mut removed) = (0, 0);
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Insert => added += 1,
            similar::ChangeTag::Delete => removed += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    (added, removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chat's diffs: added lines green, removed red, headers bold, hunks
    /// cyan when colour is on; the same text without a single escape when it
    /// is off (not a terminal, or `NO_COLOR`); long diffs are cut with a count.
    #[test]
    fn diffs_are_coloured_only_when_colour_is_on() {
        let (old, new) = ("keep\nold line\n", "keep\nnew line\n");
        let plain = diff(Paint { colour: false }, "src/a.rs", Some(old), new, 100);
        assert!(!plain.contains('\u{1b}'), "{plain:?}");
        for line in ["--- src/a.rs", "+++ src/a.rs", "-old line", "+new line", " keep"] {
            assert!(plain.lines().any(|shown| shown == line), "{line:?} in {plain:?}");
        }
        let coloured = diff(Paint { colour: true }, "src/a.rs", Some(old), new, 100);
        assert!(coloured.contains(&"+new line".with(Color::Green).to_string()), "{coloured:?}");
        assert!(coloured.contains(&"-old line".with(Color::Red).to_string()), "{coloured:?}");
        let cut = diff(Paint { colour: false }, "a", None, &"x\n".repeat(50), 10);
        assert_eq!(cut.lines().count(), 11, "{cut}");
        assert!(cut.ends_with("more lines\n"), "{cut}");
    }
}
