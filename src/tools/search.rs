//! Search tools: `list_directory`, `glob` and `grep`.
//!
//! Owns walking the tree (ripgrep's `ignore` walker: `.gitignore`, `.ignore`
//! and hidden-file rules, the parallel walker for whole-tree searches), glob
//! matching (`globset`), content search (ripgrep's engine: `grep-regex` and
//! `grep-searcher`), and how results are sorted, capped and shown.
//!
//! It must not know ACP, the model API or the [`super::Host`] seam: directory
//! walks and searches read the local disk directly, because the editor's
//! `fs/*` methods cannot list or search directories (so unsaved editor buffers
//! are not searched). All file system work runs on a blocking thread, raced
//! against the turn's cancellation.
//!
//! Ignore rules are ripgrep's defaults: `.gitignore` applies inside a git
//! repository, `.ignore` everywhere, hidden entries are skipped, symlinks are
//! not followed. A path given explicitly is always walked, even when ignored.
//!
//! The workspace is hostile input. The base of a search is the target the
//! permission policy judged ([`crate::platform::authority`]); a FIFO, socket or device
//! there is refused before anything opens it. Each file `grep` searches is
//! opened without following a link anywhere on its path and without
//! blocking, and searched only if it is a regular file on the open
//! descriptor. The walker reads ignore files (`.gitignore`, `.ignore`, `.git`
//! files) by name on its own, so a directory holding one that is not a
//! regular file of sane size is left out (counted as unreadable), and a
//! search whose base or ancestors hold one is refused; only a swap between
//! that check and the walker's own read remains.
//!
//! A walk leaves out what sandboxed commands may not read (credentials,
//! lathe's own files: `crate::platform::sandbox::secrets`) and says so, unless the
//! walk's base lies in such a path (the user was asked about it) or the
//! entry lies inside a session root ([`KeptOut`]).

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, PoisonError};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use grep_matcher::Matcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use ignore::{DirEntry, ParallelVisitor, ParallelVisitorBuilder, WalkBuilder, WalkParallel, WalkState};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Access, Description, DisplayContent, Location, Refusal, ToolContext, ToolOutcome, refused};
use super::{lenient, paths};
use crate::cancel::{Cancelled, OrCancel as _};
use crate::platform::authority::{Found, Target, open_searchable};
use crate::platform::sandbox::ReadDenials;
use crate::sync::lock;

/// Deepest `depth` `list_directory` accepts; deeper trees are `glob`'s job.
const MAX_LIST_DEPTH: usize = 5;
/// Most context lines `grep` shows on each side of a match.
const MAX_CONTEXT: usize = 10;
/// Characters of one line `grep` shows; minified files have megabyte lines.
const MAX_LINE_CHARS: usize = 500;
/// Characters shown before the first match when a long line is cut, so the
/// match itself is visible.
const LONG_LINE_LEAD: usize = 100;
/// Files with matches reported as locations, so editors can follow along
/// without being flooded.
const MAX_LOCATIONS: usize = 20;

/// Arguments of `list_directory`.
#[derive(Debug, Clone, Deserialize)]
pub struct ListDirectoryArgs {
    /// Absolute or cwd-relative directory; the cwd when absent.
    #[serde(default, alias = "dir", alias = "directory")]
    pub path: Option<String>,
    /// Levels to list: 1 (the default) lists only the directory's entries.
    #[serde(default, deserialize_with = "lenient::count")]
    pub depth: Option<usize>,
    /// Also list hidden entries and entries excluded by ignore files.
    #[serde(default, alias = "include_hidden", alias = "include_ignored", deserialize_with = "lenient::flag")]
    pub all: bool,
}

/// Arguments of `glob`.
#[derive(Debug, Clone, Deserialize)]
pub struct GlobArgs {
    /// The glob, e.g. `**/*.rs`.
    #[serde(alias = "glob")]
    pub pattern: String,
    /// Absolute or cwd-relative directory to search; the cwd when absent.
    #[serde(default, alias = "dir", alias = "directory")]
    pub path: Option<String>,
}

/// Arguments of `grep`.
#[derive(Debug, Clone, Deserialize)]
pub struct GrepArgs {
    /// A Rust regex (or a literal string with `literal`).
    #[serde(alias = "regex", alias = "query")]
    pub pattern: String,
    /// Absolute or cwd-relative file or directory; the cwd when absent.
    #[serde(default, alias = "dir", alias = "directory")]
    pub path: Option<String>,
    /// Only search files whose name (or, with a `/`, relative path) matches this glob.
    #[serde(default, alias = "include", alias = "file_glob")]
    pub glob: Option<String>,
    /// Match case-insensitively.
    #[serde(default, alias = "ignore_case", deserialize_with = "lenient::flag")]
    pub case_insensitive: bool,
    /// Treat `pattern` as a literal string, not a regex.
    #[serde(default, alias = "fixed_strings", deserialize_with = "lenient::flag")]
    pub literal: bool,
    /// Lines of context before and after each match.
    #[serde(default, alias = "context_lines", deserialize_with = "lenient::count")]
    pub context: Option<usize>,
    /// List only the paths of files that match.
    #[serde(default, deserialize_with = "lenient::flag")]
    pub files_with_matches: bool,
}

/// JSON schema of `list_directory`.
pub fn list_directory_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "Directory to list, absolute or relative to the working directory. Default: the working directory."
            },
            "depth": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LIST_DEPTH,
                "description": format!("Levels to list: 1 (default) lists only the directory's own entries; at most {MAX_LIST_DEPTH}.")
            },
            "all": {
                "type": "boolean",
                "description": "Also list hidden entries and entries excluded by .gitignore/.ignore. Default false."
            }
        },
        "required": []
    })
}

/// JSON schema of `glob`.
pub fn glob_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "description": "Glob, e.g. `**/*.rs` or `src/**/test_*.py`. Without a `/` it matches file names at any depth (`*.rs`); with a `/` it matches paths relative to `path`."
            },
            "path": {
                "type": "string",
                "description": "Directory to search, absolute or relative to the working directory. Default: the working directory."
            }
        },
        "required": ["pattern"]
    })
}

/// JSON schema of `grep`.
pub fn grep_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "description": "Rust regex matched against single lines, e.g. `fn\\s+main` or `foo\\(`."
            },
            "path": {
                "type": "string",
                "description": "File or directory to search, absolute or relative to the working directory. Default: the working directory."
            },
            "glob": {
                "type": "string",
                "description": "Only search files matching this glob, e.g. `*.rs`, `*.{ts,tsx}`, `src/**/*.py`."
            },
            "case_insensitive": {
                "type": "boolean",
                "description": "Match regardless of case. Default false."
            },
            "literal": {
                "type": "boolean",
                "description": "Treat `pattern` as a plain string, not a regex. Default false."
            },
            "context": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_CONTEXT,
                "description": format!("Lines shown before and after each match. Default 0, at most {MAX_CONTEXT}.")
            },
            "files_with_matches": {
                "type": "boolean",
                "description": "Only list the files that contain a match. Default false."
            }
        },
        "required": ["pattern"]
    })
}

/// The judged base of a search: the named path, or the cwd.
fn base_target(path: Option<&str>, cwd: &Path) -> Target {
    Target::resolve(cwd, path.filter(|p| !p.trim().is_empty()).unwrap_or("."))
}

/// A directory as the title shows it: `src/`, `./`, `docs/ → /elsewhere/`
/// (on Windows `docs/ → C:\elsewhere\`: a relative name ends in `/`, an
/// absolute one in the system's separator).
fn dir_title(target: &Target, cwd: &Path) -> String {
    let slash = |shown: String| {
        let end = if Path::new(&shown).is_absolute() { std::path::MAIN_SEPARATOR } else { '/' };
        if shown.ends_with(end) { shown } else { format!("{shown}{end}") }
    };
    if target.leads_elsewhere(cwd) {
        let named = paths::display(&target.named, cwd);
        format!("{} → {}", slash(named), slash(target.real.display().to_string()))
    } else {
        slash(paths::display(&target.named, cwd))
    }
}

fn describe(title: String, target: Target) -> Description {
    Description {
        title,
        locations: vec![Location { path: target.real.clone(), line: None }],
        access: Access::Read(vec![target]),
        preview: Vec::new(),
    }
}

/// Describes a `list_directory` call.
pub fn describe_list_directory(args: &ListDirectoryArgs, cwd: &Path) -> Description {
    let target = base_target(args.path.as_deref(), cwd);
    describe(format!("List {}", dir_title(&target, cwd)), target)
}

/// Describes a `glob` call.
pub fn describe_glob(args: &GlobArgs, cwd: &Path) -> Description {
    let target = base_target(args.path.as_deref(), cwd);
    let mut title = format!("Find `{}`", args.pattern);
    if args.path.is_some() {
        let _ = write!(title, " in {}", dir_title(&target, cwd));
    }
    describe(title, target)
}

/// Describes a `grep` call.
pub fn describe_grep(args: &GrepArgs, cwd: &Path) -> Description {
    let target = base_target(args.path.as_deref(), cwd);
    let mut title = format!("Search for `{}`", args.pattern);
    if args.path.is_some() {
        let _ = write!(title, " in {}", target.shown(cwd));
    }
    if let Some(glob) = &args.glob {
        let _ = write!(title, " (`{glob}`)");
    }
    describe(title, target)
}

/// The refusal of a `list_directory` call that does not depend on the
/// user's answer (see [`super::precheck`]): a target that is no directory.
pub(super) fn check_list(target: &Target, ctx: &ToolContext<'_>) -> Result<(), Refusal> {
    check_base(target, ctx.cwd, true).map_or(Ok(()), |message| Err(refused(message)))
}

/// Runs `list_directory` on the judged directory.
pub async fn list_directory(args: ListDirectoryArgs, target: &Target, ctx: &ToolContext<'_>) -> ToolOutcome {
    if let Err(refusal) = check_list(target, ctx) {
        return *refusal;
    }
    let job = ListJob {
        kept_out: KeptOut::for_walk(target, ctx),
        dir: target.clone(),
        cwd: ctx.cwd.to_path_buf(),
        depth: args.depth.unwrap_or(1).clamp(1, MAX_LIST_DEPTH),
        all: args.all,
        cap: ctx.limits.max_listed_entries,
        cancel: ctx.cancel.clone(),
    };
    blocking_job(move || job.run()).or_cancel(ctx.cancel).await.unwrap_or_else(|Cancelled| ToolOutcome::cancelled())
}

/// The refusals of a `glob` call that do not depend on the user's answer
/// (see [`super::precheck`]): a bad pattern, a base that is no directory.
pub(super) fn check_glob(args: &GlobArgs, target: &Target, ctx: &ToolContext<'_>) -> Result<PathFilter, Refusal> {
    let filter = PathFilter::new(&args.pattern).map_err(refused)?;
    check_list(target, ctx)?;
    Ok(filter)
}

/// Runs `glob` under the judged directory.
pub async fn glob(args: GlobArgs, target: &Target, ctx: &ToolContext<'_>) -> ToolOutcome {
    let filter = match check_glob(&args, target, ctx) {
        Ok(filter) => filter,
        Err(refusal) => return *refusal,
    };
    let job = GlobJob {
        kept_out: KeptOut::for_walk(target, ctx),
        base: target.clone(),
        cwd: ctx.cwd.to_path_buf(),
        pattern: args.pattern,
        filter,
        cap: ctx.limits.max_listed_entries,
        cancel: ctx.cancel.clone(),
    };
    blocking_job(move || job.run()).or_cancel(ctx.cancel).await.unwrap_or_else(|Cancelled| ToolOutcome::cancelled())
}

/// What a `grep` call searches with.
pub(super) struct GrepCheck {
    matcher: RegexMatcher,
    filter: Option<PathFilter>,
}

/// The refusals of a `grep` call that do not depend on the user's answer
/// (see [`super::precheck`]): an empty or invalid pattern, a bad glob, a
/// base that is neither a regular file nor a directory.
pub(super) fn check_grep(args: &GrepArgs, target: &Target, ctx: &ToolContext<'_>) -> Result<GrepCheck, Refusal> {
    if args.pattern.is_empty() {
        return Err(refused("The pattern is empty; give a regex to search for."));
    }
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(args.case_insensitive)
        .fixed_strings(args.literal)
        // As ripgrep does: the matcher may then never match across lines, which
        // lets the searcher look for candidate lines quickly.
        .line_terminator(Some(b'\n'))
        .build(&args.pattern)
        .map_err(|err| {
            ToolOutcome::failed(format!(
                "Invalid regex `{}`: {err}\nEscape special characters (e.g. `\\(`) or pass literal: true.",
                args.pattern
            ))
        })?;
    let filter =
        args.glob.as_deref().filter(|g| !g.trim().is_empty()).map(PathFilter::new).transpose().map_err(refused)?;
    if let Some(message) = check_base(target, ctx.cwd, false) {
        return Err(refused(message));
    }
    Ok(GrepCheck { matcher, filter })
}

/// Runs `grep` in the judged file or directory.
pub async fn grep(args: GrepArgs, target: &Target, ctx: &ToolContext<'_>) -> ToolOutcome {
    let GrepCheck { matcher, filter } = match check_grep(&args, target, ctx) {
        Ok(checked) => checked,
        Err(refusal) => return *refusal,
    };
    let job = GrepJob {
        kept_out: KeptOut::for_walk(target, ctx),
        base: target.clone(),
        cwd: ctx.cwd.to_path_buf(),
        pattern: args.pattern,
        matcher,
        filter,
        context: args.context.unwrap_or(0).min(MAX_CONTEXT),
        files_only: args.files_with_matches,
        max_matches: ctx.limits.max_grep_matches.max(1),
        max_files: ctx.limits.max_listed_entries.max(1),
        skipped: Arc::default(),
        cancel: ctx.cancel.clone(),
    };
    blocking_job(move || job.run()).or_cancel(ctx.cancel).await.unwrap_or_else(|Cancelled| ToolOutcome::cancelled())
}

/// File system work on a blocking thread. The caller races it against the
/// turn's token: cancellation answers at once, and the work notices the
/// token on its own and stops soon after.
async fn blocking_job<F>(work: F) -> ToolOutcome
where
    F: FnOnce() -> ToolOutcome + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|err| ToolOutcome::failed(format!("The search stopped unexpectedly: {err}")))
}

/// A completed outcome whose text the editor shows verbatim (in a code
/// fence, so Markdown does not mangle paths and code).
fn listing(text: String, locations: Option<Vec<Location>>, raw: Value) -> ToolOutcome {
    let longest_ticks = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_ticks.max(2) + 1);
    let mut outcome = ToolOutcome::completed(text);
    outcome.content = vec![DisplayContent::Text(format!("{fence}\n{}\n{fence}", outcome.for_model))];
    outcome.locations = locations;
    outcome.raw_output = Some(raw);
    outcome
}

/// Why a judged search base cannot be searched, said for the model; `None`
/// when it can. A FIFO, socket or device is refused here, before anything
/// opens it.
fn check_base(base: &Target, cwd: &Path, want_dir: bool) -> Option<String> {
    let shown = base.shown(cwd);
    match &base.found {
        Found::Directory => None,
        Found::File { .. } if !want_dir => None,
        Found::Missing if want_dir => Some(format!("No such directory: {shown}")),
        Found::Missing => Some(format!("No such file or directory: {shown}")),
        Found::Unresolvable(why) => Some(format!("Cannot read {shown}: {why}.")),
        Found::File { .. } => {
            Some(format!("{shown} is a file, not a directory. Use read_file to read it, or pass its directory."))
        }
        Found::Special(kind) if want_dir => Some(format!("{shown} is {kind}, not a directory.")),
        Found::Special(kind) => {
            Some(format!("{shown} is {kind}, not a regular file; grep searches only regular files and directories."))
        }
    }
}

/// A path found under the judged `base` as the user reads it: under the name
/// the model gave, relative to the cwd.
fn shown_under(path: &Path, base: &Target, cwd: &Path) -> String {
    match path.strip_prefix(&base.real) {
        Ok(relative) if relative.as_os_str().is_empty() => paths::display(&base.named, cwd),
        Ok(relative) => paths::display(&base.named.join(relative), cwd),
        Err(_) => paths::display(path, cwd),
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Whether a glob names a hidden path component.
fn names_hidden(pattern: &str) -> bool {
    pattern.split('/').any(|part| part.starts_with('.') && part != "." && part != "..")
}

/// The order results are shown in: by path, component by component (`a/b`
/// before `a-b`), as `Path`'s own order, but comparing bytes with `/` ranked
/// lowest, which gives the same order without parsing components (sorting
/// tens of thousands of paths the `Path` way costs more than walking them).
fn path_order(a: &Path, b: &Path) -> Ordering {
    let (a, b) = (a.as_os_str().as_encoded_bytes(), b.as_os_str().as_encoded_bytes());
    let rank = |byte: u8| if byte == b'/' { 0 } else { u16::from(byte) + 1 };
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(at) => rank(a[at]).cmp(&rank(b[at])),
        None => a.len().cmp(&b.len()),
    }
}

/// A path ordered by [`path_order`], as a map key.
#[derive(PartialEq, Eq)]
struct Sorted(PathBuf);

impl Ord for Sorted {
    fn cmp(&self, other: &Self) -> Ordering {
        path_order(&self.0, &other.0)
    }
}

impl PartialOrd for Sorted {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The files the `ignore` walker reads in each directory it enters, by
/// name, following links, whole: a FIFO among them would block the walk for
/// good, a link to `/dev/zero` would fill memory.
const IGNORE_FILES: [&str; 5] = [".ignore", ".gitignore", ".git", ".git/info/exclude", ".git/commondir"];

/// Largest ignore file a walk may read.
const MAX_IGNORE_FILE_BYTES: u64 = 1024 * 1024;

/// The first file in `dir` the walker would read as an ignore file that is
/// not a regular file of sane size (`.git` may be a directory).
fn unsafe_ignore_file(dir: &Path) -> Option<PathBuf> {
    let mut git_dir = false;
    for name in IGNORE_FILES {
        // What lives inside `.git` matters only when `.git` is a directory.
        if name.starts_with(".git/") && !git_dir {
            continue;
        }
        let path = dir.join(name);
        match std::fs::metadata(&path) {
            Err(_) => {}
            Ok(metadata) if metadata.is_dir() && name == ".git" => git_dir = true,
            Ok(metadata) if metadata.is_file() && metadata.len() <= MAX_IGNORE_FILE_BYTES => {}
            Ok(_) => return Some(path),
        }
    }
    None
}

/// Why a walk from `base` cannot start: an ignore file the walker would read
/// in the base or one of its ancestors is a FIFO, a device or huge.
fn check_ignore_files(base: &Target, cwd: &Path) -> Option<String> {
    let file = base.real.ancestors().filter(|dir| dir.is_dir()).find_map(unsafe_ignore_file)?;
    let kind = match std::fs::metadata(&file) {
        Ok(metadata) if metadata.is_file() => "too large to be an ignore file".to_owned(),
        Ok(metadata) if metadata.is_dir() => "a directory".to_owned(),
        Ok(metadata) => format!("{}, not a regular file", crate::platform::authority::special_kind(&metadata)),
        Err(err) => err.to_string(),
    };
    Some(format!(
        "Cannot search {}: {} is {kind}, and the search would read it as an ignore file.",
        base.shown(cwd),
        paths::display(&file, cwd)
    ))
}

/// What a walk leaves out: the paths sandboxed commands may not read, which
/// a walk of a wider directory the user allowed (`grep` in `~`) should not
/// read either. Empty when the walk's base itself lies in one (the user was
/// asked about exactly that) or holds none.
#[derive(Debug, Default)]
struct KeptOut {
    denials: ReadDenials,
    roots: Vec<PathBuf>,
    seen: Mutex<Vec<PathBuf>>,
}

/// Kept-out paths named in a walk's note at most.
const KEPT_OUT_NAMED: usize = 5;

impl KeptOut {
    fn for_walk(base: &Target, ctx: &ToolContext<'_>) -> Option<Arc<KeptOut>> {
        let denials = ctx.host.launcher().read_denials();
        let roots: Vec<PathBuf> = ctx.roots.iter().map(|root| Target::of(root).real).collect();
        if denials.covering(&base.real, &roots).is_some() || !denials.any_beneath(&base.real) {
            return None;
        }
        Some(Arc::new(KeptOut { denials, roots, seen: Mutex::new(Vec::new()) }))
    }

    /// Whether the walk leaves `path` out (and remembers it for the note).
    fn keeps_out(&self, path: &Path) -> bool {
        if self.denials.covering(path, &self.roots).is_none() {
            return false;
        }
        lock(&self.seen).push(path.to_path_buf());
        true
    }

    /// What the model is told about what was left out.
    fn note(kept_out: Option<&KeptOut>, cwd: &Path) -> String {
        let Some(kept_out) = kept_out else { return String::new() };
        let mut seen = lock(&kept_out.seen).clone();
        if seen.is_empty() {
            return String::new();
        }
        seen.sort();
        let named: Vec<String> =
            seen.iter().take(KEPT_OUT_NAMED).map(|path| format!("`{}`", paths::display(path, cwd))).collect();
        let more = if seen.len() > KEPT_OUT_NAMED {
            format!(" and {} more", seen.len() - KEPT_OUT_NAMED)
        } else {
            String::new()
        };
        format!(
            "\n[left out: {}{more}: they may hold credentials, which sandboxed commands cannot read either; \
             read_file asks the user for one]",
            named.join(", ")
        )
    }
}

/// Keeps the walker out of directories whose ignore files it must not read
/// (see [`unsafe_ignore_file`]), counting them in `skipped`, and out of what
/// `kept_out` says.
fn skip_unsafe_directories(
    builder: &mut WalkBuilder,
    skipped: &Arc<AtomicU64>,
    also: fn(&DirEntry) -> bool,
    kept_out: Option<&Arc<KeptOut>>,
) {
    let skipped = Arc::clone(skipped);
    let kept_out = kept_out.cloned();
    builder.filter_entry(move |entry| {
        if !also(entry) {
            return false;
        }
        if entry.depth() > 0 && kept_out.as_ref().is_some_and(|kept_out| kept_out.keeps_out(entry.path())) {
            return false;
        }
        let is_dir = entry.file_type().is_some_and(|kind| kind.is_dir());
        if is_dir && unsafe_ignore_file(entry.path()).is_some() {
            skipped.fetch_add(1, AtomicOrdering::Relaxed);
            return false;
        }
        true
    });
}

/// Walker settings shared by `glob` and `grep`.
fn walker(base: &Path, show_hidden: bool, skipped: &Arc<AtomicU64>, kept_out: Option<&Arc<KeptOut>>) -> WalkParallel {
    let mut builder = WalkBuilder::new(base);
    if show_hidden {
        builder.hidden(false);
        // Git's own store is never what a hidden-file search is after.
        skip_unsafe_directories(&mut builder, skipped, |entry| entry.file_name() != ".git", kept_out);
    } else {
        skip_unsafe_directories(&mut builder, skipped, |_| true, kept_out);
    }
    builder.build_parallel()
}

/// Runs a parallel walk in which every worker thread keeps its own state
/// (no lock per entry); the states are handed back when the walk ends.
fn walk_parallel<S, M, V>(walk: WalkParallel, mut make: M, visit: &V) -> Vec<S>
where
    S: Send,
    M: FnMut() -> S,
    V: Fn(&mut S, Result<DirEntry, ignore::Error>) -> WalkState + Sync,
{
    struct Builder<'s, S, M, V> {
        make: M,
        visit: &'s V,
        done: &'s Mutex<Vec<S>>,
    }
    struct Worker<'s, S, V> {
        state: Option<S>,
        visit: &'s V,
        done: &'s Mutex<Vec<S>>,
    }
    impl<'s, S, M, V> ParallelVisitorBuilder<'s> for Builder<'s, S, M, V>
    where
        S: Send + 's,
        M: FnMut() -> S,
        V: Fn(&mut S, Result<DirEntry, ignore::Error>) -> WalkState + Sync,
    {
        fn build(&mut self) -> Box<dyn ParallelVisitor + 's> {
            Box::new(Worker { state: Some((self.make)()), visit: self.visit, done: self.done })
        }
    }
    impl<S, V> ParallelVisitor for Worker<'_, S, V>
    where
        S: Send,
        V: Fn(&mut S, Result<DirEntry, ignore::Error>) -> WalkState + Sync,
    {
        fn visit(&mut self, entry: Result<DirEntry, ignore::Error>) -> WalkState {
            match &mut self.state {
                Some(state) => (self.visit)(state, entry),
                None => WalkState::Quit,
            }
        }
    }
    // Workers hand their state over when the walk drops them.
    impl<S, V> Drop for Worker<'_, S, V> {
        fn drop(&mut self) {
            if let Some(state) = self.state.take() {
                lock(self.done).push(state);
            }
        }
    }

    let done = Mutex::new(Vec::new());
    walk.visit(&mut Builder { make: &mut make, visit, done: &done });
    done.into_inner().unwrap_or_else(PoisonError::into_inner)
}

/// Which part of a path a glob is matched against.
enum GlobTarget {
    /// No `/` in the pattern: the file name, at any depth.
    Name,
    /// The path relative to the search base.
    Relative,
    /// An absolute pattern: the whole path.
    Absolute,
}

/// A compiled glob and what it is matched against.
pub(super) struct PathFilter {
    /// A one-glob set rather than a `GlobMatcher`: sets match common shapes
    /// (`*.rs`, `**/*.rs`) by extension instead of running a regex per path.
    matcher: GlobSet,
    /// The glob as given, for messages.
    pattern: String,
    target: GlobTarget,
    /// The glob names a hidden component (`.github/**`, `.env*`): the caller
    /// plainly wants hidden files, so the walk includes them.
    names_hidden: bool,
}

impl PathFilter {
    fn new(pattern: &str) -> Result<Self, String> {
        let trimmed = pattern.trim();
        let trimmed = trimmed.strip_prefix("./").unwrap_or(trimmed);
        if trimmed.is_empty() {
            return Err("The glob is empty; give one like `**/*.rs`.".to_owned());
        }
        let target = if Path::new(trimmed).is_absolute() {
            GlobTarget::Absolute
        } else if trimmed.contains('/') {
            GlobTarget::Relative
        } else {
            GlobTarget::Name
        };
        // `*` stays within one path component, as in a shell; `**` crosses
        // them. A bare name is matched against file names alone, where that
        // changes nothing, and leaving it off lets the set match by extension.
        let glob = GlobBuilder::new(trimmed)
            .literal_separator(!matches!(target, GlobTarget::Name))
            .build()
            .map_err(|err| format!("Invalid glob `{pattern}`: {err}"))?;
        let matcher =
            GlobSetBuilder::new().add(glob).build().map_err(|err| format!("Invalid glob `{pattern}`: {err}"))?;
        Ok(Self { matcher, pattern: pattern.to_owned(), target, names_hidden: names_hidden(trimmed) })
    }

    fn is_match(&self, path: &Path, base: &Path) -> bool {
        match self.target {
            GlobTarget::Name => path.file_name().is_some_and(|name| self.matcher.is_match(name)),
            GlobTarget::Relative => path.strip_prefix(base).is_ok_and(|rel| self.matcher.is_match(rel)),
            GlobTarget::Absolute => self.matcher.is_match(path),
        }
    }
}

/// A `list_directory` call, ready to run off the async threads.
struct ListJob {
    kept_out: Option<Arc<KeptOut>>,
    dir: Target,
    cwd: PathBuf,
    depth: usize,
    all: bool,
    cap: usize,
    cancel: CancellationToken,
}

impl ListJob {
    fn run(self) -> ToolOutcome {
        if let Some(message) = check_base(&self.dir, &self.cwd, true) {
            return ToolOutcome::failed(message);
        }
        let mut builder = WalkBuilder::new(&self.dir.real);
        builder.max_depth(Some(self.depth));
        let skipped = Arc::new(AtomicU64::new(0));
        if self.all {
            // No ignore files are read at all.
            builder.standard_filters(false);
            // Show `.git/` itself, never its contents.
            let kept_out = self.kept_out.clone();
            builder.filter_entry(move |entry| {
                entry.path().parent().and_then(Path::file_name) != Some(".git".as_ref())
                    && !kept_out.as_ref().is_some_and(|kept_out| kept_out.keeps_out(entry.path()))
            });
        } else {
            if let Some(message) = check_ignore_files(&self.dir, &self.cwd) {
                return ToolOutcome::failed(message);
            }
            skip_unsafe_directories(&mut builder, &skipped, |_| true, self.kept_out.as_ref());
        }
        let mut entries: Vec<(PathBuf, bool)> = Vec::new();
        let mut unreadable = 0u64;
        for entry in builder.build() {
            if self.cancel.is_cancelled() {
                return ToolOutcome::cancelled();
            }
            let entry = match entry {
                Ok(entry) if entry.depth() > 0 => entry,
                Ok(_) => continue,
                Err(_) => {
                    unreadable += 1;
                    continue;
                }
            };
            let is_dir = match entry.file_type() {
                Some(kind) if kind.is_symlink() => entry.path().is_dir(),
                Some(kind) => kind.is_dir(),
                None => false,
            };
            let relative = entry.path().strip_prefix(&self.dir.real).unwrap_or(entry.path()).to_path_buf();
            entries.push((relative, is_dir));
        }
        entries.sort_unstable_by(|a, b| path_order(&a.0, &b.0));
        unreadable += skipped.load(AtomicOrdering::Relaxed);

        let shown_dir = dir_title(&self.dir, &self.cwd);
        let total = entries.len();
        let mut text = String::new();
        for (path, is_dir) in entries.iter().take(self.cap) {
            let _ = writeln!(text, "{}{}", paths::relative_text(path), if *is_dir { "/" } else { "" });
        }
        if total == 0 {
            text = if self.all {
                format!("{shown_dir} is empty.")
            } else {
                format!("{shown_dir} has no entries (hidden and ignored entries are not listed; pass all: true).")
            };
        }
        if total > self.cap {
            let _ = writeln!(
                text,
                "[... {} not shown; list a subdirectory or use glob]",
                plural((total - self.cap) as u64, "more entry", "more entries")
            );
        }
        if unreadable > 0 {
            let _ = writeln!(text, "[{} could not be read]", plural(unreadable, "entry", "entries"));
        }
        text.push_str(&KeptOut::note(self.kept_out.as_deref(), &self.cwd));
        let raw = json!({ "entries": total, "truncated": total > self.cap });
        listing(text.trim_end().to_owned(), None, raw)
    }
}

/// A `glob` call, ready to run off the async threads.
struct GlobJob {
    kept_out: Option<Arc<KeptOut>>,
    base: Target,
    cwd: PathBuf,
    pattern: String,
    filter: PathFilter,
    cap: usize,
    cancel: CancellationToken,
}

#[derive(Default)]
struct GlobWorker {
    found: Vec<PathBuf>,
    unreadable: u64,
    cancelled: bool,
}

impl GlobJob {
    fn run(self) -> ToolOutcome {
        if let Some(message) =
            check_base(&self.base, &self.cwd, true).or_else(|| check_ignore_files(&self.base, &self.cwd))
        {
            return ToolOutcome::failed(message);
        }
        let show_hidden = self.filter.names_hidden;
        let skipped = Arc::new(AtomicU64::new(0));
        let visit = |worker: &mut GlobWorker, entry: Result<DirEntry, ignore::Error>| {
            if self.cancel.is_cancelled() {
                worker.cancelled = true;
                return WalkState::Quit;
            }
            match entry {
                Ok(entry) => {
                    if entry.file_type().is_some_and(|kind| kind.is_file())
                        && self.filter.is_match(entry.path(), &self.base.real)
                    {
                        worker.found.push(entry.into_path());
                    }
                }
                Err(_) => worker.unreadable += 1,
            }
            WalkState::Continue
        };
        let walk = walker(&self.base.real, show_hidden, &skipped, self.kept_out.as_ref());
        let workers = walk_parallel(walk, GlobWorker::default, &visit);
        if self.cancel.is_cancelled() || workers.iter().any(|w| w.cancelled) {
            return ToolOutcome::cancelled();
        }
        let unreadable: u64 = workers.iter().map(|w| w.unreadable).sum::<u64>() + skipped.load(AtomicOrdering::Relaxed);
        let mut found: Vec<PathBuf> = workers.into_iter().flat_map(|w| w.found).collect();
        let total = found.len();
        // Only the shown paths need sorting: pick them out first.
        if total > self.cap && self.cap > 0 {
            found.select_nth_unstable_by(self.cap, |a, b| path_order(a, b));
            found.truncate(self.cap);
        }
        found.sort_unstable_by(|a, b| path_order(a, b));

        let mut text = String::new();
        for path in found.iter().take(self.cap) {
            let _ = writeln!(text, "{}", shown_under(path, &self.base, &self.cwd));
        }
        if total == 0 {
            let _ = write!(text, "No files match `{}` in {}", self.pattern, dir_title(&self.base, &self.cwd));
            if !show_hidden {
                text.push_str(" (hidden and ignored files are skipped)");
            }
            text.push('.');
        }
        if total > self.cap {
            let _ = writeln!(
                text,
                "[... {} not shown; narrow the pattern or path]",
                plural((total - self.cap) as u64, "more file", "more files")
            );
        }
        if unreadable > 0 {
            let _ = writeln!(text, "[{} could not be read]", plural(unreadable, "entry", "entries"));
        }
        text.push_str(&KeptOut::note(self.kept_out.as_deref(), &self.cwd));
        let raw = json!({ "files": total, "truncated": total > self.cap });
        listing(text.trim_end().to_owned(), None, raw)
    }
}

/// A `grep` call, ready to run off the async threads.
struct GrepJob {
    kept_out: Option<Arc<KeptOut>>,
    base: Target,
    cwd: PathBuf,
    pattern: String,
    matcher: RegexMatcher,
    filter: Option<PathFilter>,
    context: usize,
    files_only: bool,
    /// Matching lines shown at most.
    max_matches: usize,
    /// Files listed at most with `files_only`.
    max_files: usize,
    /// Directories the walk kept out of (see [`unsafe_ignore_file`]).
    skipped: Arc<AtomicU64>,
    cancel: CancellationToken,
}

/// One line kept for the output.
struct HitLine {
    number: u64,
    is_match: bool,
    text: String,
}

/// The kept lines of one file with matches.
struct FileHits {
    /// Matching lines in the file, kept or not.
    matches: u64,
    /// Matching lines kept in `lines`.
    kept: usize,
    /// Kept matching and context lines, in file order.
    lines: Vec<HitLine>,
}

/// One walker thread's searcher and findings.
struct GrepWorker {
    searcher: Searcher,
    matcher: RegexMatcher,
    /// Files with kept lines, by path, bounded (see [`GrepWorker::keep`]).
    files: BTreeMap<Sorted, FileHits>,
    /// Matching lines kept in `files`.
    kept: usize,
    /// Files with matches (with `files_only`: all of them, and the first matching line).
    matched_files: Vec<(PathBuf, u64)>,
    matches: u64,
    files_with_matches: u64,
    binary_files: u64,
    unreadable: u64,
    cancelled: bool,
    /// Reused per file so files without matches allocate nothing.
    scratch: Vec<HitLine>,
}

impl GrepWorker {
    /// Keeps a file's lines while they can still be shown. Output is the first
    /// `cap` matching lines in path order, so a file that sorts after files
    /// already holding `cap` kept matches can never be shown: dropping such
    /// files bounds memory whatever the pattern matches, and the merged result
    /// is the same as if everything had been kept.
    fn keep(&mut self, path: PathBuf, hits: FileHits, cap: usize) {
        let path = Sorted(path);
        if self.kept >= cap && self.files.last_key_value().is_some_and(|(last, _)| path > *last) {
            return;
        }
        self.kept += hits.kept;
        self.files.insert(path, hits);
        while let Some(last) = self.files.last_entry() {
            let last_kept = last.get().kept;
            if self.kept - last_kept < cap {
                break;
            }
            self.kept -= last_kept;
            last.remove();
        }
    }
}

/// Collects one file's lines, keeping at most `cap` matching lines (and their
/// context) but counting every match.
struct FileSink<'a> {
    matcher: &'a RegexMatcher,
    lines: &'a mut Vec<HitLine>,
    cap: usize,
    after: u64,
    files_only: bool,
    matches: u64,
    kept: usize,
    first_line: u64,
    last_kept_match: Option<u64>,
    binary: bool,
}

impl Sink for FileSink<'_> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, found: &SinkMatch<'_>) -> Result<bool, io::Error> {
        let number = found.line_number().unwrap_or(0);
        self.matches += 1;
        if self.matches == 1 {
            self.first_line = number;
        }
        if self.files_only {
            // One match is all a file list needs.
            return Ok(false);
        }
        if self.kept < self.cap {
            self.kept += 1;
            self.last_kept_match = Some(number);
            let text = line_text(found.bytes(), Some(self.matcher));
            self.lines.push(HitLine { number, is_match: true, text });
        }
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, context: &SinkContext<'_>) -> Result<bool, io::Error> {
        let number = context.line_number().unwrap_or(0);
        // Before-context is kept while its match may still be kept; after-context
        // only around a kept match.
        let near_kept = self.last_kept_match.is_some_and(|last| number <= last + self.after);
        if self.kept < self.cap || near_kept {
            self.lines.push(HitLine { number, is_match: false, text: line_text(context.bytes(), None) });
        }
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _: u64) -> Result<bool, io::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// A line for the output: no terminator, at most [`MAX_LINE_CHARS`]
/// characters; a cut long line starts a little before its first match.
fn line_text(bytes: &[u8], matcher: Option<&RegexMatcher>) -> String {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    // Four bytes per character at most: this slice always holds enough.
    let window = MAX_LINE_CHARS * 4;
    if bytes.len() <= window {
        let text = String::from_utf8_lossy(bytes);
        if text.chars().count() <= MAX_LINE_CHARS {
            return text.into_owned();
        }
    }
    let start = matcher
        .and_then(|m| m.find(bytes).ok().flatten())
        .map_or(0, |found| found.start().saturating_sub(LONG_LINE_LEAD));
    // Step back to a character start so the cut does not split one.
    let start = (0..=start).rev().find(|&i| i == 0 || (bytes[i] & 0xC0) != 0x80).unwrap_or(0);
    let end = bytes.len().min(start + window);
    let text = String::from_utf8_lossy(&bytes[start..end]);
    let mut out = String::with_capacity(MAX_LINE_CHARS + 8);
    if start > 0 {
        out.push('…');
    }
    let mut chars = text.chars();
    out.extend(chars.by_ref().take(MAX_LINE_CHARS));
    if chars.next().is_some() || end < bytes.len() {
        out.push('…');
    }
    out
}

impl GrepJob {
    fn kept_out_note(&self) -> String {
        KeptOut::note(self.kept_out.as_deref(), &self.cwd)
    }

    fn run(self) -> ToolOutcome {
        if let Some(message) =
            check_base(&self.base, &self.cwd, false).or_else(|| check_ignore_files(&self.base, &self.cwd))
        {
            return ToolOutcome::failed(message);
        }
        let show_hidden = self.filter.as_ref().is_some_and(|filter| filter.names_hidden);
        let searcher = SearcherBuilder::new()
            .line_number(true)
            // As ripgrep does for files it finds: a NUL byte means binary; skip it.
            .binary_detection(BinaryDetection::quit(b'\x00'))
            .before_context(self.context)
            .after_context(self.context)
            .build();
        let make = || GrepWorker {
            searcher: searcher.clone(),
            matcher: self.matcher.clone(),
            files: BTreeMap::new(),
            kept: 0,
            matched_files: Vec::new(),
            matches: 0,
            files_with_matches: 0,
            binary_files: 0,
            unreadable: 0,
            cancelled: false,
            scratch: Vec::new(),
        };
        let visit = |worker: &mut GrepWorker, entry: Result<DirEntry, ignore::Error>| {
            if self.cancel.is_cancelled() {
                worker.cancelled = true;
                return WalkState::Quit;
            }
            match entry {
                Ok(entry) => self.search_entry(worker, entry),
                Err(_) => worker.unreadable += 1,
            }
            WalkState::Continue
        };
        let walk = walker(&self.base.real, show_hidden, &self.skipped, self.kept_out.as_ref());
        let workers = walk_parallel(walk, make, &visit);
        if self.cancel.is_cancelled() || workers.iter().any(|w| w.cancelled) {
            return ToolOutcome::cancelled();
        }
        if self.files_only { self.render_files(workers) } else { self.render_lines(workers) }
    }

    fn search_entry(&self, worker: &mut GrepWorker, entry: DirEntry) {
        // A path given explicitly is searched whatever its kind or name, as ripgrep does.
        let wanted = if entry.depth() == 0 {
            entry.file_type().is_some_and(|kind| !kind.is_dir())
        } else {
            entry.file_type().is_some_and(|kind| kind.is_file())
                && self.filter.as_ref().is_none_or(|filter| filter.is_match(entry.path(), &self.base.real))
        };
        if !wanted {
            return;
        }
        worker.scratch.clear();
        let mut sink = FileSink {
            matcher: &worker.matcher,
            lines: &mut worker.scratch,
            cap: self.max_matches,
            after: self.context as u64,
            files_only: self.files_only,
            matches: 0,
            kept: 0,
            first_line: 0,
            last_kept_match: None,
            binary: false,
        };
        // Opened without following a link anywhere on the way and without
        // blocking, and searched only if it is a regular file on the open
        // descriptor: a name swapped for a link or a FIFO since the walk
        // listed it is skipped, never followed or waited on.
        let searched = open_searchable(entry.path())
            .and_then(|file| worker.searcher.search_file(&worker.matcher, &file, &mut sink));
        let (matches, kept, first_line, binary) = (sink.matches, sink.kept, sink.first_line, sink.binary);
        if searched.is_err() {
            worker.unreadable += 1;
            return;
        }
        if binary {
            worker.binary_files += 1;
            return;
        }
        if matches == 0 {
            return;
        }
        worker.matches += matches;
        worker.files_with_matches += 1;
        if self.files_only {
            worker.matched_files.push((entry.into_path(), first_line));
        } else {
            let hits = FileHits { matches, kept, lines: std::mem::take(&mut worker.scratch) };
            worker.keep(entry.into_path(), hits, self.max_matches);
        }
    }

    /// What to say when nothing matched.
    fn no_matches(&self, binary_files: u64) -> String {
        let shown = self.base.shown(&self.cwd);
        let place = if shown == "." { "the working directory" } else { &shown };
        let mut text = format!("No matches for `{}` in {place}", self.pattern);
        if let Some(filter) = &self.filter {
            let _ = write!(text, " (files matching `{}`)", filter.pattern);
        }
        text.push('.');
        if matches!(self.base.found, Found::File { .. }) && binary_files > 0 {
            text.push_str(" It is a binary file; grep skips binary files.");
        }
        text
    }

    fn render_files(&self, workers: Vec<GrepWorker>) -> ToolOutcome {
        let (binary, unreadable) = totals(&workers);
        let unreadable = unreadable + self.skipped.load(AtomicOrdering::Relaxed);
        let mut files: Vec<(PathBuf, u64)> = workers.into_iter().flat_map(|w| w.matched_files).collect();
        files.sort_unstable_by(|a, b| path_order(&a.0, &b.0));
        let total = files.len();
        if total == 0 {
            let text = self.no_matches(binary) + &unreadable_note(unreadable) + &self.kept_out_note();
            return listing(text, None, json!({ "files": 0 }));
        }
        let mut text = String::new();
        for (path, _) in files.iter().take(self.max_files) {
            let _ = writeln!(text, "{}", shown_under(path, &self.base, &self.cwd));
        }
        if total > self.max_files {
            let _ = writeln!(
                text,
                "[... {} not shown; narrow the pattern or path]",
                plural((total - self.max_files) as u64, "more file", "more files")
            );
        }
        text.push_str(&unreadable_note(unreadable));
        text.push_str(&self.kept_out_note());
        let locations = files
            .iter()
            .take(MAX_LOCATIONS)
            .map(|(path, line)| Location { path: path.clone(), line: u32::try_from(*line).ok() })
            .collect();
        let raw = json!({ "files": total, "truncated": total > self.max_files });
        listing(text.trim_end().to_owned(), Some(locations), raw)
    }

    fn render_lines(&self, workers: Vec<GrepWorker>) -> ToolOutcome {
        let (binary, unreadable) = totals(&workers);
        let unreadable = unreadable + self.skipped.load(AtomicOrdering::Relaxed);
        let matches: u64 = workers.iter().map(|w| w.matches).sum();
        let files_with_matches: u64 = workers.iter().map(|w| w.files_with_matches).sum();
        if matches == 0 {
            let text = self.no_matches(binary) + &unreadable_note(unreadable) + &self.kept_out_note();
            return listing(text, None, json!({ "matches": 0, "files": 0 }));
        }
        // Parallel walk order is arbitrary: sort for stable, readable output.
        let mut files: Vec<(Sorted, FileHits)> = workers.into_iter().flat_map(|w| w.files).collect();
        files.sort_unstable_by(|a, b| a.0.cmp(&b.0));

        let cap = self.max_matches;
        let after = self.context as u64;
        let mut text = String::new();
        let mut shown = 0usize;
        let mut fully_shown_files = 0u64;
        let mut locations = Vec::new();
        for (Sorted(path), hits) in &files {
            if shown >= cap {
                break;
            }
            // The lines up to the last match that fits, with its after-context.
            let mut end = hits.lines.len();
            let mut in_file = 0usize;
            let mut last_match = 0u64;
            for (index, line) in hits.lines.iter().enumerate() {
                if line.is_match {
                    if shown + in_file == cap {
                        end = index;
                        break;
                    }
                    in_file += 1;
                    last_match = line.number;
                }
            }
            while end > 0 && !hits.lines[end - 1].is_match && hits.lines[end - 1].number > last_match + after {
                end -= 1;
            }
            let shown_path = shown_under(path, &self.base, &self.cwd);
            let mut previous: Option<u64> = None;
            for line in &hits.lines[..end] {
                let gap = previous.is_none_or(|p| line.number != p + 1);
                // As ripgrep: `--` between groups of context that do not touch.
                if self.context > 0 && gap && !text.is_empty() {
                    text.push_str("--\n");
                }
                let separator = if line.is_match { ':' } else { '-' };
                let _ = writeln!(text, "{shown_path}{separator}{}{separator}{}", line.number, line.text);
                previous = Some(line.number);
            }
            if let Some(first) = hits.lines.iter().find(|line| line.is_match)
                && locations.len() < MAX_LOCATIONS
            {
                locations.push(Location { path: path.clone(), line: u32::try_from(first.number).ok() });
            }
            shown += in_file;
            if in_file as u64 == hits.matches {
                fully_shown_files += 1;
            }
        }
        let hidden = matches - shown as u64;
        if hidden > 0 {
            let _ = writeln!(
                text,
                "[... {} in {} not shown; narrow the pattern or path]",
                plural(hidden, "more match", "more matches"),
                plural(files_with_matches - fully_shown_files, "file", "files")
            );
        }
        text.push_str(&unreadable_note(unreadable));
        text.push_str(&self.kept_out_note());
        let raw = json!({ "matches": matches, "files": files_with_matches, "truncated": hidden > 0 });
        listing(text.trim_end().to_owned(), Some(locations), raw)
    }
}

fn totals(workers: &[GrepWorker]) -> (u64, u64) {
    (workers.iter().map(|w| w.binary_files).sum(), workers.iter().map(|w| w.unreadable).sum())
}

fn unreadable_note(unreadable: u64) -> String {
    if unreadable == 0 {
        String::new()
    } else {
        format!("\n[{} could not be read]", plural(unreadable, "file or directory", "files or directories"))
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::time::Duration;

    use futures_util::future::BoxFuture;

    use super::*;
    use crate::tools::{Host, HostError, OutcomeStatus, Terminals, ToolLimits, prepare, run};

    /// The search tools read the disk directly; the host is never called.
    struct NoHost;

    impl Host for NoHost {
        fn read_text_file<'a>(&'a self, _: &'a Target) -> BoxFuture<'a, Result<String, HostError>> {
            Box::pin(async { Err(HostError::Other("not in these tests".to_owned())) })
        }
        fn write_text_file<'a>(&'a self, _: &'a Target, _: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
            Box::pin(async { Err(HostError::Other("not in these tests".to_owned())) })
        }
        fn reads_via_client(&self) -> bool {
            false
        }
        fn writes_in_place(&self) -> bool {
            false
        }
        fn terminals(&self) -> Option<&dyn Terminals> {
            None
        }
    }

    struct Fixture {
        dir: tempfile::TempDir,
        limits: ToolLimits,
        cancel: CancellationToken,
    }

    fn write(root: &Path, path: &str, content: &[u8]) {
        let path = root.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    /// A small project: a git repository (so `.gitignore` applies) with ignored,
    /// hidden, binary and nested files.
    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir(root.join(".git")).unwrap();
        write(root, ".git/config", b"[core]\nhello = fn main\n");
        write(root, ".gitignore", b"target/\n*.log\n");
        write(root, "README.md", b"# Demo\nHello world\n");
        write(root, "data.bin", b"hello\0binary\nfn main() {}\n");
        write(root, "debug.log", b"hello from a log\nfn main\n");
        write(root, "src/main.rs", b"fn main() {\n    say!(\"hello\");\n}\n");
        write(root, "src/lib.rs", b"pub mod nested;\n\npub fn alpha() {}\n\npub fn beta() {}\n");
        write(root, "src/nested/deep/mod.rs", b"fn  main() {}\n");
        write(root, "target/debug/build.rs", b"fn main() {}\n");
        write(root, ".hidden/secret.rs", b"fn main() {}\n");
        write(root, ".env", b"HELLO=1\n");
        Fixture { dir, limits: ToolLimits::default(), cancel: CancellationToken::new() }
    }

    impl Fixture {
        fn root(&self) -> &Path {
            self.dir.path()
        }

        async fn call(&self, tool: &str, arguments: Value) -> ToolOutcome {
            let call = prepare(tool, &arguments.to_string(), self.root()).unwrap();
            let roots = [self.root().to_path_buf()];
            let ctx = ToolContext {
                cwd: self.root(),
                roots: &roots,
                host: &NoHost,
                cancel: &self.cancel,
                limits: &self.limits,
                progress: &|_| {},
                seen: &crate::tools::versions::FileVersions::default(),
            };
            run(call, &ctx).await
        }

        async fn text(&self, tool: &str, arguments: Value) -> String {
            let outcome = self.call(tool, arguments).await;
            assert_eq!(outcome.status, OutcomeStatus::Completed, "{}", outcome.for_model);
            outcome.for_model
        }
    }

    #[tokio::test]
    async fn list_directory_is_sorted_and_skips_hidden_and_ignored_entries() {
        let f = fixture();
        assert_eq!(f.text("list_directory", json!({})).await, "README.md\ndata.bin\nsrc/");
        assert_eq!(f.text("list_directory", json!({"path": "src"})).await, "lib.rs\nmain.rs\nnested/");
    }

    #[tokio::test]
    async fn list_directory_depth_and_all() {
        let f = fixture();
        let text = f.text("list_directory", json!({"dir": "src", "depth": 3})).await;
        assert_eq!(text, "lib.rs\nmain.rs\nnested/\nnested/deep/\nnested/deep/mod.rs");
        let text = f.text("list_directory", json!({"all": true})).await;
        assert_eq!(
            text, ".env\n.git/\n.gitignore\n.hidden/\nREADME.md\ndata.bin\ndebug.log\nsrc/\ntarget/",
            "hidden and ignored entries shown"
        );
        let text = f.text("list_directory", json!({"all": "true", "depth": "2"})).await;
        assert!(text.contains("target/debug/") && text.contains(".hidden/secret.rs"), "{text}");
        assert!(!text.contains(".git/config"), "git's store is never listed: {text}");
    }

    #[tokio::test]
    async fn list_directory_caps_with_a_note_and_explains_bad_paths() {
        let mut f = fixture();
        f.limits.max_listed_entries = 2;
        let text = f.text("list_directory", json!({})).await;
        assert_eq!(text, "README.md\ndata.bin\n[... 1 more entry not shown; list a subdirectory or use glob]");

        let missing = f.call("list_directory", json!({"path": "nope"})).await;
        assert_eq!(missing.status, OutcomeStatus::Failed);
        assert_eq!(missing.for_model, "No such directory: nope");
        let file = f.call("list_directory", json!({"path": "src/main.rs"})).await;
        assert_eq!(file.status, OutcomeStatus::Failed);
        assert!(file.for_model.starts_with("src/main.rs is a file, not a directory"), "{}", file.for_model);

        fs::create_dir(f.root().join("empty")).unwrap();
        let empty = f.text("list_directory", json!({"path": "empty"})).await;
        assert!(empty.starts_with("empty/ has no entries"), "{empty}");
    }

    #[test]
    fn descriptions() {
        // An absolute path that is not there, in the system's spelling.
        let cwd = Path::new(if cfg!(windows) { r"C:\p" } else { "/p" });
        let list = prepare("list_directory", r#"{"path":"src"}"#, cwd).unwrap().description;
        assert_eq!(list.title, "List src/");
        assert_eq!(list.access, Access::Read(vec![Target::of(&cwd.join("src"))]));
        assert_eq!(list.locations, vec![Location { path: cwd.join("src"), line: None }], "ACP's paths stay native");
        assert_eq!(prepare("list_directory", "", cwd).unwrap().description.title, "List ./");

        let glob = prepare("glob", r#"{"pattern":"**/*.rs"}"#, cwd).unwrap().description;
        assert_eq!(glob.title, "Find `**/*.rs`");
        let glob = prepare("glob", r#"{"pattern":"*.rs","path":"src"}"#, cwd).unwrap().description;
        assert_eq!(glob.title, "Find `*.rs` in src/");

        let grep = prepare("grep", r#"{"pattern":"fn main"}"#, cwd).unwrap().description;
        assert_eq!(grep.title, "Search for `fn main`");
        assert_eq!(grep.access, Access::Read(vec![Target::of(cwd)]));
        let grep = prepare("grep", r#"{"pattern":"x","path":"src","glob":"*.rs"}"#, cwd).unwrap().description;
        assert_eq!(grep.title, "Search for `x` in src (`*.rs`)");
        assert!(prepare("grep", r#"{"path":"src"}"#, cwd).unwrap_err().contains("pattern"));
    }

    #[tokio::test]
    async fn glob_semantics() {
        let f = fixture();
        let all_rust = "src/lib.rs\nsrc/main.rs\nsrc/nested/deep/mod.rs";
        assert_eq!(f.text("glob", json!({"pattern": "*.rs"})).await, all_rust, "a bare name matches at any depth");
        assert_eq!(f.text("glob", json!({"pattern": "**/*.rs"})).await, all_rust);
        assert_eq!(
            f.text("glob", json!({"pattern": "./src/*.rs"})).await,
            "src/lib.rs\nsrc/main.rs",
            "`*` stays in one dir"
        );
        assert_eq!(f.text("glob", json!({"pattern": "*.rs", "path": "src/nested"})).await, "src/nested/deep/mod.rs");
        assert_eq!(
            f.text("glob", json!({"pattern": "deep/*.rs", "path": "src/nested"})).await,
            "src/nested/deep/mod.rs"
        );
        assert_eq!(f.text("glob", json!({"pattern": "*.{md,bin}"})).await, "README.md\ndata.bin");
        assert_eq!(
            f.text("glob", json!({"pattern": ".hidden/*"})).await,
            ".hidden/secret.rs",
            "named hidden dirs are searched"
        );
        let absolute = format!("{}/src/*.rs", f.root().display());
        assert_eq!(f.text("glob", json!({"pattern": absolute})).await, "src/lib.rs\nsrc/main.rs");

        let none = f.text("glob", json!({"pattern": "*.py"})).await;
        assert_eq!(none, "No files match `*.py` in ./ (hidden and ignored files are skipped).");
        let bad = f.call("glob", json!({"pattern": "src/[a"})).await;
        assert_eq!(bad.status, OutcomeStatus::Failed);
        assert!(bad.for_model.starts_with("Invalid glob `src/[a`"), "{}", bad.for_model);
        let file = f.call("glob", json!({"pattern": "*", "path": "README.md"})).await;
        assert_eq!(file.status, OutcomeStatus::Failed);
    }

    #[tokio::test]
    async fn glob_caps_with_a_note() {
        let mut f = fixture();
        f.limits.max_listed_entries = 1;
        let text = f.text("glob", json!({"pattern": "*.rs"})).await;
        assert_eq!(text, "src/lib.rs\n[... 2 more files not shown; narrow the pattern or path]");
    }

    #[tokio::test]
    async fn grep_respects_ignore_rules_and_skips_binary_files() {
        let f = fixture();
        let outcome = f.call("grep", json!({"pattern": r"fn\s+main"})).await;
        assert_eq!(outcome.for_model, "src/main.rs:1:fn main() {\nsrc/nested/deep/mod.rs:1:fn  main() {}");
        let root = f.root();
        assert_eq!(
            outcome.locations,
            Some(vec![
                Location { path: root.join("src/main.rs"), line: Some(1) },
                Location { path: root.join("src/nested/deep/mod.rs"), line: Some(1) },
            ])
        );
        assert_eq!(outcome.raw_output, Some(json!({"matches": 2, "files": 2, "truncated": false})));
        // An explicit path is searched even when hidden or ignored.
        assert_eq!(
            f.text("grep", json!({"pattern": "main", "path": "target"})).await,
            "target/debug/build.rs:1:fn main() {}"
        );
        let binary = f.text("grep", json!({"pattern": "hello", "path": "data.bin"})).await;
        assert_eq!(binary, "No matches for `hello` in data.bin. It is a binary file; grep skips binary files.");
    }

    #[tokio::test]
    async fn grep_options() {
        let f = fixture();
        assert_eq!(
            f.text("grep", json!({"pattern": "HELLO", "glob": "*.rs"})).await,
            "No matches for `HELLO` in the working directory (files matching `*.rs`)."
        );
        let text = f.text("grep", json!({"pattern": "HELLO", "case_insensitive": true})).await;
        assert_eq!(text, "README.md:2:Hello world\nsrc/main.rs:2:    say!(\"hello\");");
        let text = f.text("grep", json!({"pattern": "hello", "ignore_case": "true", "glob": "*.md"})).await;
        assert_eq!(text, "README.md:2:Hello world");
        assert_eq!(
            f.text("grep", json!({"pattern": "HELLO", "glob": ".env"})).await,
            ".env:1:HELLO=1",
            "a named hidden file"
        );
        let text = f.text("grep", json!({"pattern": "say!(", "literal": true})).await;
        assert_eq!(text, "src/main.rs:2:    say!(\"hello\");");
        let text = f.text("grep", json!({"pattern": "fn", "files_with_matches": true})).await;
        assert_eq!(text, "src/lib.rs\nsrc/main.rs\nsrc/nested/deep/mod.rs");
        let text = f.text("grep", json!({"pattern": "fn", "glob": "src/*.rs", "files_with_matches": true})).await;
        assert_eq!(text, "src/lib.rs\nsrc/main.rs");
    }

    #[tokio::test]
    async fn grep_context_groups() {
        let f = fixture();
        let text = f.text("grep", json!({"pattern": "fn", "path": "src", "context": 1})).await;
        assert_eq!(
            text,
            [
                "src/lib.rs-2-",
                "src/lib.rs:3:pub fn alpha() {}",
                "src/lib.rs-4-",
                "src/lib.rs:5:pub fn beta() {}",
                "--",
                "src/main.rs:1:fn main() {",
                "src/main.rs-2-    say!(\"hello\");",
                "--",
                "src/nested/deep/mod.rs:1:fn  main() {}",
            ]
            .join("\n")
        );
    }

    #[tokio::test]
    async fn grep_explains_no_matches_and_bad_input() {
        let f = fixture();
        assert_eq!(
            f.text("grep", json!({"pattern": "zebra"})).await,
            "No matches for `zebra` in the working directory."
        );
        let bad = f.call("grep", json!({"pattern": "foo("})).await;
        assert_eq!(bad.status, OutcomeStatus::Failed);
        assert!(bad.for_model.starts_with("Invalid regex `foo(`"), "{}", bad.for_model);
        assert!(bad.for_model.contains("unclosed group"), "the regex crate's message: {}", bad.for_model);
        let missing = f.call("grep", json!({"pattern": "x", "path": "nope.rs"})).await;
        assert_eq!(missing.for_model, "No such file or directory: nope.rs");
        let bad_glob = f.call("grep", json!({"pattern": "x", "glob": "[z"})).await;
        assert!(bad_glob.for_model.starts_with("Invalid glob"), "{}", bad_glob.for_model);
    }

    /// Many files over several walker threads: whatever each thread keeps,
    /// the capped output is exactly the first matches in path order.
    #[tokio::test]
    async fn grep_caps_deterministically_with_a_count_of_the_rest() {
        let mut f = fixture();
        for i in 0..60 {
            let body: String = (1..=4).map(|n| format!("needle {i} {n}\nhay\n")).collect();
            write(f.root(), &format!("many/d{}/f{i:02}.txt", i % 7), body.as_bytes());
        }
        let full = f.text("grep", json!({"pattern": "needle", "path": "many"})).await;
        let full: Vec<&str> = full.lines().collect();
        assert_eq!(full.len(), 240);
        assert!(full.windows(2).all(|w| w[0] < w[1]), "sorted by path, then line");

        f.limits.max_grep_matches = 10;
        for _ in 0..5 {
            let capped = f.text("grep", json!({"pattern": "needle", "path": "many"})).await;
            let (shown, note) = capped.rsplit_once('\n').unwrap();
            assert_eq!(shown, full[..10].join("\n"));
            assert_eq!(note, "[... 230 more matches in 58 files not shown; narrow the pattern or path]");
        }
        // The cut falls inside a file: the next match's before-context goes too.
        write(f.root(), "ctx/a.txt", b"x\n");
        write(f.root(), "ctx/b.txt", b"x\n1\n2\n3\n4\nx\n");
        f.limits.max_grep_matches = 2;
        let text = f.text("grep", json!({"pattern": "x", "path": "ctx", "context": 1})).await;
        assert_eq!(
            text,
            "ctx/a.txt:1:x\n--\nctx/b.txt:1:x\nctx/b.txt-2-1\n\
             [... 1 more match in 1 file not shown; narrow the pattern or path]"
        );
    }

    #[tokio::test]
    async fn grep_cuts_long_lines_around_the_match() {
        let f = fixture();
        let line = format!("{}needle{}\n", "a".repeat(5000), "é".repeat(3000));
        write(f.root(), "min.js", line.as_bytes());
        let text = f.text("grep", json!({"pattern": "needle"})).await;
        let shown = text.strip_prefix("min.js:1:").unwrap();
        assert!(shown.starts_with('…') && shown.ends_with('…'), "{shown}");
        assert_eq!(shown.chars().count(), MAX_LINE_CHARS + 2);
        assert!(shown.contains(&format!("{}needle", "a".repeat(LONG_LINE_LEAD))), "the match is visible");
    }

    #[tokio::test]
    async fn cancellation_returns_promptly() {
        let f = fixture();
        f.cancel.cancel();
        let roots = [f.root().to_path_buf()];
        let ctx = ToolContext {
            cwd: f.root(),
            roots: &roots,
            host: &NoHost,
            cancel: &f.cancel,
            limits: &f.limits,
            progress: &|_| {},
            seen: &crate::tools::versions::FileVersions::default(),
        };
        let base = Target::of(f.root());
        let args: GrepArgs = serde_json::from_value(json!({"pattern": "fn"})).unwrap();
        assert_eq!(grep(args, &base, &ctx).await.status, OutcomeStatus::Cancelled);
        let args: GlobArgs = serde_json::from_value(json!({"pattern": "*"})).unwrap();
        assert_eq!(glob(args, &base, &ctx).await.status, OutcomeStatus::Cancelled);
        let args: ListDirectoryArgs = serde_json::from_value(json!({})).unwrap();
        assert_eq!(list_directory(args, &base, &ctx).await.status, OutcomeStatus::Cancelled);

        // The blocking walk notices the token on its own and stops.
        let job = GrepJob {
            kept_out: None,
            base: Target::of(f.root()),
            cwd: f.root().to_path_buf(),
            pattern: "fn".to_owned(),
            matcher: RegexMatcher::new("fn").unwrap(),
            filter: None,
            context: 0,
            files_only: false,
            max_matches: 10,
            max_files: 10,
            skipped: Arc::default(),
            cancel: f.cancel.clone(),
        };
        assert_eq!(job.run().status, OutcomeStatus::Cancelled);
        let job = GlobJob {
            kept_out: None,
            base: Target::of(f.root()),
            cwd: f.root().to_path_buf(),
            pattern: "*".to_owned(),
            filter: PathFilter::new("*").unwrap(),
            cap: 10,
            cancel: f.cancel.clone(),
        };
        assert_eq!(job.run().status, OutcomeStatus::Cancelled);
    }

    #[test]
    fn arguments_are_lenient() {
        let args: GrepArgs = serde_json::from_value(
            json!({"regex": "x", "dir": "src", "context": "3", "ignore_case": "TRUE", "extra": 1}),
        )
        .unwrap();
        assert_eq!((args.pattern.as_str(), args.path.as_deref(), args.context), ("x", Some("src"), Some(3)));
        assert!(args.case_insensitive && !args.literal);
        // The same spellings as edit_file's flags (tools::lenient): 0/1 too.
        let args: GrepArgs = serde_json::from_value(json!({"pattern": "x", "literal": 1, "ignore_case": 0})).unwrap();
        assert!(args.literal && !args.case_insensitive);
        let args: ListDirectoryArgs = serde_json::from_value(json!({"path": null, "depth": null})).unwrap();
        assert_eq!((args.path, args.depth, args.all), (None, None, false));
        let err = serde_json::from_value::<GrepArgs>(json!({"pattern": "x", "context": "lots"})).unwrap_err();
        assert!(err.to_string().contains("positive whole number"), "{err}");
    }

    /// Defect 16 of issue 11, and what the walker reads on its own: grep on
    /// an explicit FIFO fails at once; a FIFO or a link to `/dev/zero` where
    /// the walker would read an ignore file keeps it out of that directory
    /// (or refuses the search when it is in the base) instead of blocking
    /// or filling memory.
    #[test]
    fn special_files_never_block_a_search() {
        use crate::platform::testing;
        let f = fixture();
        if !testing::fifo(&f.root().join("src/pipe")) {
            return;
        }
        write(f.root(), "trap/hidden.rs", b"fn main() {}\n");
        assert!(testing::fifo(&f.root().join("trap/.gitignore")));
        // A link to a FIFO (a link to `/dev/zero` is judged the same way,
        // below, without walking: if that regressed, a walk would eat memory).
        write(f.root(), "zero/z.rs", b"fn main() {}\n");
        assert!(testing::symlink("../trap/.gitignore", f.root().join("zero/.ignore")));
        let devices = tempfile::tempdir().unwrap();
        assert!(testing::symlink("/dev/zero", devices.path().join(".ignore")));
        assert_eq!(unsafe_ignore_file(devices.path()), Some(devices.path().join(".ignore")));
        assert_eq!(unsafe_ignore_file(f.root()), None);
        // On a thread of its own, so a search that does block fails this test
        // instead of hanging it (a runtime waits for its blocking threads).
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let outcomes = runtime.block_on(async {
                vec![
                    f.call("grep", json!({"pattern": "x", "path": "src/pipe"})).await,
                    f.call("grep", json!({"pattern": "fn main"})).await,
                    f.call("glob", json!({"pattern": "**/*.rs"})).await,
                    f.call("list_directory", json!({"depth": 2})).await,
                    f.call("grep", json!({"pattern": "fn", "path": "trap"})).await,
                ]
            });
            let _ = sender.send(outcomes);
        });
        let outcomes = receiver.recv_timeout(Duration::from_secs(60)).expect("no search blocks on a special file");
        let [fifo, grep, glob, list, base] = <[ToolOutcome; 5]>::try_from(outcomes).unwrap();
        assert_eq!(fifo.status, OutcomeStatus::Failed);
        assert!(fifo.for_model.contains("src/pipe is a named pipe (FIFO), not a regular file"), "{}", fifo.for_model);
        for (name, outcome) in [("grep", &grep), ("glob", &glob), ("list", &list)] {
            assert_eq!(outcome.status, OutcomeStatus::Completed, "{name}: {}", outcome.for_model);
            assert!(!outcome.for_model.contains("hidden.rs") && !outcome.for_model.contains("z.rs"), "{name}");
            assert!(outcome.for_model.contains("could not be read"), "{name}: {}", outcome.for_model);
        }
        assert!(grep.for_model.contains("src/main.rs:1:fn main() {"), "{}", grep.for_model);
        assert_eq!(base.status, OutcomeStatus::Failed);
        assert!(base.for_model.contains("trap/.gitignore is a named pipe (FIFO)"), "{}", base.for_model);
    }

    /// A file swapped for a link after the walk listed it is not followed.
    #[test]
    fn searched_files_are_opened_without_following_links() {
        let f = fixture();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "fn main").unwrap();
        if !crate::platform::testing::symlink(outside.path().join("secret"), f.root().join("link.rs")) {
            return;
        }
        assert!(open_searchable(&f.root().join("link.rs")).is_err());
        assert!(open_searchable(&f.root().join("src/main.rs")).is_ok());
    }

    #[test]
    fn path_order_is_component_order() {
        let mut paths: Vec<PathBuf> =
            ["a-b", "a/b", "a", "a/b/c", "a.b", "a/b-c", "a/b/c/d", "B", "ab", "a/", "/x/y", "/x-y", "é", "z"]
                .iter()
                .map(PathBuf::from)
                .collect();
        let mut by_components = paths.clone();
        by_components.sort();
        paths.sort_by(|a, b| path_order(a, b));
        assert_eq!(paths, by_components);
    }

    #[test]
    fn output_is_fenced_for_the_editor() {
        let outcome = listing("a ``` b".to_owned(), None, json!({}));
        assert_eq!(outcome.content, vec![DisplayContent::Text("````\na ``` b\n````".to_owned())]);
        assert_eq!(outcome.for_model, "a ``` b");
    }
}
