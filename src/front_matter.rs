//! The front matter of the Markdown files that define agents
//! ([`crate::agents`]) and skills ([`crate::skills`]): a block between two
//! `---` lines at the top of the file, then the body.
//!
//! The block is read line by line, never as a tree, so a hostile file of
//! nested brackets or lists costs nothing (issue 29). It reads the part of
//! YAML these files use in practice:
//!
//! - `key: value`, the value optionally quoted (`'...'` or `"..."`); an
//!   unquoted value may hold further colons (`description: Use when: ...`);
//! - a value continued on indented lines (a plain multi-line scalar), or a
//!   block scalar (`key: >`, `key: |`, with `-` / `+`): folded into one line
//!   (`>`, plain) or kept line by line (`|`);
//! - `key:` followed by indented `- item` lines (a list);
//! - indented `child: value` lines under a key (a map, like the skills'
//!   `metadata:`): kept with their parent, never read as top-level keys;
//! - blank lines and `# comments`.
//!
//! Any other line is an error, and a file whose front matter cannot be read
//! is skipped by its caller with a warning naming why.

/// One top-level key of a front matter block.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Field {
    key: String,
    /// Its value, unquoted; a block scalar's lines joined.
    value: String,
    /// Its `- item` lines, unquoted.
    items: Vec<String>,
}

/// A file's front matter: its top-level keys, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrontMatter {
    fields: Vec<Field>,
}

/// How the indented lines after a key are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    /// Continued plain text, list items or map children.
    Plain,
    /// `>`: lines folded into one.
    Folded,
    /// `|`: lines kept.
    Literal,
}

impl FrontMatter {
    /// The value of `key` (the last one, when a key is repeated), unquoted
    /// and trimmed; `None` when the file does not set it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.field(key).map(|field| field.value.as_str())
    }

    /// `key` as a list: its `- item` lines, or its value as `[a, b]` or
    /// `a, b`; `None` when the file does not set it, or leaves it empty.
    pub fn list(&self, key: &str) -> Option<Vec<String>> {
        let field = self.field(key)?;
        if !field.items.is_empty() {
            return Some(field.items.clone());
        }
        if field.value.is_empty() {
            return None;
        }
        let list = field.value.strip_prefix('[').and_then(|v| v.strip_suffix(']')).unwrap_or(&field.value);
        Some(list.split(',').map(|item| unquote(item.trim()).to_owned()).filter(|item| !item.is_empty()).collect())
    }

    fn field(&self, key: &str) -> Option<&Field> {
        self.fields.iter().rev().find(|field| field.key == key)
    }
}

/// Splits `text` into its front matter and its body (after the closing
/// `---` line); `Err` says why the front matter is missing or unreadable.
pub fn split(text: &str) -> Result<(FrontMatter, &str), String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or("no front matter (a first line `---`)")?;
    let mut block_end = None;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            block_end = Some((offset, offset + line.len()));
            break;
        }
        offset += line.len();
    }
    let (end, body_start) = block_end.ok_or("the front matter is not closed by a line `---`")?;
    Ok((parse(&rest[..end])?, &rest[body_start..]))
}

/// Reads the lines of a front matter block (see the module doc).
fn parse(block: &str) -> Result<FrontMatter, String> {
    let mut fields: Vec<Field> = Vec::new();
    let mut mode = Block::Plain;
    let mut scalar: Vec<&str> = Vec::new();
    let finish = |fields: &mut Vec<Field>, mode: Block, scalar: &mut Vec<&str>| {
        if let Some(field) = fields.last_mut()
            && !scalar.is_empty()
        {
            field.value = join_block(mode, scalar);
        }
        scalar.clear();
    };
    for line in block.lines() {
        let trimmed = line.trim();
        // YAML lets a key's list start at the key's own indentation.
        let item_of_last = trimmed.starts_with("- ")
            && mode == Block::Plain
            && fields.last().is_some_and(|field| field.value.is_empty());
        let indented = line.starts_with([' ', '\t']) || item_of_last;
        if indented || (trimmed.is_empty() && mode != Block::Plain) {
            let Some(field) = fields.last_mut() else {
                return Err(format!("an indented line before any key: {}", shown(trimmed)));
            };
            match mode {
                Block::Folded | Block::Literal => scalar.push(line),
                Block::Plain if trimmed.is_empty() || trimmed.starts_with('#') => {}
                Block::Plain => {
                    if let Some(item) = trimmed.strip_prefix("- ").or_else(|| (trimmed == "-").then_some("")) {
                        field.items.push(unquote(item).to_owned());
                    } else if field.items.is_empty() && !is_map_child(trimmed) {
                        // A plain scalar continued on the next line.
                        if !field.value.is_empty() {
                            field.value.push(' ');
                        }
                        field.value.push_str(unquote(trimmed));
                    }
                    // Else a child of a map (`metadata:`): kept with its parent.
                }
            }
            continue;
        }
        finish(&mut fields, mode, &mut scalar);
        mode = Block::Plain;
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(format!("a front matter line is not `key: value`: {}", shown(trimmed)));
        };
        let value = value.trim();
        mode = match value.chars().next() {
            Some('>') if is_block_indicator(value) => Block::Folded,
            Some('|') if is_block_indicator(value) => Block::Literal,
            _ => Block::Plain,
        };
        let value = if mode == Block::Plain { unquote(value).to_owned() } else { String::new() };
        fields.push(Field { key: key.trim().to_owned(), value, items: Vec::new() });
    }
    finish(&mut fields, mode, &mut scalar);
    Ok(FrontMatter { fields })
}

/// `>`, `|`, with a chomping (`-`, `+`) and an indentation digit, in either order.
fn is_block_indicator(value: &str) -> bool {
    let value = value.split(" #").next().unwrap_or(value).trim_end();
    value.len() <= 3 && value.chars().skip(1).all(|c| c == '-' || c == '+' || c.is_ascii_digit())
}

/// Whether an indented line is a map's `child: value` (a key of one word).
fn is_map_child(line: &str) -> bool {
    line.split_once(':').is_some_and(|(key, value)| {
        !key.is_empty() && !key.contains(char::is_whitespace) && (value.is_empty() || value.starts_with([' ', '\t']))
    })
}

/// A block scalar's lines: folded into one line (`>`), or kept with their
/// common indentation removed (`|`); trimmed at both ends.
fn join_block(mode: Block, lines: &[&str]) -> String {
    match mode {
        Block::Literal => {
            let indent = lines
                .iter()
                .filter(|line| !line.trim().is_empty())
                .map(|line| line.len() - line.trim_start().len())
                .min()
                .unwrap_or(0);
            let kept: Vec<&str> = lines.iter().map(|line| line.get(indent..).unwrap_or("").trim_end()).collect();
            kept.join("\n").trim().to_owned()
        }
        Block::Folded | Block::Plain => {
            lines.iter().map(|line| line.trim()).filter(|line| !line.is_empty()).collect::<Vec<_>>().join(" ")
        }
    }
}

/// A value without its quotes.
pub fn unquote(value: &str) -> &str {
    let value = value.trim();
    value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
        .unwrap_or(value)
}

/// The start of a line, for a warning.
fn shown(line: &str) -> String {
    line.chars().take(60).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_lists_and_the_body() {
        let (front, body) = split(
            "---\nname: reviewer\ndescription: \"Reviews: a diff\"\ntools:\n  - Read\n- 'grep'\n---\nYou review.\n",
        )
        .unwrap();
        assert_eq!(front.get("name"), Some("reviewer"));
        assert_eq!(front.get("description"), Some("Reviews: a diff"));
        assert_eq!(front.list("tools"), Some(vec!["Read".to_owned(), "grep".to_owned()]));
        assert_eq!(front.get("model"), None);
        assert_eq!(body, "You review.\n");
        let (inline, _) = split("---\ntools: [a, \"b\"]\nmore: a, b\n---\n").unwrap();
        assert_eq!(inline.list("tools"), Some(vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(inline.list("more"), Some(vec!["a".to_owned(), "b".to_owned()]));
    }

    /// The skills' front matter as people write it: block scalars, a
    /// description continued on the next line, a `metadata` map whose
    /// `name` is not the skill's.
    #[test]
    fn block_scalars_and_maps() {
        let text = "\u{feff}---\r\nname: pdf\r\ndescription: >-\r\n  Extracts text.\r\n  Use when: PDFs.\r\n\r\nlicense: MIT\r\nmetadata:\r\n  name: not-the-skill\r\n  version: \"1.0\"\r\ncompatibility: |\r\n  line one\r\n    line two\r\nnote: starts here\r\n  and goes on\r\n---\r\nBody";
        let (front, body) = split(text).unwrap();
        assert_eq!(front.get("name"), Some("pdf"));
        assert_eq!(front.get("description"), Some("Extracts text. Use when: PDFs."));
        assert_eq!(front.get("license"), Some("MIT"));
        assert_eq!(front.get("metadata"), Some(""));
        assert_eq!(front.get("compatibility"), Some("line one\n  line two"));
        assert_eq!(front.get("note"), Some("starts here and goes on"));
        assert_eq!(body, "Body");
    }

    #[test]
    fn what_is_not_front_matter() {
        for broken in [
            "no front matter",
            "---\nname: x\nnever closed",
            "---\nnot a key value line\n---\n",
            "---\n  indented first\n---\n",
        ] {
            assert!(split(broken).is_err(), "{broken:?}");
        }
        let (front, body) = split("---\n---\n").unwrap();
        assert_eq!((front, body), (FrontMatter::default(), ""));
        // `----` or `---x` do not close the block.
        assert!(split("---\na: b\n----\n").is_err());
    }
}
