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

/// `value` as one line of JSON that is safe on a terminal: every character
/// [`shown`] escapes is written as a `\uXXXX` escape inside its string (C0
/// controls as serde_json writes them, the others here), so the line holds
/// no escape sequence, C1 control or invisible character, and a JSON reader
/// gets back exactly the same value. What `lathe exec --json` and `lathe
/// sessions list --json` print.
pub fn json_line<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    let mut out = Vec::with_capacity(128);
    value.serialize(&mut serde_json::Serializer::with_formatter(&mut out, Visible))?;
    // Only valid UTF-8 is written: serde_json's strings and ASCII escapes.
    String::from_utf8(out).map_err(|err| serde_json::Error::io(std::io::Error::other(err)))
}

/// The compact formatter, with the hidden characters of strings escaped.
struct Visible;

impl serde_json::ser::Formatter for Visible {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut rest = fragment;
        while let Some((at, c)) = rest.char_indices().find(|(_, c)| is_hidden(*c)) {
            writer.write_all(&rest.as_bytes()[..at])?;
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(writer, "\\u{unit:04x}")?;
            }
            rest = &rest[at + c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }
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

    /// JSON for a terminal: the same value back, and not one character in
    /// the line that [`shown`] would escape (C0, DEL, C1, bidi, invisible,
    /// tags beyond the BMP), every family of escape sequence included.
    #[test]
    fn json_lines_are_the_same_value_with_nothing_hidden() {
        let hostile = "osc52 \u{1b}]52;c;cHduZWQ=\u{7} title \u{1b}]0;pwned\u{7} link \u{1b}]8;;http://evil\u{1b}\\x\u{1b}]8;;\u{1b}\\ \
                       clear \u{1b}[2J\u{1b}[H up \u{1b}[5A c1 \u{9b}31m \u{9d}0;x\u{9c} bare \u{1b} bel \u{7} bs \u{8} \
                       cr \r del \u{7f} bidi \u{202e}txt zw \u{200b} tag \u{e0041} ok 日本語 🦀";
        let mut value = serde_json::json!({"title": hostile, "nested": [hostile]});
        value[hostile] = 1.into();
        let line = json_line(&value).unwrap();
        assert!(!line.chars().any(is_hidden), "{line:?}");
        assert!(line.contains("\\u009b") && line.contains("\\u202e") && line.contains("\\udb40\\udc41"), "{line}");
        assert!(line.contains("日本語 🦀"), "visible text is left as it is: {line}");
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back, value);
    }
}
