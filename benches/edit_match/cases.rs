//! The matcher benchmark's cases (issue 31): a 10,000-line file and a
//! 50-line `old_string` from its middle, with one mistake per level of the
//! ladder (see `lathe::tools::edit_match`), plus an `old_string` that is
//! found at no level (the whole ladder, then the closest-text hint). Shared
//! with `suite::edit_match`, which checks every case lands where it should.

use lathe::tools::edit_match::{Correction, Located, Refusal};

/// Lines in the file.
pub const FILE_LINES: usize = 10_000;
/// Lines in `old_string`.
pub const OLD_LINES: usize = 50;
/// Where `old_string` starts (0-based line).
const AT: usize = 5_005;

/// One benchmark case.
pub struct Case {
    /// What the level is.
    pub name: &'static str,
    pub file: String,
    pub old: String,
    pub new: String,
    /// Whether the outcome is the one this level must give.
    pub expect: fn(&Result<Located, Refusal>) -> bool,
}

/// A Rust-like file: functions of seven lines, four-space (or tab)
/// indentation, a string literal with ASCII (or curly) quotes, trailing
/// spaces on some lines.
fn file(tabs: bool, curly: bool, trailing: bool) -> Vec<String> {
    let indent = |depth: usize| if tabs { "\t".repeat(depth) } else { "    ".repeat(depth) };
    let (open, close) = if curly { ('\u{201c}', '\u{201d}') } else { ('"', '"') };
    let mut lines = Vec::with_capacity(FILE_LINES);
    let mut n = 0;
    while lines.len() < FILE_LINES {
        let end = if trailing { "  " } else { "" };
        lines.push(format!("fn item_{n}(value: u64) -> u64 {{"));
        lines.push(format!("{}let label = {open}item {n}{close};{end}", indent(1)));
        lines.push(format!("{}if value > {n} {{", indent(1)));
        lines.push(format!("{}return value - {n};{end}", indent(2)));
        lines.push(format!("{}}}", indent(1)));
        lines.push(format!("{}value + {n}", indent(1)));
        lines.push("}".to_owned());
        n += 1;
    }
    lines.truncate(FILE_LINES);
    lines
}

fn joined(lines: &[String]) -> String {
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// `old_string` for `lines`: the 50 lines from [`AT`], and `new_string`:
/// the same with one line changed.
fn old_new(lines: &[String]) -> (String, String) {
    let old = lines[AT..AT + OLD_LINES].join("\n");
    let new = old.replacen("return value -", "return value.saturating_sub(1) -", 1);
    (old, new)
}

fn exact(outcome: &Result<Located, Refusal>) -> bool {
    outcome.as_ref().is_ok_and(|located| located.correction.is_exact() && located.splices.len() == 1)
}

fn corrected(outcome: &Result<Located, Refusal>, check: fn(&Correction) -> bool) -> bool {
    outcome.as_ref().is_ok_and(|located| check(&located.correction) && located.splices.len() == 1)
}

/// Every case, strictest level first, then the not-found one.
pub fn all() -> Vec<Case> {
    let plain = file(false, false, false);
    let (old, new) = old_new(&plain);
    let mut cases = vec![Case { name: "exact", file: joined(&plain), old, new, expect: exact }];

    let trailing = file(false, false, true);
    let (old, new) = old_new(&plain);
    cases.push(Case {
        name: "trailing whitespace",
        file: joined(&trailing),
        old,
        new,
        expect: |o| corrected(o, |c| c.trailing_whitespace && c.indentation.is_none()),
    });

    let shifted: Vec<String> = plain.iter().map(|line| format!("    {line}")).collect();
    let (old, new) = old_new(&plain);
    cases.push(Case {
        name: "indentation (4 more)",
        file: joined(&shifted),
        old,
        new,
        expect: |o| corrected(o, |c| c.indentation.is_some()),
    });

    let tabs = file(true, false, false);
    let (old, new) = old_new(&plain);
    cases.push(Case {
        name: "spaces for tabs",
        file: joined(&tabs),
        old,
        new,
        expect: |o| corrected(o, |c| c.indentation.is_some()),
    });

    let curly = file(false, true, false);
    let (old, new) = old_new(&plain);
    cases.push(Case {
        name: "Unicode punctuation",
        file: joined(&curly),
        old,
        new,
        expect: |o| corrected(o, |c| c.punctuation),
    });

    let (old, new) = old_new(&plain);
    cases.push(Case {
        name: "blank lines at the ends",
        file: joined(&plain),
        old: format!("\n\n{old}\n\n\n"),
        new: format!("\n\n{new}\n\n\n"),
        expect: |o| corrected(o, |c| c.blank_lines),
    });

    let numbered = |text: &str| -> String {
        text.split('\n')
            .enumerate()
            .map(|(i, line)| format!("{:>6}\t{line}", AT + 1 + i))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let (old, new) = old_new(&plain);
    cases.push(Case {
        name: "line numbers",
        file: joined(&plain),
        old: numbered(&old),
        new: numbered(&new),
        expect: |o| corrected(o, |c| c.line_numbers),
    });

    let escaped = |text: &str| text.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
    let (old, new) = old_new(&plain);
    cases.push(Case {
        name: "escapes",
        file: joined(&plain),
        old: escaped(&old),
        new: escaped(&new),
        expect: |o| corrected(o, |c| c.escapes),
    });

    let (old, new) = old_new(&plain);
    cases.push(Case {
        name: "not found (one token differs)",
        file: joined(&plain),
        old: old.replacen("value + ", "value * ", 1),
        new,
        expect: |o| matches!(o, Err(Refusal::NotFound(_))),
    });
    cases
}
