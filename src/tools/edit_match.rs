//! Where an `edit_file` replacement goes, and what exactly it writes: pure
//! functions from (file text, `old_string`, `new_string`) to located,
//! re-indented replacements, or a refusal naming every candidate. No I/O.
//!
//! Models get `old_string` slightly wrong all the time. A few of those
//! mistakes have one precise reading, and this module recovers exactly
//! those, by trying a fixed ladder of reversible normalisations from the
//! strictest; the first step that finds anything decides: one place is
//! applied, several are refused with every candidate named. There are no
//! similarity thresholds: any other difference (a token, an identifier, an
//! operator, a number, case, a comment) finds nothing and is refused.
//!
//! The ladder, for each reading of the strings in turn (as given; without
//! the line-number prefixes `read_file` adds, when every non-empty line of
//! `old_string` carries one, numbered consecutively; with literal `\n`/`\t`
//! escapes decoded, when `old_string` has no real line break and the literal
//! reading found nothing at any step):
//!
//! 1. exact text (its line breaks as LF or CRLF, whichever the file has:
//!    lathe's behaviour before this module);
//! 2. whole lines, ignoring trailing spaces and tabs either way;
//! 3. and a uniform indentation shift, or spaces for tabs (or the reverse),
//!    the same mapping on every line;
//! 4. and Unicode punctuation (curly quotes, en and em dashes, non-breaking
//!    spaces) for its ASCII twin, either way;
//! 5. steps 2 to 4 again without blank lines at the start or end of
//!    `old_string` (and as many at those ends of `new_string`), dropping
//!    the fewest first, so that the blank lines the file has there stay.
//!
//! A recovered edit writes what the model meant: `new_string` is re-indented
//! by the same mapping, in the file's style; the lines it keeps from
//! `old_string` are written as the file has them (their trailing whitespace,
//! their own quotes and dashes, their line endings); new lines get the
//! file's line ending; a quote or dash the model wrote in place of the
//! file's is written as the file's. The [`Correction`] says which
//! normalisation was needed, so the model can be told.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::ops::Range;
use std::rc::Rc;

/// Lines searched for the text closest to an `old_string` that was not found.
const CLOSEST_SCAN_LINES: usize = 50_000;

/// Blank lines at each end of `old_string` dropped one at a time (see
/// [`Reading::without_blank_edges`]).
const BLANK_EDGE_TRIES: usize = 4;

/// Candidates a refusal lists with an excerpt; more are counted, with their lines.
const LISTED_CANDIDATES: usize = 20;

/// Line numbers of further candidates a refusal names.
const LISTED_LINE_NUMBERS: usize = 200;

/// Characters of a candidate's excerpt.
const EXCERPT_CHARS: usize = 80;

/// Where one edit goes and what it writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The byte ranges of the file replaced, in order, not overlapping, each
    /// with its replacement.
    pub splices: Vec<Splice>,
    /// What had to be normalised for `old_string` to match (all false for an
    /// exact match).
    pub correction: Correction,
}

/// One replaced range of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Splice {
    /// Bytes of the file replaced.
    pub range: Range<usize>,
    /// What is written in their place.
    pub text: String,
}

impl Located {
    /// The file with every splice applied.
    pub fn apply(&self, file: &str) -> String {
        let mut out = String::with_capacity(file.len());
        let mut at = 0;
        for splice in &self.splices {
            out.push_str(&file[at..splice.range.start]);
            out.push_str(&splice.text);
            at = splice.range.end;
        }
        out.push_str(&file[at..]);
        out
    }
}

/// The normalisations a match needed. Line endings are not listed: matching
/// an LF `old_string` in a CRLF file (or the reverse) is silent, as always.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Correction {
    /// `old_string` carried `read_file`'s line-number prefixes.
    pub line_numbers: bool,
    /// `old_string` had literal `\n`/`\t` escapes where the file has real ones.
    pub escapes: bool,
    /// `old_string` had blank lines at its start or end that the file has not there.
    pub blank_lines: bool,
    /// Trailing spaces or tabs differed.
    pub trailing_whitespace: bool,
    /// The indentation differed uniformly, and `new_string` was re-indented so.
    pub indentation: Option<Reindent>,
    /// Unicode punctuation stood for ASCII, or the reverse.
    pub punctuation: bool,
}

impl Correction {
    /// How the strings were read before matching: "without its line-number
    /// prefixes, " or "".
    fn reading(&self) -> &'static str {
        match (self.line_numbers, self.escapes) {
            (true, _) => "without its line-number prefixes, ",
            (false, true) => "with its escapes decoded, ",
            (false, false) => "",
        }
    }

    /// Whether nothing was normalised.
    pub fn is_exact(&self) -> bool {
        *self == Correction::default()
    }

    /// "matched after ignoring trailing whitespace", or `None` for an exact match.
    pub fn describe(&self) -> Option<String> {
        let mut steps: Vec<String> = Vec::new();
        if self.line_numbers {
            steps.push("removing the line-number prefixes read_file adds".into());
        }
        if self.escapes {
            steps.push("decoding its literal \\n and \\t escapes into real line breaks and tabs".into());
        }
        if self.blank_lines {
            steps.push("dropping blank lines at its start or end that the file does not have there".into());
        }
        if self.trailing_whitespace {
            steps.push("ignoring trailing whitespace".into());
        }
        if let Some(reindent) = self.indentation {
            steps.push(reindent.describe());
        }
        if self.punctuation {
            steps.push(
                "reading curly quotes, dashes and non-breaking spaces as the file's own characters (kept as the \
                 file has them)"
                    .into(),
            );
        }
        let last = steps.pop()?;
        let listed = if steps.is_empty() { last } else { format!("{}, and {last}", steps.join(", ")) };
        Some(format!("matched after {listed}"))
    }
}

/// How the model's indentation maps onto the file's: the same mapping holds
/// on every line of the match, and is applied to `new_string`'s lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reindent {
    /// The file has `by` more (fewer, when negative) leading spaces or tabs.
    Shift {
        /// Which character is added or taken away.
        unit: Unit,
        /// How many of them.
        by: isize,
    },
    /// The model wrote spaces where the file has tabs.
    SpacesToTabs {
        /// Spaces per tab.
        width: usize,
        /// Tabs added (taken away, when negative) after the conversion.
        by: isize,
    },
    /// The model wrote tabs where the file has spaces.
    TabsToSpaces {
        /// Spaces per tab.
        width: usize,
        /// Spaces added (taken away, when negative) after the conversion.
        by: isize,
    },
}

/// One indentation character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// `' '`.
    Spaces,
    /// `'\t'`.
    Tabs,
}

impl Unit {
    fn char(self) -> char {
        match self {
            Unit::Spaces => ' ',
            Unit::Tabs => '\t',
        }
    }

    fn name(self, count: usize) -> String {
        match (self, count) {
            (Unit::Spaces, 1) => "1 space".into(),
            (Unit::Spaces, _) => format!("{count} spaces"),
            (Unit::Tabs, 1) => "1 tab".into(),
            (Unit::Tabs, _) => format!("{count} tabs"),
        }
    }
}

const KEEP: Reindent = Reindent::Shift { unit: Unit::Spaces, by: 0 };

/// Tab widths tried when the model and the file disagree on tabs and spaces,
/// most likely first.
const TAB_WIDTHS: [usize; 4] = [4, 2, 8, 3];

impl Reindent {
    /// The file's indentation for a line the model indented with `model`, or
    /// `None` when the mapping does not apply to it (a mix it does not know,
    /// or less indentation than a negative shift takes away).
    pub fn apply(self, model: &str) -> Option<String> {
        match self {
            Reindent::Shift { unit, by } => {
                let c = unit.char();
                let run = model.len() - model.trim_start_matches(c).len();
                let count = run.checked_add_signed(by)?;
                let mut out: String = std::iter::repeat_n(c, count).collect();
                out.push_str(&model[run..]);
                Some(out)
            }
            Reindent::SpacesToTabs { width, by } => {
                if model.bytes().any(|b| b != b' ') {
                    return None;
                }
                let tabs = (model.len() / width).checked_add_signed(by)?;
                let mut out: String = std::iter::repeat_n('\t', tabs).collect();
                out.extend(std::iter::repeat_n(' ', model.len() % width));
                Some(out)
            }
            Reindent::TabsToSpaces { width, by } => {
                let tabs = model.len() - model.trim_start_matches('\t').len();
                let rest = &model[tabs..];
                if rest.bytes().any(|b| b != b' ') {
                    return None;
                }
                let count = (tabs * width + rest.len()).checked_add_signed(by)?;
                Some(" ".repeat(count))
            }
        }
    }

    fn describe(self) -> String {
        let more = |unit: Unit, by: isize| {
            let name = unit.name(by.unsigned_abs());
            if by > 0 { format!("{name} more") } else { format!("{name} less") }
        };
        match self {
            Reindent::Shift { by: 0, .. } => "keeping the indentation".into(),
            Reindent::Shift { unit, by } => format!(
                "re-indenting it: the file has {} indentation than old_string on every line, so new_string was \
                 re-indented the same way",
                more(unit, by)
            ),
            Reindent::SpacesToTabs { width, by } => {
                let extra = if by == 0 { String::new() } else { format!(", and {}", more(Unit::Tabs, by)) };
                format!(
                    "reading its spaces as the file's tabs ({width} spaces per tab{extra}), so new_string was \
                     indented with tabs too"
                )
            }
            Reindent::TabsToSpaces { width, by } => {
                let extra = if by == 0 { String::new() } else { format!(", and {}", more(Unit::Spaces, by)) };
                format!(
                    "reading its tabs as the file's spaces ({width} spaces per tab{extra}), so new_string was \
                     indented with spaces too"
                )
            }
        }
    }
}

/// Why an edit was not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No step of the ladder found `old_string`.
    NotFound(NotFoundHint),
    /// The first step that found anything found more than one place.
    Ambiguous {
        /// How many places.
        count: usize,
        /// What that step ignored ("" for exact text).
        ignoring: String,
        /// Every place: the first [`LISTED_CANDIDATES`] with an excerpt.
        candidates: Vec<Candidate>,
    },
    /// The match was found with an indentation mapping that a line of
    /// `new_string` cannot take (it has less indentation than a negative
    /// shift removes, or mixes tabs and spaces the mapping does not know).
    Reindent {
        /// 1-based line of the file where the match starts.
        at_line: usize,
        /// 1-based line of `new_string`.
        new_line: usize,
        /// The mapping.
        reindent: Reindent,
    },
}

/// What a not-found refusal can suggest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotFoundHint {
    /// `old_string` looks like it carries `read_file`'s line numbers (though
    /// not exactly enough to remove them).
    LineNumbers,
    /// The most similar text, numbered like `read_file`.
    Closest {
        /// 1-based line where the excerpt starts.
        line: usize,
        /// The lines, numbered like `read_file`.
        excerpt: String,
    },
    /// Nothing useful to point at.
    Nothing,
}

/// One place an ambiguous `old_string` matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// 1-based first and last lines of the file it covers.
    pub lines: (usize, usize),
    /// Its first non-blank line, trimmed and cut; empty past [`LISTED_CANDIDATES`].
    pub excerpt: String,
}

impl Refusal {
    /// The message for the model. `prefix` names the edit in a multi-edit
    /// call ("edits[1] (edit 2 of 2): "), `after` says the earlier edits
    /// were applied first.
    pub fn message(&self, shown: &str, prefix: &str, after: &str) -> String {
        match self {
            Refusal::NotFound(hint) => {
                let mut message = format!("{prefix}old_string was not found in {shown}{after}. No changes were made.");
                match hint {
                    NotFoundHint::LineNumbers => message.push_str(
                        " old_string seems to include the line numbers read_file adds (like \"    12\\t\"); give \
                         only the file's own text.",
                    ),
                    NotFoundHint::Closest { line, excerpt } => {
                        let _ = write!(
                            message,
                            " The most similar text is at line {line}:\n{excerpt}\nCompare whitespace, indentation \
                             and every character, then retry with text copied exactly from the file."
                        );
                    }
                    NotFoundHint::Nothing => message.push_str(
                        " Read the file again to see its current content, then retry with text copied exactly.",
                    ),
                }
                message
            }
            Refusal::Ambiguous { count, ignoring, candidates } => {
                let lines: Vec<String> = candidates.iter().take(LISTED_LINE_NUMBERS).map(Candidate::span).collect();
                let more = if *count > lines.len() { ", …" } else { "" };
                let how = if ignoring.is_empty() {
                    String::new()
                } else {
                    format!(" (it is not in the file exactly; {ignoring})")
                };
                let mut message = format!(
                    "{prefix}old_string matches {count} places in {shown}{after}{how} (lines {}{more}). No changes \
                     were made. Include more surrounding lines in old_string so it matches exactly one place, or \
                     set replace_all to true to change every occurrence. The places:",
                    lines.join(", ")
                );
                for candidate in candidates.iter().take(LISTED_CANDIDATES) {
                    let _ = write!(message, "\n  line {}: {}", candidate.span(), candidate.excerpt);
                }
                if candidates.len() > LISTED_CANDIDATES {
                    let _ = write!(message, "\n  … and {} more (lines above).", count - LISTED_CANDIDATES);
                }
                message
            }
            Refusal::Reindent { at_line, new_line, reindent } => format!(
                "{prefix}old_string was not found in {shown}{after} exactly; it matches at line {at_line} after {}, \
                 but line {new_line} of new_string cannot be re-indented that way (it has less indentation than \
                 that takes away, or mixes tabs and spaces). No changes were made. Copy old_string's indentation \
                 exactly from the file and write new_string in the same indentation.",
                reindent.describe()
            ),
        }
    }
}

impl Candidate {
    fn span(&self) -> String {
        match self.lines {
            (first, last) if first == last => first.to_string(),
            (first, last) => format!("{first}-{last}"),
        }
    }
}

/// Locates one edit in `file`: every occurrence with `replace_all`, else
/// exactly one (see the module docs for the ladder).
pub fn locate(file: &str, old: &str, new: &str, replace_all: bool) -> Result<Located, Refusal> {
    let terminator = if prefers_crlf(file) { "\r\n" } else { "\n" };
    if let Some(found) = exact(file, old, new, replace_all) {
        return found;
    }
    let lines = FileLines::new(file);
    let mut readings = vec![Reading { old: old.to_owned(), new: new.to_owned(), correction: Correction::default() }];
    if let Some(reading) = without_line_numbers(old, new) {
        readings.push(reading);
    }
    let escaped = unescaped(old, new);
    for (index, reading) in readings.iter().chain(escaped.iter()).enumerate() {
        if index > 0
            && let Some(found) = exact(file, &reading.old, &reading.new, replace_all)
        {
            return match found {
                Ok(located) => Ok(Located { correction: reading.correction, ..located }),
                Err(Refusal::Ambiguous { count, candidates, .. }) => Err(Refusal::Ambiguous {
                    count,
                    ignoring: reading.correction.reading().trim_end_matches(", ").to_owned(),
                    candidates,
                }),
                Err(refusal) => Err(refusal),
            };
        }
        let blank = reading.without_blank_edges();
        let attempts = [(reading, Rules::TRAILING), (reading, Rules::INDENT), (reading, Rules::PUNCT)]
            .into_iter()
            .chain(blank.iter().flat_map(|blank| {
                [(blank, Rules::TRAILING), (blank, Rules::INDENT), (blank, Rules::PUNCT)].into_iter()
            }));
        for (attempt, rules) in attempts {
            if let Some(found) = by_lines(file, &lines, attempt, rules, replace_all, terminator) {
                return found;
            }
        }
    }
    let hint = if has_line_number_prefixes(old) {
        NotFoundHint::LineNumbers
    } else {
        match closest_region(file, old) {
            Some((line, excerpt)) => NotFoundHint::Closest { line, excerpt },
            None => NotFoundHint::Nothing,
        }
    };
    Err(Refusal::NotFound(hint))
}

/// Step 1: the text as given, its line breaks as LF or CRLF. `None` when
/// it is nowhere.
fn exact(file: &str, old: &str, new: &str, replace_all: bool) -> Option<Result<Located, Refusal>> {
    /// Which spelling of an `old_string` matched the file.
    #[derive(Clone, Copy)]
    enum Spelling {
        Exact,
        /// Its line feeds as CRLF, for a file with Windows line endings.
        Crlf,
        /// Its CRLFs as line feeds, for a file with Unix line endings.
        Lf,
    }
    // A match never begins or ends between the CR and the LF of a line break.
    let splits = |at: usize| at > 0 && file.as_bytes()[at - 1] == b'\r' && file.as_bytes().get(at) == Some(&b'\n');
    let (spelling, needle, starts) =
        [(Spelling::Exact, old.to_owned()), (Spelling::Crlf, to_crlf(old)), (Spelling::Lf, to_lf(old))]
            .into_iter()
            .filter(|(spelling, needle)| matches!(spelling, Spelling::Exact) || needle != old)
            .find_map(|(spelling, needle)| {
                let starts: Vec<usize> = file
                    .match_indices(needle.as_str())
                    .map(|(start, _)| start)
                    .filter(|&start| !splits(start) && !splits(start + needle.len()))
                    .collect();
                (!starts.is_empty()).then_some((spelling, needle, starts))
            })?;
    if starts.len() > 1 && !replace_all {
        let candidates = candidates(file, starts.iter().map(|&start| start..start + needle.len()));
        return Some(Err(Refusal::Ambiguous { count: starts.len(), ignoring: String::new(), candidates }));
    }
    let text = match spelling {
        Spelling::Crlf => to_crlf(new),
        Spelling::Lf => to_lf(new),
        Spelling::Exact if prefers_crlf(file) && !new.contains('\r') => to_crlf(new),
        Spelling::Exact => new.to_owned(),
    };
    let splices =
        starts.into_iter().map(|start| Splice { range: start..start + needle.len(), text: text.clone() }).collect();
    Some(Ok(Located { splices, correction: Correction::default() }))
}

/// One reading of the model's strings.
struct Reading {
    old: String,
    new: String,
    correction: Correction,
}

impl Reading {
    /// Without some of the blank lines at the start and end of `old` (and
    /// as many at those ends of `new`, as far as it has them): every way,
    /// fewest lines dropped first, so that blank lines the file does have
    /// there stay in the match. Up to [`BLANK_EDGE_TRIES`] lines at each end
    /// one at a time; beyond that, all of them at once.
    fn without_blank_edges(&self) -> Vec<Reading> {
        let old: Vec<&str> = self.old.split('\n').collect();
        let new: Vec<&str> = self.new.split('\n').collect();
        let blank = |line: &str| is_blank(line.strip_suffix('\r').unwrap_or(line));
        let lead = old.iter().take_while(|line| blank(line)).count();
        if lead == old.len() {
            return Vec::new();
        }
        // "a\n" ends with one empty element that is no blank line.
        let trail = old.iter().rev().take_while(|line| blank(line)).count().saturating_sub(1);
        let new_lead = new.iter().take_while(|line| blank(line)).count();
        let new_trail = new.iter().rev().take_while(|line| blank(line)).count().saturating_sub(1);
        let cut = |lines: &[&str], lead: usize, trail: usize| {
            if lead + trail >= lines.len() {
                return String::new();
            }
            lines[lead..lines.len() - trail].join("\n")
        };
        let mut ways: Vec<(usize, usize)> = (0..=lead.min(BLANK_EDGE_TRIES))
            .flat_map(|a| (0..=trail.min(BLANK_EDGE_TRIES)).map(move |b| (a, b)))
            .chain([(lead, trail)])
            .filter(|&way| way != (0, 0))
            .collect();
        ways.sort_by_key(|&(a, b)| (a + b, a));
        ways.dedup();
        ways.into_iter()
            .map(|(a, b)| Reading {
                old: cut(&old, a, b),
                new: cut(&new, a.min(new_lead), b.min(new_trail)),
                correction: Correction { blank_lines: true, ..self.correction },
            })
            .collect()
    }
}

/// `old` and `new` without `read_file`'s line-number prefixes, when every
/// non-empty line of `old` carries one in its exact format (`{:>6}\t`),
/// numbered consecutively, and `new` has them on every non-empty line or on
/// none.
fn without_line_numbers(old: &str, new: &str) -> Option<Reading> {
    let numbered = |line: &str| -> Option<(usize, String)> {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let digits_at = line.len() - line.trim_start_matches(' ').len();
        let rest = &line[digits_at..];
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return None;
        }
        let number: usize = rest[..digits].parse().ok()?;
        if format!("{number:>6}") != line[..digits_at + digits] {
            return None;
        }
        match &rest[digits..] {
            // A numbered empty line whose tab was trimmed.
            "" => Some((number, String::new())),
            text => text.strip_prefix('\t').map(|text| (number, text.to_owned())),
        }
    };
    let mut first = None;
    let mut old_lines = Vec::new();
    for (index, line) in old.split('\n').enumerate() {
        match numbered(line) {
            Some((number, text)) => {
                let start = *first.get_or_insert(number.checked_sub(index)?);
                if start + index != number {
                    return None;
                }
                old_lines.push(text);
            }
            None if is_blank(line.strip_suffix('\r').unwrap_or(line)) => old_lines.push(line.to_owned()),
            None => return None,
        }
    }
    first?;
    let new_lines: Vec<&str> = new.split('\n').collect();
    let new_parts: Vec<Option<(usize, String)>> = new_lines.iter().map(|line| numbered(line)).collect();
    let blank = |line: &str| is_blank(line.strip_suffix('\r').unwrap_or(line));
    let new = if new_parts.iter().all(Option::is_none) {
        new.to_owned()
    } else if new_parts.iter().zip(&new_lines).all(|(part, line)| part.is_some() || blank(line)) {
        new_parts
            .into_iter()
            .zip(&new_lines)
            .map(|(part, line)| part.map_or_else(|| (*line).to_owned(), |(_, text)| text))
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        return None;
    };
    Some(Reading {
        old: old_lines.join("\n"),
        new,
        correction: Correction { line_numbers: true, ..Correction::default() },
    })
}

/// `old` and `new` with literal escapes decoded, when `old` has a literal
/// `\n` or `\t` and no real line break (arguments escaped twice). `new` is
/// decoded too unless it has real line breaks of its own.
fn unescaped(old: &str, new: &str) -> Option<Reading> {
    if old.contains('\n') || !(old.contains("\\n") || old.contains("\\t")) {
        return None;
    }
    let decoded = decode_escapes(old);
    if decoded == old {
        return None;
    }
    let new = if new.contains('\n') { new.to_owned() } else { decode_escapes(new) };
    Some(Reading { old: decoded, new, correction: Correction { escapes: true, ..Correction::default() } })
}

/// JSON's string escapes decoded (`\n`, `\t`, `\r`, `\"`, `\\`, `\/`); any
/// other backslash is kept.
fn decode_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('"') => out.push('"'),
            Some('\\') => out.push('\\'),
            Some('/') => out.push('/'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// What a line-by-line step allows besides trailing whitespace.
#[derive(Clone, Copy)]
struct Rules {
    indent: bool,
    punct: bool,
}

impl Rules {
    const TRAILING: Rules = Rules { indent: false, punct: false };
    const INDENT: Rules = Rules { indent: true, punct: false };
    const PUNCT: Rules = Rules { indent: true, punct: true };

    fn describe(self, reading: &Correction) -> String {
        let mut what = vec!["trailing whitespace"];
        if self.indent {
            what.push("indentation");
        }
        if self.punct {
            what.push("Unicode punctuation");
        }
        if reading.blank_lines {
            what.push("blank lines at its ends");
        }
        let last = what.pop().unwrap_or_default();
        let listed = if what.is_empty() { last.to_owned() } else { format!("{} and {last}", what.join(", ")) };
        format!("{}ignoring {listed}", reading.reading())
    }
}

/// A line of the file: its text `start..end` (`body..trimmed` without
/// indentation and trailing whitespace), its line break `end..next`.
#[derive(Clone, Copy)]
struct Line {
    start: usize,
    body: usize,
    trimmed: usize,
    end: usize,
    next: usize,
}

fn line_table(text: &str) -> Vec<Line> {
    let bytes = text.as_bytes();
    let mut lines = Vec::with_capacity(text.len() / 32 + 1);
    let mut push = |start: usize, end: usize, next: usize| {
        let indent = bytes[start..end].iter().take_while(|&&b| b == b' ' || b == b'\t').count();
        let trailing = bytes[start + indent..end].iter().rev().take_while(|&&b| b == b' ' || b == b'\t').count();
        lines.push(Line { start, body: start + indent, trimmed: end - trailing, end, next });
    };
    let mut start = 0;
    for (at, _) in text.match_indices('\n') {
        let end = if at > start && bytes[at - 1] == b'\r' { at - 1 } else { at };
        push(start, end, at + 1);
        start = at + 1;
    }
    if start < text.len() {
        push(start, text.len(), text.len());
    }
    lines
}

/// The file's lines, and which of them equal a given text: the anchors of
/// the line-by-line steps, asked again for each blank-edge reading.
struct FileLines {
    table: Vec<Line>,
    equal: RefCell<Vec<EqualLines>>,
}

/// The lines equal to a text (under [`Rules::punct`] or not).
struct EqualLines {
    text: String,
    punct: bool,
    lines: Rc<[usize]>,
}

impl FileLines {
    fn new(file: &str) -> FileLines {
        FileLines { table: line_table(file), equal: RefCell::new(Vec::new()) }
    }

    /// The 0-based lines whose text without indentation and trailing
    /// whitespace equals `body` under `rules`.
    fn equal_to(&self, file: &str, body: &str, rules: Rules) -> Rc<[usize]> {
        if let Some(known) = self.equal.borrow().iter().find(|known| known.text == body && known.punct == rules.punct) {
            return Rc::clone(&known.lines);
        }
        let found: Rc<[usize]> = self
            .table
            .iter()
            .enumerate()
            .filter(|(_, line)| same(body, &file[line.body..line.trimmed.max(line.body)], rules))
            .map(|(index, _)| index)
            .collect();
        self.equal.borrow_mut().push(EqualLines {
            text: body.to_owned(),
            punct: rules.punct,
            lines: Rc::clone(&found),
        });
        found
    }
}

/// How the first line of a multi-line `old_string` meets the file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum First {
    /// From the start of the line (it is indented, or blank).
    Whole,
    /// The end of a line, from a token boundary (it starts with no
    /// indentation: the model began mid-line, or at the first token).
    Tail,
}

/// How the last line of a multi-line `old_string` meets the file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Last {
    /// `old_string` ends with a line break: the match ends at a line start.
    Break,
    /// It ends with trailing whitespace, or is blank: up to the line's end.
    Whole,
    /// The start of a line, up to a token boundary.
    Head,
}

/// A match found line by line.
struct Hit {
    range: Range<usize>,
    /// 0-based file lines of the first and last line it touches.
    lines: (usize, usize),
    /// Per line of `old_string`: the file text standing for it (no line break).
    parts: Vec<Range<usize>>,
    /// Per line of `old_string` but the last: the file's line break after it.
    breaks: Vec<Range<usize>>,
    /// Per line of `old_string`: the file text aligned char for char with
    /// its text after the indentation, trailing whitespace left out.
    bodies: Vec<Range<usize>>,
    /// The match starts inside a line (after its indentation or further):
    /// the first line of `old_string` has no indentation of its own to
    /// compare, and a changed first line of `new_string` is written as
    /// given, not re-indented.
    mid_line: bool,
    reindent: Reindent,
}

/// Steps 2 to 4 for one reading: `None` when nothing matches.
fn by_lines(
    file: &str,
    lines: &FileLines,
    reading: &Reading,
    rules: Rules,
    replace_all: bool,
    terminator: &str,
) -> Option<Result<Located, Refusal>> {
    let old: Vec<&str> = reading.old.split('\n').map(|line| line.strip_suffix('\r').unwrap_or(line)).collect();
    if old.iter().all(|line| is_blank(line)) {
        return None;
    }
    let hits = find_hits(file, lines, &old, rules);
    if hits.is_empty() {
        return None;
    }
    if hits.len() > 1 && !replace_all {
        let candidates = candidates(file, hits.iter().map(|hit| hit.range.clone()));
        return Some(Err(Refusal::Ambiguous {
            count: hits.len(),
            ignoring: rules.describe(&reading.correction),
            candidates,
        }));
    }
    let new: Vec<&str> = reading.new.split('\n').map(|line| line.strip_suffix('\r').unwrap_or(line)).collect();
    let mut correction = reading.correction;
    let mut splices: Vec<Splice> = Vec::with_capacity(hits.len());
    for hit in hits {
        if splices.last().is_some_and(|last| last.range.end > hit.range.start) {
            continue;
        }
        let seen = Seen::of(file, &hit, &old);
        correction.trailing_whitespace |= seen.trailing_differs;
        correction.punctuation |= seen.punct_differs;
        if hit.reindent != KEEP {
            correction.indentation = Some(hit.reindent);
        }
        let text = match replacement(file, &hit, &old, &new, &seen, terminator) {
            Ok(text) => text,
            Err(new_line) => {
                return Some(Err(Refusal::Reindent {
                    at_line: hit.lines.0 + 1,
                    new_line: new_line + 1,
                    reindent: hit.reindent,
                }));
            }
        };
        splices.push(Splice { range: hit.range, text });
    }
    Some(Ok(Located { splices, correction }))
}

fn is_blank(line: &str) -> bool {
    line.bytes().all(|b| b == b' ' || b == b'\t')
}

fn is_indent(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// `(indentation, rest)` of a line.
fn split_indent(line: &str) -> (&str, &str) {
    let body = line.trim_start_matches(is_indent);
    (&line[..line.len() - body.len()], body)
}

fn trim_end(text: &str) -> &str {
    text.trim_end_matches(is_indent)
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether a match may begin or end between `before` and `after` without
/// cutting a word in two.
fn boundary(before: Option<char>, after: Option<char>) -> bool {
    !matches!((before, after), (Some(a), Some(b)) if is_word(a) && is_word(b))
}

/// The ASCII character a Unicode punctuation mark stands for.
fn canon(c: char) -> char {
    match c {
        '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' => '\'',
        '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' => '"',
        '\u{2010}' | '\u{2011}' | '\u{2013}' | '\u{2014}' => '-',
        '\u{00A0}' | '\u{202F}' => ' ',
        other => other,
    }
}

/// Whether `c` is a mark [`canon`] reads, or the ASCII one it reads it as.
fn punctuation_like(c: char) -> bool {
    matches!(c, '\'' | '"' | '-' | ' ') || canon(c) != c
}

/// The byte length in `hay` of a text equal, under `rules`, to `needle`
/// starting at `hay`'s start; `None` when it does not start so.
fn prefix_len(hay: &str, needle: &str, rules: Rules) -> Option<usize> {
    if !rules.punct {
        return hay.starts_with(needle).then_some(needle.len());
    }
    let mut hay_chars = hay.char_indices();
    for want in needle.chars() {
        let (_, got) = hay_chars.next()?;
        if canon(got) != canon(want) {
            return None;
        }
    }
    Some(hay_chars.next().map_or(hay.len(), |(at, _)| at))
}

/// Whether `a` and `b` are equal under `rules`.
fn same(a: &str, b: &str, rules: Rules) -> bool {
    if rules.punct {
        // Each character is one to four bytes, whichever twin it is.
        a.len() <= 4 * b.len() && b.len() <= 4 * a.len() && a.chars().map(canon).eq(b.chars().map(canon))
    } else {
        a == b
    }
}

/// Where in `hay` a text equal to `needle` under `rules` ends it: its start.
fn suffix_start(hay: &str, needle: &str, rules: Rules) -> Option<usize> {
    if !rules.punct {
        return hay.ends_with(needle).then(|| hay.len() - needle.len());
    }
    let mut hay_chars = hay.char_indices().rev();
    let mut start = hay.len();
    for want in needle.chars().rev() {
        let (at, got) = hay_chars.next()?;
        if canon(got) != canon(want) {
            return None;
        }
        start = at;
    }
    Some(start)
}

/// Every place where `old` (split in lines) matches under `rules`.
fn find_hits(file: &str, lines: &FileLines, old: &[&str], rules: Rules) -> Vec<Hit> {
    let table = &lines.table[..];
    if old.len() == 1 {
        return single_line_hits(file, table, old[0], rules);
    }
    let n = old.len() - 1;
    let first = if split_indent(old[0]).0.is_empty() && !old[0].is_empty() { First::Tail } else { First::Whole };
    let first = if old[0].is_empty() { First::Tail } else { first };
    let last = if old[n].is_empty() {
        Last::Break
    } else if is_blank(old[n]) || trim_end(old[n]).len() < old[n].len() {
        Last::Whole
    } else {
        Last::Head
    };
    let file_lines_needed = if last == Last::Break { n } else { n + 1 };
    if table.len() < file_lines_needed {
        return Vec::new();
    }
    let last_start = table.len() - file_lines_needed;
    // The anchor: the longest line of `old` compared whole. Only the file
    // lines equal to it (a cheap test, false for almost every line) are
    // tried as the match's line `k`, so a scan costs one compare per file
    // line rather than a walk from every one.
    let anchor = old
        .iter()
        .enumerate()
        .filter(|&(k, line)| {
            let whole = (k > 0 || first == First::Whole) && (k < n || last == Last::Whole);
            whole && !is_blank(line)
        })
        .map(|(k, line)| (k, trim_end(split_indent(line).1)))
        .max_by_key(|(_, body)| body.len());
    let starts: Vec<usize> = match anchor {
        Some((k, body)) => lines
            .equal_to(file, body, rules)
            .iter()
            .filter(|&&j| j >= k && j - k <= last_start)
            .map(|&j| j - k)
            .collect(),
        None => (0..=last_start).collect(),
    };
    let mut hits = Vec::new();
    // Reused from one start line to the next.
    let mut pairs: Vec<(&str, &str)> = Vec::with_capacity(old.len());
    let mut parts = Vec::with_capacity(old.len());
    let mut bodies = Vec::with_capacity(old.len());
    let mut breaks = Vec::with_capacity(n);
    'start: for i in starts {
        pairs.clear();
        parts.clear();
        bodies.clear();
        breaks.clear();
        let mut range_start = table[i].start;
        let mut range_end = 0;
        for (k, model) in old.iter().enumerate() {
            if k == n && last == Last::Break {
                let line = table[i + n - 1];
                if line.next == line.end {
                    continue 'start;
                }
                parts.push(line.next..line.next);
                bodies.push(line.next..line.next);
                range_end = line.next;
                break;
            }
            let line = table[i + k];
            let text = &file[line.start..line.end];
            if k < n {
                breaks.push(line.end..line.next);
            }
            if k == 0 && first == First::Tail {
                let want = trim_end(model);
                let have = trim_end(text);
                let Some(at) = suffix_start(have, want, rules) else { continue 'start };
                let indent = split_indent(have).0.len();
                if at < indent || (at > indent && !boundary(have[..at].chars().next_back(), want.chars().next())) {
                    continue 'start;
                }
                range_start = line.start + at;
                if at == 0 && !want.is_empty() {
                    // An unindented line, whole: its indentation (none) is known.
                    pairs.push(("", ""));
                }
                parts.push(range_start..line.end);
                bodies.push(range_start..line.start + have.len());
                continue;
            }
            let (model_indent, model_body) = split_indent(model);
            let (file_indent, file_body) = split_indent(text);
            let body_start = line.start + file_indent.len();
            if k == n && last == Last::Head {
                let Some(len) = prefix_len(file_body, model_body, rules) else { continue 'start };
                if !boundary(model_body.chars().next_back(), file_body[len..].chars().next()) {
                    continue 'start;
                }
                pairs.push((model_indent, file_indent));
                range_end = body_start + len;
                parts.push(line.start..range_end);
                bodies.push(body_start..range_end);
                continue;
            }
            let model_body = trim_end(model_body);
            let file_body = trim_end(file_body);
            if model_body.is_empty() {
                if !file_body.is_empty() {
                    continue 'start;
                }
            } else {
                if !same(model_body, file_body, rules) {
                    continue 'start;
                }
                pairs.push((model_indent, file_indent));
            }
            parts.push(line.start..line.end);
            bodies.push(body_start..body_start + file_body.len());
            if k == n {
                range_end = line.end;
            }
        }
        let Some(reindent) = reindent_for(&pairs, rules) else { continue };
        let last_line = if last == Last::Break { i + n - 1 } else { i + n };
        hits.push(Hit {
            range: range_start..range_end,
            lines: (i, last_line),
            parts: parts.clone(),
            breaks: breaks.clone(),
            bodies: bodies.clone(),
            mid_line: range_start != table[i].start,
            reindent,
        });
    }
    hits
}

/// Every place a one-line `old` matches under `rules`: from a line's start
/// when it is indented, else from any token boundary; up to the line's end
/// when it ends with whitespace, else up to a token boundary.
fn single_line_hits(file: &str, table: &[Line], old: &str, rules: Rules) -> Vec<Hit> {
    let (model_indent, model_body) = split_indent(old);
    let to_end = trim_end(model_body).len() < model_body.len();
    let want = trim_end(model_body);
    if want.is_empty() {
        return Vec::new();
    }
    // Bytes `want` needs at least in a line: a searcher is not even built for shorter ones.
    let least = if rules.punct { want.chars().count() } else { want.len() };
    let mut hits = Vec::new();
    for (index, line) in table.iter().enumerate() {
        if line.end - line.start < least {
            continue;
        }
        let text = &file[line.start..line.end];
        let (file_indent, file_body) = split_indent(text);
        let body_start = line.start + file_indent.len();
        let have = trim_end(file_body);
        let mut push = |at: usize, len: usize, reindent: Reindent, mid_line: bool| {
            let start = if mid_line { body_start + at } else { line.start };
            let end = if to_end { line.end } else { body_start + at + len };
            hits.push(Hit {
                range: start..end,
                lines: (index, index),
                parts: std::iter::once(start..end).collect(),
                breaks: Vec::new(),
                bodies: std::iter::once(body_start + at..body_start + at + len).collect(),
                mid_line: start != line.start,
                reindent,
            });
        };
        if !model_indent.is_empty() {
            let Some(len) = prefix_len(have, want, rules) else { continue };
            if (to_end && len != have.len()) || !boundary(want.chars().next_back(), have[len..].chars().next()) {
                continue;
            }
            if let Some(reindent) = reindent_for(&[(model_indent, file_indent)], rules) {
                push(0, len, reindent, false);
            }
            continue;
        }
        let starts: Vec<usize> = if rules.punct {
            have.char_indices().map(|(at, _)| at).collect()
        } else {
            have.match_indices(want).map(|(at, _)| at).collect()
        };
        for at in starts {
            let Some(len) = prefix_len(&have[at..], want, rules) else { continue };
            let end = at + len;
            if !boundary(have[..at].chars().next_back(), want.chars().next())
                || (to_end && end != have.len())
                || !boundary(want.chars().next_back(), have[end..].chars().next())
            {
                continue;
            }
            push(at, len, KEEP, true);
        }
    }
    hits
}

/// The indentation mapping that takes every model indentation in `pairs`
/// to the file's: the identity without the indentation rule, else the
/// likeliest of the mappings that fit (see [`Reindent`]).
fn reindent_for(pairs: &[(&str, &str)], rules: Rules) -> Option<Reindent> {
    let fits = |reindent: Reindent| pairs.iter().all(|(model, file)| reindent.apply(model).as_deref() == Some(*file));
    if fits(KEEP) {
        return Some(KEEP);
    }
    if !rules.indent {
        return None;
    }
    let &(model, file) = pairs.first()?;
    let run = |text: &str, c: char| (text.len() - text.trim_start_matches(c).len()) as isize;
    let mut tried: Vec<Reindent> = Vec::new();
    for unit in [Unit::Spaces, Unit::Tabs] {
        tried.push(Reindent::Shift { unit, by: run(file, unit.char()) - run(model, unit.char()) });
    }
    let mut converted: Vec<Reindent> = Vec::new();
    for width in TAB_WIDTHS {
        if model.bytes().all(|b| b == b' ') {
            let by = run(file, '\t') - (model.len() / width) as isize;
            converted.push(Reindent::SpacesToTabs { width, by });
        }
        let tabs = run(model, '\t') as usize;
        let by = file.len() as isize - (tabs * width + (model.len() - tabs)) as isize;
        if file.bytes().all(|b| b == b' ') && model.contains('\t') {
            converted.push(Reindent::TabsToSpaces { width, by });
        }
    }
    // A plain conversion before one that also shifts.
    converted.sort_by_key(|reindent| match reindent {
        Reindent::SpacesToTabs { by, .. } | Reindent::TabsToSpaces { by, .. } => by.unsigned_abs(),
        Reindent::Shift { .. } => usize::MAX,
    });
    tried.extend(converted);
    tried.into_iter().find(|&reindent| reindent != KEEP && fits(reindent))
}

/// What a hit shows about the model's writing, for the correction and for
/// writing `new_string` in the file's style.
struct Seen {
    trailing_differs: bool,
    /// The model added trailing whitespace the file does not have, and never
    /// matched the file's own.
    extra_trailing: bool,
    punct_differs: bool,
    /// The model's punctuation marks that always stood for one character of
    /// the file's (its own, when the file has the same).
    punct: HashMap<char, char>,
}

impl Seen {
    fn of(file: &str, hit: &Hit, old: &[&str]) -> Seen {
        let mut trailing_differs = false;
        let mut model_extra = false;
        let mut model_matches_file = false;
        let mut punct: HashMap<char, Option<char>> = HashMap::new();
        let mut punct_differs = false;
        for (k, model) in old.iter().enumerate() {
            let part = &file[hit.parts[k].clone()];
            let model_trailing = &model[trim_end(model).len()..];
            let file_trailing = &part[trim_end(part).len()..];
            if model_trailing != file_trailing {
                trailing_differs = true;
                if !model_trailing.is_empty() && file_trailing.is_empty() {
                    model_extra = true;
                }
            }
            if !model_trailing.is_empty() && model_trailing == file_trailing {
                model_matches_file = true;
            }
            let body = trim_end(if k == 0 && hit.mid_line { model } else { split_indent(model).1 });
            let file_body = &file[hit.bodies[k].clone()];
            for (want, got) in body.chars().zip(file_body.chars()) {
                if want != got {
                    punct_differs = true;
                }
                if punctuation_like(want) || punctuation_like(got) {
                    let entry = punct.entry(want).or_insert(Some(got));
                    if *entry != Some(got) {
                        *entry = None;
                    }
                }
            }
        }
        Seen {
            trailing_differs,
            extra_trailing: model_extra && !model_matches_file,
            punct_differs,
            punct: punct.into_iter().filter_map(|(want, got)| got.map(|got| (want, got))).collect(),
        }
    }
}

/// The text `new` becomes at `hit`: the lines it keeps from `old` as the
/// file has them, the others re-indented and in the file's punctuation,
/// joined by the file's line breaks. `Err(line)`: the 0-based line of `new`
/// the indentation mapping cannot take.
fn replacement(
    file: &str,
    hit: &Hit,
    old: &[&str],
    new: &[&str],
    seen: &Seen,
    terminator: &str,
) -> Result<String, usize> {
    let (kept, paired) = line_pairs(old, new);
    let last_new = new.len() - 1;
    let mut out = String::new();
    for (m, line) in new.iter().enumerate() {
        let as_given = m == 0 && hit.mid_line;
        // A part that starts mid-line stays first, and only it.
        let from_file = kept[m].filter(|&k| !hit.mid_line || (k == 0) == (m == 0));
        let mut source = None;
        match from_file {
            Some(k) => {
                out.push_str(&file[hit.parts[k].clone()]);
                source = Some(k);
            }
            None => {
                let pair = kept[m].or(paired[m]);
                let (indent, body) = if as_given { ("", *line) } else { split_indent(line) };
                if is_blank(body) {
                    // A blank line keeps its whitespace, mapped, unless the
                    // model adds trailing whitespace the file does not have;
                    // an empty one stays empty.
                    if !seen.extra_trailing && !line.is_empty() {
                        out.push_str(&hit.reindent.apply(line).unwrap_or_default());
                    }
                } else {
                    if !as_given {
                        out.push_str(&hit.reindent.apply(indent).ok_or(m)?);
                    }
                    let body = if seen.extra_trailing { trim_end(body) } else { body };
                    write_body(&mut out, file, hit, old, pair, body, seen);
                }
            }
        }
        if m < last_new {
            match source.filter(|&k| k < hit.breaks.len()) {
                Some(k) => out.push_str(&file[hit.breaks[k].clone()]),
                None => out.push_str(terminator),
            }
        }
    }
    Ok(out)
}

/// Per line of `new`: the line of `old` it equals (kept), or the one it
/// replaces (paired). Lines with text are paired first, blank ones only
/// between them: a blank line equals every other, so one deleted at the top
/// and one added lower down must not decide which text lines the model kept
/// (a kept line is written as the file has it, trailing whitespace and all).
fn line_pairs(old: &[&str], new: &[&str]) -> (Vec<Option<usize>>, Vec<Option<usize>>) {
    let mut kept: Vec<Option<usize>> = vec![None; new.len()];
    let mut paired: Vec<Option<usize>> = vec![None; new.len()];
    let with_text = |lines: &[&str]| -> Vec<usize> { (0..lines.len()).filter(|&i| !is_blank(lines[i])).collect() };
    let (old_text, new_text) = (with_text(old), with_text(new));
    let old_lines: Vec<&str> = old_text.iter().map(|&k| old[k]).collect();
    let new_lines: Vec<&str> = new_text.iter().map(|&m| new[m]).collect();
    let mut anchors = Vec::new();
    for op in similar::capture_diff_slices(similar::Algorithm::Patience, &old_lines, &new_lines) {
        if let similar::DiffOp::Equal { old_index, new_index, len } = op {
            anchors.extend((0..len).map(|offset| (old_text[old_index + offset], new_text[new_index + offset])));
        }
    }
    let mut from = (0, 0);
    for (k, m) in anchors.into_iter().chain(std::iter::once((old.len(), new.len()))) {
        let (old_gap, new_gap) = (&old[from.0..k], &new[from.1..m]);
        for op in similar::capture_diff_slices(similar::Algorithm::Patience, old_gap, new_gap) {
            match op {
                similar::DiffOp::Equal { old_index, new_index, len } => {
                    for offset in 0..len {
                        kept[from.1 + new_index + offset] = Some(from.0 + old_index + offset);
                    }
                }
                similar::DiffOp::Replace { old_index, old_len, new_index, new_len } => {
                    for offset in 0..old_len.min(new_len) {
                        paired[from.1 + new_index + offset] = Some(from.0 + old_index + offset);
                    }
                }
                similar::DiffOp::Delete { .. } | similar::DiffOp::Insert { .. } => {}
            }
        }
        if m < new.len() {
            kept[m] = Some(k);
        }
        from = (k + 1, m + 1);
    }
    (kept, paired)
}

/// Appends a changed line's text: where it pairs with a line of `old` whose
/// file text differs in punctuation only, the characters it keeps are the
/// file's; elsewhere the model's marks that always stood for one of the
/// file's characters are written as that character.
fn write_body(out: &mut String, file: &str, hit: &Hit, old: &[&str], pair: Option<usize>, body: &str, seen: &Seen) {
    if !seen.punct_differs {
        out.push_str(body);
        return;
    }
    let mapped = |c: char| seen.punct.get(&c).copied().unwrap_or(c);
    let Some(k) = pair else {
        out.extend(body.chars().map(mapped));
        return;
    };
    let model = old[k];
    let model_body = trim_end(if k == 0 && hit.mid_line { model } else { split_indent(model).1 });
    let file_body: Vec<char> = file[hit.bodies[k].clone()].chars().collect();
    let model_chars: Vec<char> = model_body.chars().collect();
    let new_chars: Vec<char> = body.chars().collect();
    if file_body.len() != model_chars.len() {
        out.extend(new_chars.iter().copied().map(mapped));
        return;
    }
    for op in similar::capture_diff_slices(similar::Algorithm::Myers, &model_chars, &new_chars) {
        match op {
            similar::DiffOp::Equal { old_index, len, .. } => out.extend(&file_body[old_index..old_index + len]),
            similar::DiffOp::Insert { new_index, new_len, .. }
            | similar::DiffOp::Replace { new_index, new_len, .. } => {
                out.extend(new_chars[new_index..new_index + new_len].iter().copied().map(mapped));
            }
            similar::DiffOp::Delete { .. } => {}
        }
    }
}

/// The places, with their lines and (for the first ones) an excerpt.
fn candidates(file: &str, ranges: impl Iterator<Item = Range<usize>>) -> Vec<Candidate> {
    let mut line = 1;
    let mut scanned = 0;
    let mut out = Vec::new();
    for (index, range) in ranges.enumerate() {
        line += file[scanned..range.start].matches('\n').count();
        scanned = range.start;
        let text = &file[range.clone()];
        let span = text.trim_end_matches(['\n', '\r']).matches('\n').count();
        let excerpt = if index < LISTED_CANDIDATES {
            let first = text.lines().map(str::trim).find(|line| !line.is_empty()).unwrap_or_default();
            let mut excerpt = String::new();
            push_cut(&mut excerpt, first, EXCERPT_CHARS);
            excerpt
        } else {
            String::new()
        };
        out.push(Candidate { lines: (line, line + span), excerpt });
    }
    out
}

/// Appends `line`, cut to `max_chars` characters with a marker saying so.
fn push_cut(out: &mut String, line: &str, max_chars: usize) {
    match line.char_indices().nth(max_chars) {
        None => out.push_str(line),
        Some((cut, _)) => {
            out.push_str(&line[..cut]);
            out.push('…');
        }
    }
}

/// Whether most line breaks in `text` are CRLF.
pub fn prefers_crlf(text: &str) -> bool {
    let crlf = text.matches("\r\n").count();
    crlf > 0 && crlf * 2 >= text.matches('\n').count()
}

fn to_lf(text: &str) -> String {
    text.replace("\r\n", "\n")
}

fn to_crlf(text: &str) -> String {
    to_lf(text).replace('\n', "\r\n")
}

/// Whether every non-empty line starts like `read_file` output (`   12\t`).
fn has_line_number_prefixes(text: &str) -> bool {
    let mut lines = text.lines().filter(|line| !line.trim().is_empty()).peekable();
    lines.peek().is_some()
        && lines.all(|line| {
            let rest = line.trim_start_matches(' ');
            let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            digits > 0 && rest[digits..].starts_with('\t')
        })
}

/// Where the file has text most like `needle`: its longest line is compared,
/// ignoring whitespace, against every line of the file. Returns the 1-based
/// line the region starts at and the region, numbered like `read_file`.
fn closest_region(text: &str, needle: &str) -> Option<(usize, String)> {
    let needle_lines: Vec<&str> = needle.lines().collect();
    let (anchor_index, anchor) = needle_lines.iter().enumerate().max_by_key(|(_, line)| line.trim().len())?;
    let anchor = squash(anchor);
    if anchor.chars().count() < 3 {
        return None;
    }
    let anchor_pairs = pairs(&anchor);
    let lines: Vec<&str> = text.lines().take(CLOSEST_SCAN_LINES).collect();
    let mut best: Option<(f64, usize)> = None;
    for (index, line) in lines.iter().enumerate() {
        let key = squash(line);
        if key.is_empty() {
            continue;
        }
        // Dice is at most 2·min/(a+b), below the 0.5 threshold once one side
        // has over three times the pairs of the other: skipping those lines
        // changes no answer and spares sorting the pairs of a huge line.
        let key_pairs = key.chars().count() - 1;
        if key_pairs > 3 * anchor_pairs.len() || anchor_pairs.len() > 3 * key_pairs {
            continue;
        }
        let score = if key == anchor { 1.0 } else { dice(&anchor_pairs, &pairs(&key)) };
        if best.is_none_or(|(top, _)| score > top) {
            best = Some((score, index));
        }
    }
    let (score, index) = best?;
    if score < 0.5 {
        return None;
    }
    let start = index.saturating_sub(anchor_index);
    let end = (start + needle_lines.len().clamp(1, 12)).min(lines.len());
    let mut excerpt = String::new();
    for (offset, line) in lines[start..end].iter().enumerate() {
        let _ = write!(excerpt, "{:>6}\t", start + offset + 1);
        match line.char_indices().nth(200) {
            None => excerpt.push_str(line),
            Some((cut, _)) => {
                excerpt.push_str(&line[..cut]);
                let _ = write!(excerpt, "… [line cut: {} characters in total]", line.chars().count());
            }
        }
        excerpt.push('\n');
    }
    excerpt.truncate(excerpt.trim_end_matches('\n').len());
    Some((start + 1, excerpt))
}

fn squash(line: &str) -> String {
    line.chars().filter(|c| !c.is_whitespace()).collect()
}

/// The sorted character pairs of `text`, for [`dice`].
fn pairs(text: &str) -> Vec<(char, char)> {
    let chars: Vec<char> = text.chars().collect();
    let mut pairs: Vec<(char, char)> = chars.windows(2).map(|pair| (pair[0], pair[1])).collect();
    pairs.sort_unstable();
    pairs
}

/// Dice similarity of two sorted pair lists: 1.0 for the same pairs, 0.0 for none shared.
fn dice(a: &[(char, char)], b: &[(char, char)]) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let (mut i, mut j, mut shared) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                shared += 1;
                i += 1;
                j += 1;
            }
        }
    }
    (2 * shared) as f64 / (a.len() + b.len()) as f64
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    /// Which correction a case expects.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Fix {
        Exact,
        Trailing,
        Indent,
        Numbers,
        Escapes,
        Punct,
        Blank,
    }

    fn fixed(correction: &Correction) -> Vec<Fix> {
        let mut fixes = Vec::new();
        if correction.line_numbers {
            fixes.push(Fix::Numbers);
        }
        if correction.escapes {
            fixes.push(Fix::Escapes);
        }
        if correction.blank_lines {
            fixes.push(Fix::Blank);
        }
        if correction.trailing_whitespace {
            fixes.push(Fix::Trailing);
        }
        if correction.indentation.is_some() {
            fixes.push(Fix::Indent);
        }
        if correction.punctuation {
            fixes.push(Fix::Punct);
        }
        if fixes.is_empty() {
            fixes.push(Fix::Exact);
        }
        fixes
    }

    struct Case {
        name: &'static str,
        file: &'static str,
        old: &'static str,
        new: &'static str,
        expected: &'static str,
        fixes: &'static [Fix],
    }

    /// One case per mistake, in several languages: each applies exactly
    /// what the model meant, and says which correction it needed.
    #[test]
    fn each_recoverable_mistake_applies_exactly_what_was_meant() {
        let cases = [
            // Python.
            Case {
                name: "python: the file has trailing spaces old_string lacks; the kept line keeps them",
                file: "def area(r):\n    pi = 3.14159   \n    return pi * r * r\n",
                old: "    pi = 3.14159\n    return pi * r * r\n",
                new: "    pi = 3.14159\n    return pi * r ** 2\n",
                expected: "def area(r):\n    pi = 3.14159   \n    return pi * r ** 2\n",
                fixes: &[Fix::Trailing],
            },
            Case {
                name: "python: the block is indented 4 less than the file; new_string re-indented",
                file: "class Shape:\n    def area(self):\n        return 0\n\n    def name(self):\n        return \"shape\"\n",
                old: "def area(self):\n    return 0\n",
                new: "def area(self):\n    if self.empty:\n        return 0\n    return self.w * self.h\n",
                expected: "class Shape:\n    def area(self):\n        if self.empty:\n            return 0\n        return self.w * self.h\n\n    def name(self):\n        return \"shape\"\n",
                fixes: &[Fix::Indent],
            },
            Case {
                name: "python: indented 2 more than the file, first line included",
                file: "for x in xs:\n    total += x\n    count += 1\nprint(total)\n",
                old: "      total += x\n      count += 1",
                new: "      total += x * 2\n      count += 1",
                expected: "for x in xs:\n    total += x * 2\n    count += 1\nprint(total)\n",
                fixes: &[Fix::Indent],
            },
            Case {
                name: "python: line numbers copied from read_file, in old_string and new_string",
                file: "import os\n\ndef main():\n    print(os.getcwd())\n",
                old: "     3\tdef main():\n     4\t    print(os.getcwd())",
                new: "     3\tdef main():\n     4\t    print(os.getcwd(), flush=True)",
                expected: "import os\n\ndef main():\n    print(os.getcwd(), flush=True)\n",
                fixes: &[Fix::Numbers],
            },
            Case {
                name: "python: line numbers with a numbered blank line whose tab was trimmed",
                file: "import os\n\ndef main():\n    pass\n",
                old: "     1\timport os\n     2\n     3\tdef main():",
                new: "import os\nimport sys\n\ndef main():",
                expected: "import os\nimport sys\n\ndef main():\n    pass\n",
                fixes: &[Fix::Numbers],
            },
            Case {
                name: "python: arguments escaped twice (literal \\n and \\t)",
                file: "def f():\n\treturn 1\n",
                old: "def f():\\n\\treturn 1",
                new: "def f():\\n\\treturn 2",
                expected: "def f():\n\treturn 2\n",
                fixes: &[Fix::Escapes],
            },
            // YAML.
            Case {
                name: "yaml: old_string starts at the first key, the rest dedented by 4",
                file: "services:\n  web:\n    image: nginx:1.25\n    ports:\n      - \"80:80\"\n  db:\n    image: postgres\n",
                old: "image: nginx:1.25\nports:\n  - \"80:80\"",
                new: "image: nginx:1.27\nports:\n  - \"80:80\"\n  - \"443:443\"",
                expected: "services:\n  web:\n    image: nginx:1.27\n    ports:\n      - \"80:80\"\n      - \"443:443\"\n  db:\n    image: postgres\n",
                fixes: &[Fix::Indent],
            },
            Case {
                name: "yaml: old_string has trailing spaces the file lacks; new lines get none either",
                file: "retries: 3\ntimeout: 10\n",
                old: "retries: 3  \ntimeout: 10  \n",
                new: "retries: 5  \ntimeout: 10  \nbackoff: 2  \n",
                expected: "retries: 5\ntimeout: 10\nbackoff: 2\n",
                fixes: &[Fix::Trailing],
            },
            Case {
                name: "yaml: extra blank lines at both ends of old_string",
                file: "name: ci\non: push\njobs: {}\n",
                old: "\n\non: push\n\n\n",
                new: "\n\non: [push, pull_request]\n\n\n",
                expected: "name: ci\non: [push, pull_request]\njobs: {}\n",
                fixes: &[Fix::Blank],
            },
            // Rust.
            Case {
                name: "rust: curly quotes and apostrophe in old_string and new_string for the file's ASCII",
                file: "fn main() {\n    say(\"it's done\");\n}\n",
                old: "    say(\u{201c}it\u{2019}s done\u{201d});",
                new: "    say(\u{201c}it\u{2019}s finished\u{201d});",
                expected: "fn main() {\n    say(\"it's finished\");\n}\n",
                fixes: &[Fix::Punct],
            },
            Case {
                name: "rust: blank line at the start, trailing newlines at the end",
                file: "fn a() {}\nfn b() {}\nfn c() {}\n",
                old: "\nfn b() {}\n\n",
                new: "\nfn b() -> u8 { 1 }\n\n",
                expected: "fn a() {}\nfn b() -> u8 { 1 }\nfn c() {}\n",
                fixes: &[Fix::Blank],
            },
            Case {
                name: "rust: a one-line old_string with trailing whitespace the file lacks",
                file: "    let x = 1;\n    let y = 2;\n",
                old: "let y = 2;   ",
                new: "let y = 3;   ",
                expected: "    let x = 1;\n    let y = 3;\n",
                fixes: &[Fix::Trailing],
            },
            Case {
                name: "rust: dedented by 8 with a deeper line inside",
                file: "impl S {\n    fn f(&self) {\n        if self.a {\n            g();\n        }\n    }\n}\n",
                old: "if self.a {\n    g();\n}",
                new: "if self.a && self.b {\n    g();\n    h();\n}",
                expected: "impl S {\n    fn f(&self) {\n        if self.a && self.b {\n            g();\n            h();\n        }\n    }\n}\n",
                fixes: &[Fix::Indent],
            },
            // TypeScript with tabs.
            Case {
                name: "typescript: spaces (4 per level) where the file has tabs",
                file: "export function f(x: number) {\n\tif (x > 0) {\n\t\treturn 1;\n\t}\n\treturn 0;\n}\n",
                old: "    if (x > 0) {\n        return 1;\n    }",
                new: "    if (x > 0) {\n        return 1;\n    } else if (x < 0) {\n        return -1;\n    }",
                expected: "export function f(x: number) {\n\tif (x > 0) {\n\t\treturn 1;\n\t} else if (x < 0) {\n\t\treturn -1;\n\t}\n\treturn 0;\n}\n",
                fixes: &[Fix::Indent],
            },
            Case {
                name: "typescript: 2 spaces per level, no indentation on the first level",
                file: "class A {\n\tm() {\n\t\tthis.x = 1;\n\t}\n}\n",
                old: "m() {\n  this.x = 1;\n}",
                new: "m() {\n  this.x = 2;\n  this.y = 3;\n}",
                expected: "class A {\n\tm() {\n\t\tthis.x = 2;\n\t\tthis.y = 3;\n\t}\n}\n",
                fixes: &[Fix::Indent],
            },
            Case {
                name: "typescript: tabs where the file has 2 spaces",
                file: "if (ok) {\n  run();\n  stop();\n}\n",
                old: "\trun();\n\tstop();\n",
                new: "\trun();\n\tif (done) {\n\t\tstop();\n\t}\n",
                expected: "if (ok) {\n  run();\n  if (done) {\n    stop();\n  }\n}\n",
                fixes: &[Fix::Indent],
            },
            // Markdown.
            Case {
                name: "markdown: ASCII quotes and hyphen where the file has curly quotes and an em dash",
                file: "# Notes\n\nHe said \u{201c}hello\u{201d} \u{2014} twice.\n",
                old: "He said \"hello\" - twice.",
                new: "He said \"hello there\" - twice.",
                expected: "# Notes\n\nHe said \u{201c}hello there\u{201d} \u{2014} twice.\n",
                fixes: &[Fix::Punct],
            },
            Case {
                name: "markdown: a space where the file has a non-breaking one, kept",
                file: "| item | price |\n| tea | 10\u{a0}EUR |\n",
                old: "| tea | 10 EUR |",
                new: "| tea | 12 EUR |",
                expected: "| item | price |\n| tea | 12\u{a0}EUR |\n",
                fixes: &[Fix::Punct],
            },
            Case {
                name: "markdown: hard line breaks (two trailing spaces) kept on the lines not changed",
                file: "Roses are red,  \nviolets are blue.  \nSugar is sweet.\n",
                old: "Roses are red,\nviolets are blue.\nSugar is sweet.",
                new: "Roses are red,\nviolets are purple.\nSugar is sweet.",
                expected: "Roses are red,  \nviolets are purple.\nSugar is sweet.\n",
                fixes: &[Fix::Trailing],
            },
            // CRLF.
            Case {
                name: "crlf: LF old_string dedented by 4; new lines get CRLF",
                file: "if x:\r\n    y = 1\r\n    z = 2\r\nend\r\n",
                old: "y = 1\nz = 2",
                new: "y = 1\nz = 3\nw = 4",
                expected: "if x:\r\n    y = 1\r\n    z = 3\r\n    w = 4\r\nend\r\n",
                fixes: &[Fix::Indent],
            },
            Case {
                name: "crlf: trailing whitespace and line numbers",
                file: "[core]\r\n\tbare = false  \r\n\tfilemode = true\r\n",
                old: "     2\t\tbare = false\n     3\t\tfilemode = true",
                new: "\tbare = false\n\tfilemode = false",
                expected: "[core]\r\n\tbare = false  \r\n\tfilemode = false\r\n",
                fixes: &[Fix::Numbers, Fix::Trailing],
            },
            Case {
                name: "crlf: an exact match keeps the file's line endings (as before)",
                file: "one\r\ntwo\r\n",
                old: "one\ntwo",
                new: "1\n2",
                expected: "1\r\n2\r\n",
                fixes: &[Fix::Exact],
            },
        ];
        for case in cases {
            let located = locate(case.file, case.old, case.new, false)
                .unwrap_or_else(|refusal| panic!("{}: refused: {}", case.name, refusal.message("f", "", "")));
            assert_eq!(located.apply(case.file), case.expected, "{}", case.name);
            assert_eq!(fixed(&located.correction), case.fixes, "{}", case.name);
        }
    }

    /// Everything else is refused, the file untouched: no step finds a
    /// different token, identifier, operator, number, comment or case.
    #[test]
    fn other_differences_and_ambiguity_are_refused() {
        type Expect = fn(&Refusal) -> bool;
        let cases: [(&str, &str, &str, Expect); 9] = [
            ("wrong token", "x = compute(a, b)\n", "x = compute(a; b)", |r| matches!(r, Refusal::NotFound(_))),
            ("wrong identifier", "    total = 0\n    count = 0\n", "total = 0\ncounter = 0", |r| {
                matches!(r, Refusal::NotFound(_))
            }),
            ("wrong number", "    offset = x - 1\n", "  offset = x + 1", |r| matches!(r, Refusal::NotFound(_))),
            ("comment stripped", "let x = 1; // keep\nlet y = 2;\n", "let x = 1;\nlet y = 2;", |r| {
                matches!(r, Refusal::NotFound(_))
            }),
            ("case folded", "Hello World\n", "hello world", |r| matches!(r, Refusal::NotFound(_))),
            ("relative indentation changed", "if a:\n    b()\n    c()\n", "if a:\n    b()\n        c()", |r| {
                matches!(r, Refusal::NotFound(_))
            }),
            ("ambiguous exactly", "let a = 0;\nlet a = 0;\n", "let a = 0;", |r| {
                matches!(r, Refusal::Ambiguous { count: 2, .. })
            }),
            (
                "ambiguous after normalising",
                "def a():\n    return 1\n\ndef b():\n  return 1  \n",
                "\treturn 1\n",
                |r| matches!(r, Refusal::Ambiguous { count: 2, .. }),
            ),
            ("a word cut in two", "    maximum = 1\n", "imum = 1  ", |r| matches!(r, Refusal::NotFound(_))),
        ];
        for (name, file, old, expect) in cases {
            let refusal = locate(file, old, "CHANGED", false).expect_err(name);
            assert!(expect(&refusal), "{name}: {refusal:?}");
        }
    }

    #[test]
    fn ambiguity_names_every_candidate_with_lines_and_excerpts() {
        let file = "def a():\n    return 1\n\ndef b():\n  return 1  \n";
        let refusal = locate(file, "\treturn 1\n", "\treturn 2\n", false).unwrap_err();
        let message = refusal.message("m.py", "", "");
        assert!(message.starts_with("old_string matches 2 places in m.py (it is not in the file exactly; ignoring trailing whitespace and indentation) (lines 2, 5)."), "{message}");
        assert!(message.ends_with("The places:\n  line 2: return 1\n  line 5: return 1"), "{message}");

        let many: String = (0..30).map(|n| format!("x = {n}\ny()\n")).collect();
        let refusal = locate(&many, "y()", "z()", false).unwrap_err();
        let message = refusal.message("m.py", "", "");
        assert!(message.contains("(lines 2, 4, 6, "), "{message}");
        assert!(message.contains("\n  line 40: y()\n  … and 10 more (lines above)."), "{message}");
        assert!(message.contains(", 60). No changes"), "every line is named: {message}");
    }

    #[test]
    fn stricter_steps_win_and_replace_all_works_on_every_step() {
        // Exact text wins over a place that needs normalising.
        let file = "  foo()  \nfoo()\n";
        let located = locate(file, "foo()\n", "bar()\n", false).unwrap();
        assert_eq!(located.apply(file), "  foo()  \nbar()\n");
        assert!(located.correction.is_exact());

        // Every occurrence, each re-indented by its own shift.
        let file = "a:\n  x: 1\nb:\n    x: 1\n";
        let located = locate(file, "x: 1  ", "x: 2", true).unwrap();
        assert_eq!(located.apply(file), "a:\n  x: 2\nb:\n    x: 2\n");
    }

    #[test]
    fn literal_escapes_are_kept_when_the_file_has_them() {
        // The literal text is in the file: it is what is meant.
        let file = "printf(\"a\\n\");\n";
        let located = locate(file, "printf(\"a\\n\");", "printf(\"b\\n\");", false).unwrap();
        assert_eq!(located.apply(file), "printf(\"b\\n\");\n");
        assert!(located.correction.is_exact());
    }

    #[test]
    fn line_numbers_must_be_read_files_own_and_consecutive() {
        let file = "a\nb\nc\n";
        for old in ["     1\ta\n     3\tc", "1\ta\n2\tb", "     1 a\n     2 b"] {
            assert!(locate(file, old, "x", false).is_err(), "{old:?}");
        }
        assert_eq!(
            locate(file, "     1\ta\n     3\tc", "x", false).unwrap_err(),
            Refusal::NotFound(NotFoundHint::LineNumbers)
        );
    }

    #[test]
    fn a_reindent_new_string_cannot_take_is_refused() {
        let file = "fn f() {\n    a();\n    b();\n}\n";
        let refusal = locate(file, "        a();\n        b();", "        a();\n  c();", false).unwrap_err();
        assert!(matches!(refusal, Refusal::Reindent { at_line: 2, new_line: 2, .. }), "{refusal:?}");
        assert!(refusal.message("f.rs", "", "").contains("line 2 of new_string cannot be re-indented"));
    }

    #[test]
    fn corrections_are_described_for_the_model() {
        let correction = Correction { trailing_whitespace: true, ..Correction::default() };
        assert_eq!(correction.describe().as_deref(), Some("matched after ignoring trailing whitespace"));
        let correction = Correction {
            line_numbers: true,
            indentation: Some(Reindent::Shift { unit: Unit::Spaces, by: 4 }),
            ..Correction::default()
        };
        assert_eq!(
            correction.describe().as_deref(),
            Some(
                "matched after removing the line-number prefixes read_file adds, and re-indenting it: the file has 4 \
                 spaces more indentation than old_string on every line, so new_string was re-indented the same way"
            )
        );
        assert_eq!(Correction::default().describe(), None);
    }
}
