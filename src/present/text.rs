//! Text from the model, the workspace or an MCP server made safe to show,
//! on a terminal or in an editor: every tool-call title, plan entry,
//! permission option and command description passes through [`shown`] on
//! its way out, so a carriage return, an ANSI escape or a bidi override can
//! never make a title (or a command in a permission question) look like
//! something else.

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
