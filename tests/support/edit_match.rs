//! The edit matcher's properties (`lathe::tools::edit_match`, issue 31),
//! checked by the fuzz target `edit_match` (fuzz/) and by
//! `suite::edit_match` on random inputs: a file, a
//! region of it, the edit a model meant there, and that edit as a model gets
//! it wrong in one of the ways the matcher recovers (or not at all), all
//! chosen by the input bytes.
//!
//! It must never panic, and:
//! - a located edit has splices inside the file, in order, not overlapping,
//!   on character boundaries;
//! - when it lands on the region the model meant and the mistake loses
//!   nothing (exact text, indentation, tabs for spaces, line numbers,
//!   escapes, blank lines at the ends, trailing whitespace the model left
//!   out), the file becomes exactly what the model meant;
//! - applying it and then the reverse edit (`new_string` for
//!   `old_string`, with the same mistake) gives the original file back,
//!   byte for byte, whenever the reverse lands on what the edit wrote (and
//!   the mistake loses nothing: not where the model left out trailing
//!   whitespace of lines it replaced, which its reverse edit cannot know,
//!   nor escapes in a reverse edit whose old_string has none to decode);
//! - a refusal changes nothing (it carries no text) and its message can
//!   be written; an ambiguous one names at least two places, inside the file.
//!
//! Input layout: byte 0 picks the mode (odd: raw; even: generated). Raw:
//! the rest, split at 0xFF into file, old_string and new_string (lossy
//! UTF-8). Generated: the bytes drive the generator below, one decision a
//! byte (zero once they run out).

use lathe::tools::edit_match::{Located, Refusal, locate};

struct Draw<'a>(&'a [u8]);

impl Draw<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n.max(1)
    }
}

const WORDS: [&str; 22] = [
    "x",
    "y",
    "=",
    "1",
    "2",
    "f(x)",
    "return",
    "if",
    "{",
    "}",
    "'a'",
    "\"b\"",
    "a-b",
    "\u{2014}",
    "\u{201c}q\u{201d}",
    "it\u{2019}s",
    "# c",
    ":",
    "- item",
    "\\n",
    "z\u{a0}w",
    "//",
];

/// How the file is written.
struct Style {
    tabs: bool,
    width: usize,
    crlf: bool,
}

impl Style {
    fn indent(&self, depth: usize) -> String {
        if self.tabs { "\t".repeat(depth) } else { " ".repeat(depth * self.width) }
    }

    fn eol(&self) -> &'static str {
        if self.crlf { "\r\n" } else { "\n" }
    }
}

/// A line: its depth, text after the indentation, trailing whitespace.
#[derive(Clone)]
struct Gen {
    depth: usize,
    body: String,
    trailing: &'static str,
}

fn gen_line(draw: &mut Draw, depth: usize, with_trailing: bool) -> Gen {
    if draw.below(8) == 0 {
        return Gen { depth: 0, body: String::new(), trailing: "" };
    }
    let words: Vec<&str> = (0..1 + draw.below(4)).map(|_| WORDS[draw.below(WORDS.len())]).collect();
    let trailing = match (with_trailing, draw.below(6)) {
        (true, 0) => "  ",
        (true, 1) => "\t",
        _ => "",
    };
    Gen { depth, body: words.join(" "), trailing }
}

/// A line the model writes: never equal to a line it keeps (which of two
/// equal lines is the kept one cannot be told), blank ones aside.
fn fresh_line(draw: &mut Draw, depth: usize, count: &mut usize) -> Gen {
    let mut line = gen_line(draw, depth, false);
    if !line.body.is_empty() {
        *count += 1;
        line.body = format!("new{count} {}", line.body);
    }
    line
}

fn render(style: &Style, line: &Gen) -> String {
    if line.body.is_empty() {
        return line.trailing.to_owned();
    }
    format!("{}{}{}", style.indent(line.depth), line.body, line.trailing)
}

/// The mistakes a model makes, applied to both of its strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mistake {
    None,
    NoTrailing,
    ExtraTrailing,
    Shift,
    Dedent,
    TabsSpaces,
    Numbers,
    Escapes,
    Punctuation,
    BlankEdges,
}

const MISTAKES: [Mistake; 10] = [
    Mistake::None,
    Mistake::NoTrailing,
    Mistake::ExtraTrailing,
    Mistake::Shift,
    Mistake::Dedent,
    Mistake::TabsSpaces,
    Mistake::Numbers,
    Mistake::Escapes,
    Mistake::Punctuation,
    Mistake::BlankEdges,
];

fn lines_of(text: &str) -> Vec<String> {
    text.split('\n').map(str::to_owned).collect()
}

fn split_indent(line: &str) -> (&str, &str) {
    let body = line.trim_start_matches([' ', '\t']);
    (&line[..line.len() - body.len()], body)
}

/// `text` (LF, as a model writes) with `mistake`; `mid_line`: its first
/// line starts after the file's indentation. `None`: the mistake does not
/// apply to it.
fn mistaken(
    text: &str,
    mistake: Mistake,
    style: &Style,
    mid_line: bool,
    first_number: usize,
    common: usize,
    both_end_with_break: bool,
) -> Option<String> {
    let mut lines = lines_of(text);
    let ends_with_break = text.ends_with('\n');
    let real = if ends_with_break { lines.len() - 1 } else { lines.len() };
    let indented = |index: usize, line: &str| (index > 0 || !mid_line) && !line.trim().is_empty();
    match mistake {
        Mistake::None => {}
        Mistake::NoTrailing => {
            for line in &mut lines {
                *line = line.trim_end_matches([' ', '\t']).to_owned();
            }
        }
        Mistake::ExtraTrailing => {
            for line in lines.iter_mut().take(real) {
                if !line.trim().is_empty() {
                    line.push_str("  ");
                }
            }
        }
        Mistake::Shift => {
            let unit = style.indent(1);
            for (index, line) in lines.iter_mut().enumerate() {
                if indented(index, line) {
                    *line = format!("{unit}{line}");
                }
            }
        }
        Mistake::Dedent => {
            if common == 0 {
                return None;
            }
            for (index, line) in lines.iter_mut().enumerate() {
                if indented(index, line) {
                    // A line indented less than the rest: no uniform dedent.
                    if split_indent(line).0.len() < common {
                        return None;
                    }
                    *line = line[common..].to_owned();
                }
            }
        }
        Mistake::TabsSpaces => {
            for (index, line) in lines.iter_mut().enumerate() {
                if !indented(index, line) {
                    continue;
                }
                let (indent, body) = split_indent(line);
                let converted = if style.tabs {
                    " ".repeat(indent.len() * 4)
                } else {
                    if indent.len() % style.width != 0 {
                        return None;
                    }
                    "\t".repeat(indent.len() / style.width)
                };
                *line = format!("{converted}{body}");
            }
        }
        Mistake::Numbers => {
            if mid_line {
                return None;
            }
            for (index, line) in lines.iter_mut().enumerate().take(real) {
                *line = format!("{:>6}\t{line}", first_number + index);
            }
        }
        Mistake::Escapes => {
            let escaped = text.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n").replace('\t', "\\t");
            return Some(escaped);
        }
        Mistake::Punctuation => {
            let swapped: String = text
                .chars()
                .map(|c| match c {
                    '"' => '\u{201c}',
                    '\'' => '\u{2019}',
                    '-' => '\u{2013}',
                    '\u{201c}' | '\u{201d}' => '"',
                    '\u{2019}' => '\'',
                    '\u{2014}' => '-',
                    '\u{a0}' => ' ',
                    other => other,
                })
                .collect();
            return Some(swapped);
        }
        // A blank line after the last one only where the text ends with a
        // line break (else the "\n" would be a line break, not a blank line).
        Mistake::BlankEdges => {
            let after = if both_end_with_break { "\n" } else { "" };
            return Some(format!("\n\n{text}{after}"));
        }
    }
    Some(lines.join("\n"))
}

/// The invariants every located edit keeps.
fn check_located(file: &str, located: &Located) {
    let mut at = 0;
    for splice in &located.splices {
        assert!(splice.range.start >= at && splice.range.end >= splice.range.start && splice.range.end <= file.len());
        assert!(file.is_char_boundary(splice.range.start) && file.is_char_boundary(splice.range.end));
        at = splice.range.end;
    }
}

/// The invariants every refusal keeps.
fn check_refusal(file: &str, refusal: &Refusal) {
    let message = refusal.message("f", "", "");
    assert!(message.contains("No changes were made"), "{message}");
    if let Refusal::Ambiguous { count, candidates, .. } = refusal {
        assert!(*count >= 2 && candidates.len() == *count, "{refusal:?}");
        let lines = file.split('\n').count();
        assert!(
            candidates.iter().all(|c| c.lines.0 >= 1 && c.lines.0 <= c.lines.1 && c.lines.1 <= lines),
            "{refusal:?}"
        );
    }
}

fn raw(data: &[u8]) {
    let mut parts = data.split(|&b| b == 0xFF).map(String::from_utf8_lossy);
    let (Some(file), Some(old), Some(new)) = (parts.next(), parts.next(), parts.next()) else { return };
    for replace_all in [false, true] {
        match locate(&file, &old, &new, replace_all) {
            Ok(located) => {
                check_located(&file, &located);
                let _ = located.apply(&file);
            }
            Err(refusal) => check_refusal(&file, &refusal),
        }
    }
}

fn generated(draw: &mut Draw) {
    let style = Style { tabs: draw.byte() & 1 == 1, width: [2, 4][draw.below(2)], crlf: draw.below(4) == 0 };
    let count = 1 + draw.below(24);
    let mut depth = 0usize;
    let lines: Vec<Gen> = (0..count)
        .map(|_| {
            depth = match draw.below(3) {
                0 => depth.saturating_sub(1),
                1 => depth + 1,
                _ => depth,
            }
            .min(4);
            gen_line(draw, depth, true)
        })
        .collect();
    let eol = style.eol();
    let ends_with_break = draw.below(8) != 0;
    let mut file = String::new();
    let mut starts = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        starts.push(file.len());
        file.push_str(&render(&style, line));
        if index + 1 < lines.len() || ends_with_break {
            file.push_str(eol);
        }
    }
    starts.push(file.len());

    // The region the model means: whole lines, or from the first line's text.
    let first = draw.below(count);
    let len = 1 + draw.below(count - first);
    let last = first + len - 1;
    let mid_line = draw.byte() & 1 == 1 && !lines[first].body.is_empty();
    let with_break = draw.byte() & 1 == 1 && (last + 1 < count || ends_with_break);
    let start = if mid_line { starts[first] + style.indent(lines[first].depth).len() } else { starts[first] };
    let end = if with_break { starts[last + 1] } else { starts[last] + render(&style, &lines[last]).len() };
    let old_true = &file[start..end];

    // What the model means to write there: lines kept, replaced, deleted, added.
    let mut new_lines: Vec<String> = Vec::new();
    let mut fresh_count = 0;
    for (offset, line) in lines[first..=last].iter().enumerate() {
        let rendered = render(&style, line);
        let kept =
            if offset == 0 && mid_line { rendered[style.indent(line.depth).len()..].to_owned() } else { rendered };
        match draw.below(4) {
            0 => new_lines.push(kept),
            1 => {
                let fresh = fresh_line(draw, line.depth, &mut fresh_count);
                let text = render(&style, &fresh);
                new_lines.push(if offset == 0 && mid_line {
                    text.trim_start_matches([' ', '\t']).to_owned()
                } else {
                    text
                });
            }
            2 if !(offset == 0 && mid_line) => {}
            _ => {
                new_lines.push(kept);
                new_lines.push(render(&style, &fresh_line(draw, line.depth, &mut fresh_count)));
            }
        }
    }
    // New lines get the file's line break; a file with none has LF.
    let new_eol = if file.contains('\n') { eol } else { "\n" };
    let mut new_true = new_lines.join(new_eol);
    if with_break {
        new_true.push_str(new_eol);
    }
    let old_lf = old_true.replace("\r\n", "\n");
    let new_lf = new_true.replace("\r\n", "\n");
    if old_lf == new_lf || old_lf.trim().is_empty() {
        return;
    }
    let common = lines[first..=last]
        .iter()
        .enumerate()
        .filter(|(offset, line)| (*offset > 0 || !mid_line) && !line.body.is_empty())
        .map(|(_, line)| style.indent(line.depth).len())
        .min()
        .unwrap_or(0);

    let mistake = MISTAKES[draw.below(MISTAKES.len())];
    let both_end_with_break = old_lf.ends_with('\n') && new_lf.ends_with('\n');
    let (Some(old), Some(new)) = (
        mistaken(&old_lf, mistake, &style, mid_line, first + 1, common, both_end_with_break),
        mistaken(&new_lf, mistake, &style, mid_line, first + 1, common, both_end_with_break),
    ) else {
        return;
    };
    let expected = format!("{}{new_true}{}", &file[..start], &file[end..]);
    let located = match locate(&file, &old, &new, false) {
        Ok(located) => located,
        Err(refusal) => {
            check_refusal(&file, &refusal);
            return;
        }
    };
    check_located(&file, &located);
    let after = located.apply(&file);
    let [splice] = &located.splices[..] else { panic!("one edit, one place: {located:?}") };
    // Lossy by design: trailing whitespace the model added that the file
    // has on some lines, and punctuation in lines the model changed.
    // A mistake old_string does not show (no line it touches) leaves
    // new_string as the model wrote it: nothing tells what it meant.
    // And when the mistake makes two lines of the region the same text
    // (`f(x)\t` and `f(x)` without their trailing whitespace), which of
    // them a kept line is cannot be told: the one the diff pairs it with
    // gives its trailing whitespace.
    let region: Vec<&str> = old_lf.split('\n').collect();
    let blurred = mistake == Mistake::NoTrailing
        && region.iter().enumerate().any(|(i, a)| {
            region[i + 1..].iter().any(|b| a != b && a.trim_end_matches([' ', '\t']) == b.trim_end_matches([' ', '\t']))
        });
    let lossless = !matches!(mistake, Mistake::ExtraTrailing | Mistake::Punctuation)
        && (old != old_lf || new == new_lf)
        && !blurred;
    if lossless && splice.range == (start..end) {
        assert_eq!(after, expected, "{mistake:?}: {old:?} -> {new:?} in {file:?}");
    }

    // The reverse edit, with the same mistake, undoes it where it lands on
    // what was written. Trailing whitespace the model left out of lines it
    // replaced is gone: its reverse edit cannot know it.
    let written = splice.range.start..splice.range.start + splice.text.len();
    // As above, the reverse's old_string (the forward new_string) must show
    // the mistake: when it is exact text of the file (no indented line, no
    // escape, ...) its new_string is taken as written.
    // A CRLF file the edit left without a line break no longer says so.
    let lossy = matches!(mistake, Mistake::ExtraTrailing | Mistake::Punctuation);
    // Likewise wherever the forward match ignored trailing whitespace, as
    // when it landed on a line other than the one meant (`2  ` for `2`).
    let dropped_trailing = (mistake == Mistake::NoTrailing && old != old_lf) || located.correction.trailing_whitespace;
    let lost_crlf = file.contains('\r') && !after.contains('\n');
    let reversible = !(lossy || dropped_trailing || lost_crlf);
    if let Ok(reverse) = locate(&after, &new, &old, false) {
        check_located(&after, &reverse);
        let shows = reverse.correction.is_exact() == located.correction.is_exact();
        if reversible && shows && reverse.splices.len() == 1 && reverse.splices[0].range == written {
            assert_eq!(reverse.apply(&after), file, "{mistake:?}: {old:?} <-> {new:?}");
        }
    }
}

/// Checks one input (see the module docs for its layout).
pub fn check(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode & 1 == 1 {
        raw(rest);
    } else {
        generated(&mut Draw(rest));
    }
}
