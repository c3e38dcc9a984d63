//! The file tools `read_file`, `write_file` and `edit_file`: their arguments
//! and schemas, how a call is described before it runs (title, locations and,
//! for changes, the diff the permission prompt shows), and running it:
//! line-numbered reading within the output limits, whole-file writes (with
//! the line endings of the file or folder, see [`endings`](super::endings)),
//! and string edits applied all or nothing, each located by
//! [`edit_match`](super::edit_match) (exact text first, then the slips a
//! model makes that have one reading).
//!
//! Every path is judged by [`crate::platform::authority`] when the call is described
//! (where it really leads: links followed, dangling ones too), and the call
//! then works on that judged [`Target`], never on the name again. Titles name
//! the real target when links lead elsewhere (`Write notes.md →
//! /elsewhere/x`). Reads and writes go through [`Host`](super::Host), so this
//! module does not know whether the disk or the editor's buffers answer; it
//! knows nothing of ACP or the model API. The `describe_*` functions read a
//! small bounded preview through the path authority before permission is
//! asked, and what the judged target is (directory, FIFO, socket, device)
//! is checked first, so those are refused whoever serves reads (asking an
//! editor to read `/dev/zero` would hang it). A path with a NUL character is
//! refused before anything touches it.
//!
//! # Changes behind the model's back
//!
//! [`FileVersions`](super::versions::FileVersions) remembers the version of
//! each file the model last saw (read, wrote or edited). Before `edit_file` or
//! `write_file` changes an existing file, its current text is compared with
//! that version; if the user, the editor or a command changed it meanwhile,
//! nothing is written and the model gets the current text instead, so it
//! redoes its change rather than undoing theirs. That text now counts as seen,
//! so the retry goes through. For files the model never saw:
//!
//! - `edit_file` applies: its `old_string` must match the current text
//!   exactly, which shows the model knows that part, and the edit leaves the
//!   rest of the file as it is now. (Models often know a file from the prompt,
//!   a grep or a shell command rather than from `read_file`.)
//! - `write_file` over a non-empty file does not: replacing a whole file
//!   unseen could drop content nobody meant to lose. The model gets the
//!   current text and may call again.
//!
//! A file whose current text cannot be read (binary, too large) cannot be
//! compared and is written as before. The check and the write are separate
//! steps, so a change landing between them (milliseconds) is not caught.
//!
//! # Cancellation
//!
//! A cancel before the write leaves the file alone and the call cancelled. A
//! local write that has started runs to its end (it is milliseconds of disk
//! work and cannot be withdrawn), so the call waits for it and reports what
//! happened, recording the new version as seen: the model is never told
//! "cancelled" about a file that changed.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

use super::edit_match;
use super::endings;
use super::lenient;
use super::local::{BINARY_SNIFF_BYTES, MAX_FILE_BYTES, read_text_blocking, size_text};
use super::versions::Freshness;
use super::{
    Access, Description, DisplayContent, HostError, Location, OutcomeStatus, Refusal, ToolContext, ToolLimits,
    ToolOutcome, refused,
};
use crate::cancel::{Cancelled, OrCancel as _};
use crate::platform::authority::{Found, Target};

/// Largest file `describe_*` reads to preview a change; bigger files get no preview.
const PREVIEW_MAX_BYTES: u64 = 256 * 1024;

/// Largest text shown as a diff after a write or an edit; editors choke on
/// more, and the model does not need it.
const DIFF_MAX_BYTES: usize = 1024 * 1024;

/// Arguments of `read_file`.
#[derive(Debug, Clone, Deserialize)]
pub struct ReadFileArgs {
    /// Absolute or cwd-relative path.
    #[serde(alias = "file_path", alias = "filePath")]
    pub path: String,
    /// 1-based first line to show.
    #[serde(default, deserialize_with = "lenient::count")]
    pub offset: Option<usize>,
    /// Number of lines to show.
    #[serde(default, deserialize_with = "lenient::count")]
    pub limit: Option<usize>,
}

/// Arguments of `write_file`.
#[derive(Debug, Clone, Deserialize)]
pub struct WriteFileArgs {
    /// Absolute or cwd-relative path.
    #[serde(alias = "file_path", alias = "filePath")]
    pub path: String,
    /// The whole new content.
    #[serde(alias = "contents", alias = "text")]
    pub content: String,
}

/// Arguments of `edit_file`: one replacement (`old_string`, `new_string`,
/// `replace_all`), or several in `edits`.
#[derive(Debug, Clone, Deserialize)]
pub struct EditFileArgs {
    /// Absolute or cwd-relative path.
    #[serde(alias = "file_path", alias = "filePath")]
    pub path: String,
    /// Exact text to replace.
    #[serde(default, alias = "old_str", alias = "oldString")]
    pub old_string: Option<String>,
    /// Text to put in its place.
    #[serde(default, alias = "new_str", alias = "newString")]
    pub new_string: Option<String>,
    /// Replace every occurrence of `old_string` rather than exactly one.
    #[serde(default, alias = "replaceAll", deserialize_with = "lenient::optional_flag")]
    pub replace_all: Option<bool>,
    /// Several replacements, applied in order.
    #[serde(default, deserialize_with = "lenient_edits")]
    pub edits: Option<Vec<Edit>>,
}

/// One exact-string replacement.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Edit {
    /// Exact text to replace.
    #[serde(alias = "old_str", alias = "oldString")]
    pub old_string: String,
    /// Text to put in its place.
    #[serde(alias = "new_str", alias = "newString")]
    pub new_string: String,
    /// Replace every occurrence rather than exactly one.
    #[serde(default, alias = "replaceAll", deserialize_with = "lenient::flag")]
    pub replace_all: bool,
}

/// JSON schema of `read_file`.
pub fn read_file_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "The file to read: absolute, or relative to the project root."
            },
            "offset": {
                "type": "integer",
                "minimum": 1,
                "description": "1-based line number to start reading at. Omit to start at the first line."
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": "How many lines to read. Omit to read as many as the output limit allows."
            }
        },
        "required": ["path"]
    })
}

/// JSON schema of `write_file`.
pub fn write_file_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "The file to create or overwrite: absolute, or relative to the project root."
            },
            "content": {
                "type": "string",
                "description": "The complete new content of the file."
            }
        },
        "required": ["path", "content"]
    })
}

/// JSON schema of `edit_file`.
pub fn edit_file_schema() -> Value {
    let old_string = "The exact text to replace, including whitespace and indentation. It must occur exactly once \
                      unless replace_all is true.";
    let new_string = "The text to put in its place (empty to delete old_string).";
    let replace_all = "Replace every occurrence of old_string instead of exactly one. Default false.";
    json!({
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "The file to edit: absolute, or relative to the project root."
            },
            "old_string": { "type": "string", "description": old_string },
            "new_string": { "type": "string", "description": new_string },
            "replace_all": { "type": "boolean", "description": replace_all },
            "edits": {
                "type": "array",
                "description": "Several replacements in one file, applied in order, all or nothing. Use instead of \
                                old_string and new_string.",
                "items": {
                    "type": "object",
                    "properties": {
                        "old_string": { "type": "string", "description": old_string },
                        "new_string": { "type": "string", "description": new_string },
                        "replace_all": { "type": "boolean", "description": replace_all }
                    },
                    "required": ["old_string", "new_string"]
                }
            }
        },
        "required": ["path"]
    })
}

/// Describes a `read_file` call: "Read src/main.rs (lines 10-40)".
pub fn describe_read_file(args: &ReadFileArgs, cwd: &Path) -> Description {
    let target = Target::resolve(cwd, &args.path);
    let shown = target.shown(cwd);
    let first = args.offset.unwrap_or(1).max(1);
    let title = match (args.offset, args.limit.filter(|&limit| limit > 0)) {
        (_, Some(limit)) => format!("Read {shown} (lines {first}-{})", first.saturating_add(limit - 1)),
        (Some(offset), None) if offset > 1 => format!("Read {shown} (from line {offset})"),
        _ => format!("Read {shown}"),
    };
    Description {
        title,
        locations: vec![Location { path: target.real.clone(), line: args.offset.map(|_| line_number(first)) }],
        access: Access::Read(vec![target]),
        preview: Vec::new(),
    }
}

/// Describes a `write_file` call: "Create src/new.rs" or "Write src/main.rs",
/// with the diff against the current content as the preview when the file is
/// small enough to read cheaply. `in_place`: the host changes the file in
/// place (see [`Host::writes_in_place`](super::Host::writes_in_place)).
pub fn describe_write_file(args: &WriteFileArgs, cwd: &Path, in_place: bool) -> Description {
    let target = Target::resolve(cwd, &args.path).written_in_place(in_place);
    let shown = shown_for_write(&target, cwd, in_place);
    let path = target.real.clone();
    let (title, preview) = match &target.found {
        Found::Missing | Found::Unresolvable(_) => (
            format!("Create {shown}"),
            vec![DisplayContent::Diff {
                path: path.clone(),
                old_text: None,
                new_text: endings::like_siblings(&args.content, &target).into_owned(),
            }],
        ),
        Found::File { .. } | Found::Directory | Found::Special(_) => {
            // Unreadable, binary or large: no preview rather than a misleading new-file diff.
            let preview = read_text_blocking(&target, PREVIEW_MAX_BYTES)
                .ok()
                .map(|old| DisplayContent::Diff {
                    path: path.clone(),
                    new_text: endings::like_file(&args.content, &old).into_owned(),
                    old_text: Some(old),
                })
                .into_iter()
                .collect();
            (format!("Write {shown}"), preview)
        }
    };
    Description { title, locations: vec![Location { path, line: None }], access: Access::Write(vec![target]), preview }
}

/// The target of a change as the title shows it: where links lead, and
/// whether an in-place write also changes the file's other hard links.
fn shown_for_write(target: &Target, cwd: &Path, in_place: bool) -> String {
    let shown = target.shown(cwd);
    match target.found {
        Found::File { links, .. } if in_place && links > 1 => {
            format!("{shown} (one of {links} hard links to the same file: all of them change)")
        }
        _ => shown,
    }
}

/// Describes an `edit_file` call: "Edit src/lib.rs", with the resulting diff
/// as the preview when the file is small and the edits apply.
pub fn describe_edit_file(args: &EditFileArgs, cwd: &Path, in_place: bool) -> Description {
    let target = Target::resolve(cwd, &args.path).written_in_place(in_place);
    let shown = shown_for_write(&target, cwd, in_place);
    let path = target.real.clone();
    let preview = planned_edits(args)
        .ok()
        .and_then(|edits| {
            let old = read_text_blocking(&target, PREVIEW_MAX_BYTES).ok()?;
            let applied = apply_edits(&old, &edits, &shown).ok()?;
            Some(DisplayContent::Diff { path: path.clone(), old_text: Some(old), new_text: applied.text })
        })
        .into_iter()
        .collect();
    Description {
        title: format!("Edit {shown}"),
        locations: vec![Location { path, line: None }],
        access: Access::Write(vec![target]),
        preview,
    }
}

/// The refusals of a `read_file` call that do not depend on the user's
/// answer (see [`super::precheck`]): a NUL in the path, a target that is no
/// regular file or cannot be reached, a file over the local size cap.
pub(super) fn check_read(args: &ReadFileArgs, target: &Target, ctx: &ToolContext<'_>) -> Result<(), Refusal> {
    if let Some(refusal) = refuse_nul(&args.path, "read_file") {
        return Err(Box::new(refusal));
    }
    let shown = target.shown(ctx.cwd);
    match &target.found {
        Found::Directory => {
            Err(refused(format!("{shown} is a directory, not a file. Use list_directory to see what it contains.")))
        }
        Found::Special(kind) => {
            Err(refused(format!("{shown} is {kind}, not a regular file; only regular files can be read.")))
        }
        Found::Unresolvable(why) => Err(refused(format!("Cannot read {shown}: {why}."))),
        Found::File { size, .. } if *size > MAX_FILE_BYTES && !ctx.host.reads_via_client() => Err(refused(format!(
            "{shown} is too large to read ({}); the limit is {}.",
            size_text(*size),
            size_text(MAX_FILE_BYTES)
        ))),
        Found::File { .. } | Found::Missing => Ok(()),
    }
}

/// Runs `read_file`: the requested lines, numbered like `cat -n`, within the
/// output limits, with a note saying how to read on when cut short.
pub async fn read_file(args: ReadFileArgs, target: &Target, ctx: &ToolContext<'_>) -> ToolOutcome {
    if let Err(refusal) = check_read(&args, target, ctx) {
        return *refusal;
    }
    let path = target.real.clone();
    let shown = target.shown(ctx.cwd);
    let text = match ctx.host.read_text_file(target).or_cancel(ctx.cancel).await {
        Err(Cancelled) => return ToolOutcome::cancelled(),
        Ok(Ok(text)) => text,
        Ok(Err(err)) => return ToolOutcome::failed(read_error(&err, &args.path, target, "")),
    };
    if looks_binary(&text) {
        return ToolOutcome::failed(format!(
            "{shown} is a binary file ({}); only text files can be read.",
            size_text(text.len() as u64)
        ));
    }
    if text.is_empty() {
        ctx.seen.record(&path, &text);
        return ToolOutcome::completed(format!("{shown} is empty."));
    }
    let page = match Page::of(&text, args.offset, args.limit, ctx.limits) {
        Ok(page) => page,
        Err(total) => {
            return ToolOutcome::failed(format!(
                "offset={} is past the end of {shown}, which has {}. Call read_file with a smaller offset.",
                args.offset.unwrap_or(1),
                plural(total, "line")
            ));
        }
    };
    // Any part counts: an edit needs only the part it changes.
    ctx.seen.record(&path, &text);
    let more = page.more();
    let summary = if page.first == 1 && !more {
        format!("Read {}.", plural(page.total, "line"))
    } else {
        format!("Read lines {}-{} of {}.", page.first, page.last, page.total)
    };
    let raw_output = json!({
        "path": path,
        "firstLine": page.first,
        "lastLine": page.last,
        "totalLines": page.total,
        "truncated": more,
    });
    ToolOutcome {
        status: OutcomeStatus::Completed,
        for_model: page.with_note(ctx.limits),
        content: vec![DisplayContent::Text(summary)],
        locations: None,
        raw_output: Some(raw_output),
    }
}

/// What a `write_file` call found before writing.
pub(super) struct WriteCheck {
    /// The file exists.
    exists: bool,
    /// Its current text, when it could be read as text.
    old: Option<String>,
}

/// The refusals of a `write_file` call that do not depend on the user's
/// answer (see [`super::precheck`]), and what the write needs: a NUL in the
/// path, a target that is no regular file, and an existing file the model
/// has not seen as it is now (see the module docs).
pub(super) async fn check_write(
    args: &WriteFileArgs,
    target: &Target,
    ctx: &ToolContext<'_>,
) -> Result<WriteCheck, Refusal> {
    if let Some(refusal) = refuse_nul(&args.path, "write_file") {
        return Err(Box::new(refusal));
    }
    let shown = target.shown(ctx.cwd);
    let exists = match &target.found {
        Found::Directory => {
            return Err(refused(format!("{shown} is a directory; write_file needs the path of a file.")));
        }
        Found::Special(kind) => {
            return Err(refused(format!("{shown} is {kind}, not a regular file; refusing to replace it.")));
        }
        Found::Unresolvable(why) => return Err(refused(format!("Cannot write {shown}: {why}."))),
        Found::File { .. } => true,
        Found::Missing => false,
    };
    let old = if exists {
        match ctx.host.read_text_file(target).or_cancel(ctx.cancel).await {
            Err(Cancelled) => return Err(Box::new(ToolOutcome::cancelled())),
            // Text that cannot be read (binary, too large) cannot be compared;
            // it only costs the check and the diff, not the write.
            Ok(result) => result.ok().filter(|old| !looks_binary(old)),
        }
    } else {
        None
    };
    if let Some(old) = &old
        && let Some(refusal) = refuse_stale(ctx, &target.real, &shown, old, Change::Write)
    {
        return Err(Box::new(refusal));
    }
    Ok(WriteCheck { exists, old })
}

/// Runs `write_file`: creates or replaces the whole file, unless it exists and
/// the model has not seen its current text (see the module docs).
pub async fn write_file(args: WriteFileArgs, target: &Target, ctx: &ToolContext<'_>) -> ToolOutcome {
    let WriteCheck { exists, old } = match check_write(&args, target, ctx).await {
        Ok(checked) => checked,
        Err(refusal) => return *refusal,
    };
    let path = target.real.clone();
    let shown = target.shown(ctx.cwd);
    let written = match with_endings(args.content, target, exists, old.as_deref()).await {
        Ok(written) => written,
        Err(err) => return ToolOutcome::failed(write_error(&err, &shown)),
    };
    match write(ctx, target, &written).await {
        Err(Cancelled) => return ToolOutcome::cancelled(),
        Ok(Err(err)) => return ToolOutcome::failed(write_error(&err, &shown)),
        Ok(Ok(())) => {}
    }
    ctx.seen.record(&path, &written);
    let lines = plural(written.lines().count(), "line");
    let showable = |text: &str| text.len() <= DIFF_MAX_BYTES;
    let (for_model, content) = match (exists, old) {
        (false, _) if showable(&written) => (
            format!("Created {shown} ({lines})."),
            DisplayContent::Diff { path: path.clone(), old_text: None, new_text: written },
        ),
        (false, _) => {
            (format!("Created {shown} ({lines})."), DisplayContent::Text(format!("Created {shown} ({lines}).")))
        }
        (true, Some(old)) if showable(&old) && showable(&written) => (
            format!("Wrote {lines} to {shown}."),
            DisplayContent::Diff { path: path.clone(), old_text: Some(old), new_text: written },
        ),
        // A new-file diff would mislead, and a huge one helps no one; say what happened instead.
        (true, _) => {
            (format!("Wrote {lines} to {shown}."), DisplayContent::Text(format!("Overwrote {shown} ({lines}).")))
        }
    };
    ToolOutcome {
        status: OutcomeStatus::Completed,
        for_model,
        content: vec![content],
        locations: Some(vec![Location { path, line: None }]),
        raw_output: None,
    }
}

/// `write_file`'s content with the line endings it gets on disk (see
/// [`endings`]): those of the file it replaces (`old`, its text when
/// readable), or of its folder's files for a new one (read off the async
/// threads).
async fn with_endings(content: String, target: &Target, exists: bool, old: Option<&str>) -> Result<String, HostError> {
    match (exists, old) {
        (true, Some(old)) => Ok(endings::like_file(&content, old).into_owned()),
        (true, None) => Ok(content),
        (false, _) => {
            let target = target.clone();
            tokio::task::spawn_blocking(move || endings::like_siblings(&content, &target).into_owned())
                .await
                .map_err(|err| HostError::Other(format!("Looking at the folder's line endings did not finish: {err}")))
        }
    }
}

/// What an `edit_file` call found before writing.
pub(super) struct EditCheck {
    /// The file's current text.
    old: String,
    /// The edits it asked for.
    edits: Vec<PlannedEdit>,
    /// The text with the edits applied.
    applied: Applied,
}

/// The refusals of an `edit_file` call that do not depend on the user's
/// answer (see [`super::precheck`]), and the edited text: bad edits, a NUL
/// in the path, a target that is no regular text file or cannot be read, a
/// file changed since the model saw it, and edits that do not apply.
pub(super) async fn check_edit(
    args: &EditFileArgs,
    target: &Target,
    ctx: &ToolContext<'_>,
) -> Result<EditCheck, Refusal> {
    if let Some(refusal) = refuse_nul(&args.path, "edit_file") {
        return Err(Box::new(refusal));
    }
    let shown = target.shown(ctx.cwd);
    let edits = planned_edits(args).map_err(refused)?;
    match &target.found {
        Found::Directory => {
            return Err(refused(format!("{shown} is a directory; edit_file needs the path of a file.")));
        }
        Found::Special(kind) => {
            return Err(refused(format!("{shown} is {kind}, not a regular file; edit_file only edits files.")));
        }
        Found::Unresolvable(why) => return Err(refused(format!("Cannot edit {shown}: {why}."))),
        Found::File { .. } | Found::Missing => {}
    }
    let old = match ctx.host.read_text_file(target).or_cancel(ctx.cancel).await {
        Err(Cancelled) => return Err(Box::new(ToolOutcome::cancelled())),
        Ok(Ok(text)) => text,
        Ok(Err(err)) => {
            return Err(refused(read_error(&err, &args.path, target, " To create a new file, use write_file.")));
        }
    };
    if looks_binary(&old) {
        return Err(refused(format!("{shown} is a binary file; edit_file only edits text files.")));
    }
    if let Some(refusal) = refuse_stale(ctx, &target.real, &shown, &old, Change::Edit) {
        return Err(Box::new(refusal));
    }
    let applied = apply_edits(&old, &edits, &shown).map_err(refused)?;
    Ok(EditCheck { old, edits, applied })
}

/// Runs `edit_file`: applies every replacement to the current text, then
/// writes the result once; if any replacement fails nothing is written, and
/// neither is anything when the file changed since the model last saw it.
pub async fn edit_file(args: EditFileArgs, target: &Target, ctx: &ToolContext<'_>) -> ToolOutcome {
    let EditCheck { old, edits, applied } = match check_edit(&args, target, ctx).await {
        Ok(checked) => checked,
        Err(refusal) => return *refusal,
    };
    let path = target.real.clone();
    let shown = target.shown(ctx.cwd);
    match write(ctx, target, &applied.text).await {
        Err(Cancelled) => return ToolOutcome::cancelled(),
        Ok(Err(err)) => return ToolOutcome::failed(write_error(&err, &shown)),
        Ok(Ok(())) => {}
    }
    ctx.seen.record(&path, &applied.text);
    let line = first_changed_line(&old, &applied.text);
    let replaced = if applied.replacements > edits.len() {
        format!(" ({} replacements)", applied.replacements)
    } else {
        String::new()
    };
    let mut for_model = format!("Applied {}{replaced} to {shown}.", plural(edits.len(), "edit"));
    if !applied.corrections.is_empty() {
        let _ = write!(
            for_model,
            " {} Check the diff, and copy old_string exactly from the file next time.",
            applied.corrections.join(" ")
        );
    }
    let content = if old.len() <= DIFF_MAX_BYTES && applied.text.len() <= DIFF_MAX_BYTES {
        DisplayContent::Diff { path: path.clone(), old_text: Some(old), new_text: applied.text }
    } else {
        DisplayContent::Text(format!("{for_model} The file is too large to show as a diff."))
    };
    ToolOutcome {
        status: OutcomeStatus::Completed,
        for_model,
        content: vec![content],
        locations: Some(vec![Location { path, line: Some(line_number(line)) }]),
        raw_output: None,
    }
}

/// Writes `content` to the judged target through the host, unless the turn
/// is cancelled first. The token is checked before the write starts; a
/// write that finishes once started (a local one, see
/// [`Host::write_finishes_once_started`](super::Host::write_finishes_once_started))
/// is then waited for, not raced: a cancel arriving meanwhile must not tell
/// the model "cancelled" about a file that changed, nor leave the versions
/// the model has seen behind, so that its next edit would be refused as a
/// change made behind its back. An editor's write is a request, raced
/// against the token (dropping it withdraws the request).
async fn write(ctx: &ToolContext<'_>, target: &Target, content: &str) -> Result<Result<(), HostError>, Cancelled> {
    if ctx.cancel.is_cancelled() {
        return Err(Cancelled);
    }
    let writing = ctx.host.write_text_file(target, content);
    if ctx.host.write_finishes_once_started() { Ok(writing.await) } else { writing.or_cancel(ctx.cancel).await }
}

/// What a call is about to do to an existing file.
#[derive(Clone, Copy)]
enum Change {
    Write,
    Edit,
}

/// The refusal for a change to a file the model has not seen as it is now
/// (see the module docs), with its current text; `None` when it may go on.
fn refuse_stale(ctx: &ToolContext<'_>, path: &Path, shown: &str, current: &str, change: Change) -> Option<ToolOutcome> {
    let freshness = ctx.seen.check(path, current);
    let changed = || format!("{shown} changed since you last read it (the user, the editor or a command modified it)");
    let (why, user) = match (freshness, change) {
        (Freshness::Current, _) | (Freshness::Unseen, Change::Edit) => return None,
        (Freshness::Unseen, Change::Write) if current.is_empty() => return None,
        (Freshness::Unseen, Change::Write) => (
            format!("{shown} already exists and you have not read it yet"),
            format!("Not written: {shown} exists and the model had not read it."),
        ),
        (Freshness::Changed, Change::Write) => {
            (changed(), format!("Not written: {shown} changed since the model last read it."))
        }
        (Freshness::Changed, Change::Edit) => {
            (changed(), format!("Not applied: {shown} changed since the model last read it."))
        }
    };
    let what = match change {
        Change::Write => {
            "so write_file did not overwrite it. Its current content follows. To change part of it, use edit_file; \
             to replace all of it anyway, call write_file again."
        }
        Change::Edit => {
            "so the edit was not applied: it could undo that change. Its current content follows; make your edit \
             against it."
        }
    };
    // The model sees the current text now, so its next attempt goes through.
    ctx.seen.record(path, current);
    let shown_text = match Page::of(current, None, None, ctx.limits) {
        Ok(page) => page.with_note(ctx.limits),
        Err(_) => format!("({shown} is now empty.)"),
    };
    Some(ToolOutcome {
        status: OutcomeStatus::Failed,
        for_model: format!("{why}, {what}\n\n{shown_text}"),
        content: vec![DisplayContent::Text(user)],
        locations: None,
        raw_output: Some(json!({ "path": path, "changedSinceRead": freshness == Freshness::Changed })),
    })
}

/// The refusal for a path with a NUL character: no file can have one, and the
/// operating system would reject it with a less helpful message.
fn refuse_nul(path: &str, tool: &str) -> Option<ToolOutcome> {
    path.contains('\0').then(|| {
        ToolOutcome::failed(format!(
            "The path \"{}\" contains a NUL character (\\0), which no file name can contain. Check the path and \
             call {tool} again.",
            path.escape_debug()
        ))
    })
}

/// A unified diff of `old` and `new` with three lines of context, headed
/// `a/<path_label>` and `b/<path_label>`; empty when they are equal.
pub fn unified_diff(old: &str, new: &str, path_label: &str) -> String {
    if old == new {
        return String::new();
    }
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path_label}"), &format!("b/{path_label}"))
        .to_string()
}

/// Binary content the editor handed over as text (the local host refuses it
/// before decoding).
fn looks_binary(text: &str) -> bool {
    text.as_bytes()[..text.len().min(BINARY_SNIFF_BYTES)].contains(&0)
}

fn read_error(err: &HostError, asked: &str, target: &Target, hint: &str) -> String {
    let path = &target.real;
    match err {
        HostError::NotFound(_) if Path::new(asked) == path => format!("File not found: {}.{hint}", path.display()),
        HostError::NotFound(_) => format!("File not found: {asked} (resolved to {}).{hint}", path.display()),
        HostError::Other(message) => message.clone(),
    }
}

fn write_error(err: &HostError, shown: &str) -> String {
    match err {
        HostError::NotFound(_) => {
            format!("Could not write {shown}: a parent path does not exist or is not a directory.")
        }
        HostError::Other(message) => message.clone(),
    }
}

fn plural(count: usize, noun: &str) -> String {
    if count == 1 { format!("1 {noun}") } else { format!("{count} {noun}s") }
}

fn line_number(line: usize) -> u32 {
    u32::try_from(line).unwrap_or(u32::MAX)
}

/// The numbered lines one `read_file` call returns.
struct Page {
    body: String,
    first: usize,
    last: usize,
    total: usize,
    capped_by_bytes: bool,
}

impl Page {
    /// The page, or the file's line count when `offset` lies past its end.
    fn of(text: &str, offset: Option<usize>, limit: Option<usize>, limits: &ToolLimits) -> Result<Page, usize> {
        let total = text.lines().count();
        let first = offset.unwrap_or(1).max(1);
        if first > total {
            return Err(total);
        }
        let wanted = limit.filter(|&limit| limit > 0).unwrap_or(limits.read_default_lines).max(1);
        let mut body = String::new();
        let mut last = first - 1;
        let mut capped_by_bytes = false;
        for (index, line) in text.lines().enumerate().skip(first - 1).take(wanted) {
            let mut numbered = format!("{:>6}\t", index + 1);
            push_cut(&mut numbered, line, limits.read_max_line_chars);
            numbered.push('\n');
            // Always show at least one line, however long.
            if last >= first && body.len() + numbered.len() > limits.read_max_bytes {
                capped_by_bytes = true;
                break;
            }
            body.push_str(&numbered);
            last = index + 1;
        }
        body.truncate(body.trim_end_matches('\n').len());
        Ok(Page { body, first, last, total, capped_by_bytes })
    }

    /// Whether the file goes on after this page.
    fn more(&self) -> bool {
        self.last < self.total
    }

    /// The numbered lines, followed, when the file goes on, by a note saying
    /// how to read the rest.
    fn with_note(self, limits: &ToolLimits) -> String {
        let mut text = self.body;
        if self.last < self.total {
            let capped = if self.capped_by_bytes {
                format!(" (output is limited to {})", size_text(limits.read_max_bytes as u64))
            } else {
                String::new()
            };
            let _ = write!(
                text,
                "\n\n[Showing lines {}-{} of {}{capped}. Call read_file with offset={} to read more.]",
                self.first,
                self.last,
                self.total,
                self.last + 1
            );
        }
        text
    }
}

/// Appends `line`, cut to `max_chars` characters with a marker saying so.
fn push_cut(out: &mut String, line: &str, max_chars: usize) {
    match line.char_indices().nth(max_chars) {
        None => out.push_str(line),
        Some((cut, _)) => {
            out.push_str(&line[..cut]);
            let _ = write!(out, "… [line cut: {} characters in total]", line.chars().count());
        }
    }
}

/// A replacement to apply, with the name the model gave it (`edits[1]`), if any.
#[derive(Debug, Clone)]
struct PlannedEdit {
    label: Option<String>,
    edit: Edit,
}

/// The replacements a call asks for, checked for obvious mistakes.
fn planned_edits(args: &EditFileArgs) -> Result<Vec<PlannedEdit>, String> {
    let listed = args.edits.as_deref().unwrap_or_default();
    let mut planned = Vec::with_capacity(listed.len() + 1);
    match (&args.old_string, &args.new_string) {
        (Some(old), Some(new)) => planned.push(PlannedEdit {
            label: (!listed.is_empty()).then(|| "old_string".to_owned()),
            edit: Edit {
                old_string: old.clone(),
                new_string: new.clone(),
                replace_all: args.replace_all == Some(true),
            },
        }),
        (Some(_), None) => {
            return Err("new_string is missing: give the replacement text (an empty string deletes old_string).".into());
        }
        (None, Some(_)) => return Err("old_string is missing: give the exact text to replace.".into()),
        (None, None) => {}
    }
    planned.extend(
        listed
            .iter()
            .enumerate()
            .map(|(index, edit)| PlannedEdit { label: Some(format!("edits[{index}]")), edit: edit.clone() }),
    );
    if planned.is_empty() {
        return Err("edit_file needs old_string and new_string, or a non-empty list of edits.".into());
    }
    let count = planned.len();
    for (index, item) in planned.iter().enumerate() {
        let prefix = edit_prefix(item, index, count);
        if item.edit.old_string.is_empty() {
            return Err(format!(
                "{prefix}old_string is empty. Give the exact text to replace; to create a file or replace all of \
                 its content, use write_file."
            ));
        }
        if item.edit.old_string == item.edit.new_string {
            return Err(format!("{prefix}old_string and new_string are identical, so the edit would change nothing."));
        }
    }
    Ok(planned)
}

fn edit_prefix(item: &PlannedEdit, index: usize, count: usize) -> String {
    match &item.label {
        Some(label) => format!("{label} (edit {} of {count}): ", index + 1),
        None => String::new(),
    }
}

struct Applied {
    text: String,
    replacements: usize,
    /// What each edit that did not match exactly needed, to tell the model.
    corrections: Vec<String>,
}

/// Applies the edits in order to `original`, each located by
/// [`edit_match::locate`]; the first one that does not apply fails the whole
/// set with a message the model can act on.
fn apply_edits(original: &str, edits: &[PlannedEdit], shown: &str) -> Result<Applied, String> {
    let mut text = original.to_owned();
    let mut replacements = 0;
    let mut corrections = Vec::new();
    for (index, item) in edits.iter().enumerate() {
        let Edit { old_string, new_string, replace_all } = &item.edit;
        let prefix = edit_prefix(item, index, edits.len());
        let after = if index > 0 { " (after applying the earlier edits)" } else { "" };
        let located = edit_match::locate(&text, old_string, new_string, *replace_all)
            .map_err(|refusal| refusal.message(shown, &prefix, after))?;
        if let Some(correction) = located.correction.describe() {
            let who = match item.label.as_deref() {
                Some(label) if label != "old_string" => format!("{label}'s old_string"),
                _ => "old_string".to_owned(),
            };
            corrections.push(format!("{who} {correction}."));
        }
        replacements += located.splices.len();
        text = located.apply(&text);
    }
    Ok(Applied { text, replacements, corrections })
}

/// 1-based line of the first difference between `old` and `new`.
fn first_changed_line(old: &str, new: &str) -> usize {
    let differs_at = old.bytes().zip(new.bytes()).position(|(a, b)| a != b).unwrap_or_else(|| old.len().min(new.len()));
    old.as_bytes()[..differs_at].iter().filter(|&&byte| byte == b'\n').count() + 1
}

/// A list of edits sent as an array, a single object, or an array encoded as
/// a JSON string (some models double-encode nested arguments).
fn lenient_edits<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Vec<Edit>>, D::Error> {
    use serde::de::Error;
    let value = match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(text)) => serde_json::from_str(&text)
            .map_err(|err| D::Error::custom(format!("edits is a string that is not a JSON array ({err})")))?,
        Some(value) => value,
    };
    let value = if value.is_object() { Value::Array(vec![value]) } else { value };
    serde_json::from_value(value).map(Some).map_err(D::Error::custom)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use futures_util::future::BoxFuture;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::tools::local::LocalHost;
    use crate::tools::versions::FileVersions;
    use crate::tools::{Progress, prepare};

    struct Fixture {
        dir: tempfile::TempDir,
        roots: Vec<PathBuf>,
        cancel: CancellationToken,
        limits: ToolLimits,
        seen: FileVersions,
    }

    fn no_progress(_: Progress) {}

    impl Fixture {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let roots = vec![dir.path().to_path_buf()];
            Self {
                dir,
                roots,
                cancel: CancellationToken::new(),
                limits: ToolLimits::default(),
                seen: FileVersions::default(),
            }
        }

        fn cwd(&self) -> &Path {
            self.dir.path()
        }

        fn file(&self, name: &str, content: &str) -> PathBuf {
            let path = self.cwd().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, content).unwrap();
            path
        }

        fn content(&self, name: &str) -> String {
            std::fs::read_to_string(self.cwd().join(name)).unwrap()
        }

        fn ctx(&self) -> ToolContext<'_> {
            ToolContext {
                cwd: self.cwd(),
                roots: &self.roots,
                host: &LocalHost,
                cancel: &self.cancel,
                limits: &self.limits,
                progress: &no_progress,
                seen: &self.seen,
            }
        }

        async fn read(&self, args: Value) -> ToolOutcome {
            let args: ReadFileArgs = serde_json::from_value(args).unwrap();
            let target = Target::resolve(self.cwd(), &args.path);
            read_file(args, &target, &self.ctx()).await
        }

        async fn write(&self, args: Value) -> ToolOutcome {
            let args: WriteFileArgs = serde_json::from_value(args).unwrap();
            let target = Target::resolve(self.cwd(), &args.path);
            write_file(args, &target, &self.ctx()).await
        }

        async fn edit(&self, args: Value) -> ToolOutcome {
            let args: EditFileArgs = serde_json::from_value(args).unwrap();
            let target = Target::resolve(self.cwd(), &args.path);
            edit_file(args, &target, &self.ctx()).await
        }
    }

    fn numbered(lines: std::ops::RangeInclusive<usize>) -> String {
        lines.map(|n| format!("{n:>6}\tline {n}")).collect::<Vec<_>>().join("\n")
    }

    #[tokio::test]
    async fn read_numbers_lines_and_pages_with_offset_and_limit() {
        let mut fx = Fixture::new();
        let text: String = (1..=5).map(|n| format!("line {n}\n")).collect();
        fx.file("five.txt", &text);

        let whole = fx.read(json!({"path": "five.txt"})).await;
        assert_eq!(whole.status, OutcomeStatus::Completed);
        assert_eq!(whole.for_model, numbered(1..=5));

        let middle = fx.read(json!({"path": "five.txt", "offset": 2, "limit": 2})).await;
        assert_eq!(
            middle.for_model,
            format!("{}\n\n[Showing lines 2-3 of 5. Call read_file with offset=4 to read more.]", numbered(2..=3))
        );

        let tail = fx.read(json!({"path": "five.txt", "offset": 4, "limit": 10})).await;
        assert_eq!(tail.for_model, numbered(4..=5));

        fx.limits.read_default_lines = 3;
        let paged = fx.read(json!({"path": "five.txt"})).await;
        assert!(
            paged.for_model.ends_with("[Showing lines 1-3 of 5. Call read_file with offset=4 to read more.]"),
            "{}",
            paged.for_model
        );
    }

    #[tokio::test]
    async fn read_cuts_long_lines_and_caps_bytes() {
        let mut fx = Fixture::new();
        fx.limits.read_max_line_chars = 10;
        fx.file("long.txt", &format!("{}\nshort\n", "é".repeat(50)));
        let out = fx.read(json!({"path": "long.txt"})).await;
        assert_eq!(
            out.for_model,
            format!("     1\t{}… [line cut: 50 characters in total]\n     2\tshort", "é".repeat(10))
        );

        fx.limits = ToolLimits { read_max_bytes: 40, ..ToolLimits::default() };
        let text: String = (1..=10).map(|n| format!("line {n}\n")).collect();
        fx.file("many.txt", &text);
        let out = fx.read(json!({"path": "many.txt"})).await;
        assert!(out.for_model.starts_with(&numbered(1..=2)), "{}", out.for_model);
        assert!(out.for_model.contains("of 10 (output is limited to 40 bytes). Call read_file with offset=3"));
    }

    #[tokio::test]
    async fn read_explains_missing_empty_past_end_binary_and_directories() {
        let fx = Fixture::new();
        let missing = fx.read(json!({"path": "nope/x.rs"})).await;
        assert_eq!(missing.status, OutcomeStatus::Failed);
        let resolved = fx.cwd().join("nope").join("x.rs");
        assert!(missing.for_model.contains(&resolved.display().to_string()), "{}", missing.for_model);

        fx.file("empty.txt", "");
        assert!(fx.read(json!({"path": "empty.txt"})).await.for_model.contains("is empty"));

        fx.file("two.txt", "a\nb\n");
        let past = fx.read(json!({"path": "two.txt", "offset": 9})).await;
        assert_eq!(past.status, OutcomeStatus::Failed);
        assert!(past.for_model.contains("which has 2 lines"), "{}", past.for_model);

        std::fs::write(fx.cwd().join("blob.bin"), b"\x7fELF\0\0\x01").unwrap();
        let binary = fx.read(json!({"path": "blob.bin"})).await;
        assert_eq!(binary.status, OutcomeStatus::Failed);
        assert!(binary.for_model.contains("binary file (7 bytes)"), "{}", binary.for_model);

        std::fs::create_dir(fx.cwd().join("src")).unwrap();
        let dir = fx.read(json!({"path": "src"})).await;
        assert_eq!(dir.status, OutcomeStatus::Failed);
        assert!(dir.for_model.contains("list_directory"), "{}", dir.for_model);
    }

    #[tokio::test]
    async fn read_refuses_a_fifo_without_hanging() {
        let fx = Fixture::new();
        let fifo = fx.cwd().join("pipe");
        if !crate::platform::testing::fifo(&fifo) {
            return;
        }
        let out = tokio::time::timeout(Duration::from_secs(5), fx.read(json!({"path": "pipe"}))).await.unwrap();
        assert_eq!(out.status, OutcomeStatus::Failed);
        assert!(out.for_model.contains("not a regular file"), "{}", out.for_model);
        // Describing a write to it must not block either.
        let call = prepare("write_file", r#"{"path": "pipe", "content": "x"}"#, fx.cwd()).unwrap();
        assert!(call.description.preview.is_empty());
    }

    #[tokio::test]
    async fn read_arguments_are_lenient_and_described() {
        let fx = Fixture::new();
        fx.file("a.txt", "1\n2\n3\n4\n");
        let out = fx.read(json!({"file_path": "a.txt", "offset": "3", "limit": 1.0, "extra": true})).await;
        assert_eq!(out.for_model, "     3\t3\n\n[Showing lines 3-3 of 4. Call read_file with offset=4 to read more.]");

        let cwd = Path::new("/p");
        let call = prepare("read_file", r#"{"path": "src/main.rs", "offset": 10, "limit": 31}"#, cwd).unwrap();
        assert_eq!(call.description.title, "Read src/main.rs (lines 10-40)");
        assert_eq!(call.description.access, Access::Read(vec![Target::of(Path::new("/p/src/main.rs"))]));
        assert_eq!(call.description.locations[0].line, Some(10));
        let call = prepare("read_file", r#"{"path": "/p/src/main.rs"}"#, cwd).unwrap();
        assert_eq!(call.description.title, "Read src/main.rs");
        assert!(prepare("read_file", r#"{"path": "a", "offset": -1}"#, cwd).is_err());
    }

    #[tokio::test]
    async fn write_creates_parents_and_shows_the_diff() {
        let fx = Fixture::new();
        let call = prepare("write_file", r#"{"path": "a/b/new.rs", "content": "fn main() {}\n"}"#, fx.cwd()).unwrap();
        let path = fx.cwd().join("a/b/new.rs");
        assert_eq!(call.description.title, "Create a/b/new.rs");
        assert_eq!(call.description.access, Access::Write(vec![Target::of(&path)]));
        let created = fx.write(json!({"path": "a/b/new.rs", "content": "fn main() {}\n"})).await;
        assert_eq!(created.status, OutcomeStatus::Completed);
        assert_eq!(created.for_model, "Created a/b/new.rs (1 line).");
        assert_eq!(
            created.content,
            vec![DisplayContent::Diff { path: path.clone(), old_text: None, new_text: "fn main() {}\n".into() }]
        );
        assert_eq!(fx.content("a/b/new.rs"), "fn main() {}\n");

        let call = prepare("write_file", r#"{"path": "a/b/new.rs", "content": "x\ny\n"}"#, fx.cwd()).unwrap();
        assert_eq!(call.description.title, "Write a/b/new.rs");
        assert_eq!(
            call.description.preview,
            vec![DisplayContent::Diff {
                path: path.clone(),
                old_text: Some("fn main() {}\n".into()),
                new_text: "x\ny\n".into()
            }]
        );
        let replaced = fx.write(json!({"path": "a/b/new.rs", "content": "x\ny\n"})).await;
        assert_eq!(replaced.for_model, "Wrote 2 lines to a/b/new.rs.");
        assert!(
            matches!(&replaced.content[0], DisplayContent::Diff { old_text: Some(old), .. } if old == "fn main() {}\n")
        );

        std::fs::create_dir(fx.cwd().join("dir")).unwrap();
        let dir = fx.write(json!({"path": "dir", "content": "x"})).await;
        assert_eq!(dir.status, OutcomeStatus::Failed);
        assert!(dir.for_model.contains("is a directory"), "{}", dir.for_model);
    }

    #[tokio::test]
    async fn write_keeps_permissions_and_leaves_no_temporary_files() {
        use crate::platform::testing;
        let fx = Fixture::new();
        let path = fx.file("conf/secret.toml", "a = 1\n");
        if !testing::set_mode(&path, 0o640) {
            return;
        }
        fx.read(json!({"path": "conf/secret.toml"})).await;
        let out = fx.write(json!({"path": "conf/secret.toml", "content": "a = 2\n"})).await;
        assert_eq!(out.status, OutcomeStatus::Completed, "{}", out.for_model);
        assert_eq!(fx.content("conf/secret.toml"), "a = 2\n");
        assert_eq!(testing::mode(&path), Some(0o640));
        let out = fx.edit(json!({"path": "conf/secret.toml", "old_string": "2", "new_string": "3"})).await;
        assert_eq!(out.status, OutcomeStatus::Completed, "{}", out.for_model);
        assert_eq!(testing::mode(&path), Some(0o640), "edits keep it too");
        let names: Vec<_> = std::fs::read_dir(fx.cwd().join("conf")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("secret.toml")]);
    }

    #[tokio::test]
    async fn cancelled_calls_write_nothing() {
        let fx = Fixture::new();
        fx.file("keep.txt", "original\n");
        fx.cancel.cancel();
        let write = fx.write(json!({"path": "keep.txt", "content": "changed\n"})).await;
        assert_eq!(write.status, OutcomeStatus::Cancelled);
        let edit = fx.edit(json!({"path": "keep.txt", "old_string": "original", "new_string": "changed"})).await;
        assert_eq!(edit.status, OutcomeStatus::Cancelled);
        let created = fx.write(json!({"path": "fresh.txt", "content": "x"})).await;
        assert_eq!(created.status, OutcomeStatus::Cancelled);
        assert_eq!(fx.content("keep.txt"), "original\n");
        assert!(!fx.cwd().join("fresh.txt").exists());
    }

    /// The local disk, with the user's cancel landing while a write is under
    /// way: the write completes, then the token is cancelled before the call
    /// hears back.
    struct CancelMidWrite<'a>(&'a CancellationToken);

    impl crate::tools::Host for CancelMidWrite<'_> {
        fn read_text_file<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, Result<String, HostError>> {
            LocalHost.read_text_file(target)
        }
        fn write_text_file<'a>(&'a self, target: &'a Target, content: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
            Box::pin(async move {
                let written = LocalHost.write_text_file(target, content).await;
                self.0.cancel();
                tokio::task::yield_now().await;
                written
            })
        }
        fn reads_via_client(&self) -> bool {
            false
        }
        fn writes_in_place(&self) -> bool {
            false
        }
        fn write_finishes_once_started(&self) -> bool {
            LocalHost.write_finishes_once_started()
        }
        fn terminals(&self) -> Option<&dyn crate::tools::Terminals> {
            None
        }
    }

    /// Issue 12 item 3: a cancel that lands while a local write runs does not
    /// report "cancelled" about a file that changed, and the version the model
    /// has seen follows the file, so its next edit is not refused as a change
    /// made behind its back.
    #[tokio::test]
    async fn a_write_under_way_when_cancelled_reports_what_it_did() {
        let fx = Fixture::new();
        let path = fx.file("notes.md", "one\n");
        assert_eq!(fx.read(json!({"path": "notes.md"})).await.status, OutcomeStatus::Completed);
        let cancel = CancellationToken::new();
        let host = CancelMidWrite(&cancel);
        let ctx = ToolContext { host: &host, cancel: &cancel, ..fx.ctx() };
        let target = Target::resolve(fx.cwd(), "notes.md");
        let args: WriteFileArgs = serde_json::from_value(json!({"path": "notes.md", "content": "two\n"})).unwrap();
        let written = write_file(args, &target, &ctx).await;
        assert!(cancel.is_cancelled());
        assert_eq!(written.status, OutcomeStatus::Completed, "{}", written.for_model);
        assert_eq!(written.for_model, "Wrote 1 line to notes.md.");
        assert_eq!(fx.content("notes.md"), "two\n");
        assert_eq!(fx.seen.check(&path, "two\n"), Freshness::Current);

        let cancel = CancellationToken::new();
        let host = CancelMidWrite(&cancel);
        let ctx = ToolContext { host: &host, cancel: &cancel, ..fx.ctx() };
        let args: EditFileArgs =
            serde_json::from_value(json!({"path": "notes.md", "old_string": "two", "new_string": "three"})).unwrap();
        let edited = edit_file(args, &target, &ctx).await;
        assert_eq!(edited.status, OutcomeStatus::Completed, "{}", edited.for_model);
        assert_eq!(fx.content("notes.md"), "three\n");

        let next = fx.edit(json!({"path": "notes.md", "old_string": "three", "new_string": "four"})).await;
        assert_eq!(next.status, OutcomeStatus::Completed, "the next edit goes through: {}", next.for_model);
        assert_eq!(fx.content("notes.md"), "four\n");
    }

    #[tokio::test]
    async fn edit_replaces_one_or_all_and_reports_the_diff() {
        let fx = Fixture::new();
        let path = fx.file("lib.rs", "fn a() {}\nfn b() {}\nlet x = 1;\nlet x = 1;\n");
        let out = fx.edit(json!({"path": "lib.rs", "old_string": "fn b() {}", "new_string": "fn b() { a() }"})).await;
        assert_eq!(out.status, OutcomeStatus::Completed, "{}", out.for_model);
        assert_eq!(out.for_model, "Applied 1 edit to lib.rs.");
        assert_eq!(out.locations, Some(vec![Location { path: path.clone(), line: Some(2) }]));
        assert_eq!(
            out.content,
            vec![DisplayContent::Diff {
                path: path.clone(),
                old_text: Some("fn a() {}\nfn b() {}\nlet x = 1;\nlet x = 1;\n".into()),
                new_text: "fn a() {}\nfn b() { a() }\nlet x = 1;\nlet x = 1;\n".into(),
            }]
        );

        let all = fx
            .edit(json!({"filePath": "lib.rs", "old_string": "x = 1", "new_string": "y = 2", "replace_all": "true"}))
            .await;
        assert_eq!(all.for_model, "Applied 1 edit (2 replacements) to lib.rs.");
        assert_eq!(fx.content("lib.rs"), "fn a() {}\nfn b() { a() }\nlet y = 2;\nlet y = 2;\n");

        let call = prepare(
            "edit_file",
            r#"{"path": "lib.rs", "old_string": "fn a() {}", "new_string": "fn c() {}"}"#,
            fx.cwd(),
        )
        .unwrap();
        assert_eq!(call.description.title, "Edit lib.rs");
        assert_eq!(call.description.access, Access::Write(vec![Target::of(&path)]));
        assert!(
            matches!(&call.description.preview[..], [DisplayContent::Diff { new_text, .. }] if new_text.starts_with("fn c() {}\n"))
        );
    }

    #[tokio::test]
    async fn multiple_edits_apply_in_order_all_or_nothing() {
        let fx = Fixture::new();
        fx.file("m.rs", "alpha\nbeta\ngamma\n");
        let out = fx
            .edit(json!({"path": "m.rs", "edits": [
                {"old_string": "alpha", "new_string": "ALPHA"},
                {"old_string": "ALPHA\nbeta", "new_string": "AB"},
            ]}))
            .await;
        assert_eq!(out.for_model, "Applied 2 edits to m.rs.");
        assert_eq!(fx.content("m.rs"), "AB\ngamma\n");

        let failed = fx
            .edit(json!({"path": "m.rs", "edits": [
                {"old_string": "gamma", "new_string": "GAMMA"},
                {"old_string": "delta", "new_string": "DELTA"},
            ]}))
            .await;
        assert_eq!(failed.status, OutcomeStatus::Failed);
        assert!(
            failed.for_model.starts_with("edits[1] (edit 2 of 2): old_string was not found"),
            "{}",
            failed.for_model
        );
        assert!(failed.for_model.contains("No changes were made"));
        assert_eq!(fx.content("m.rs"), "AB\ngamma\n", "nothing is written when one edit fails");

        // Edits sent as a JSON string still work.
        let encoded = json!([{"old_string": "gamma", "new_string": "G"}]).to_string();
        let out = fx.edit(json!({"path": "m.rs", "edits": encoded})).await;
        assert_eq!(out.status, OutcomeStatus::Completed, "{}", out.for_model);
        assert_eq!(fx.content("m.rs"), "AB\nG\n");
    }

    #[tokio::test]
    async fn edit_failures_tell_the_model_how_to_retry() {
        let fx = Fixture::new();
        fx.file("s.rs", "fn main() {\n    let total = compute(1, 2);\n    show(total);\n}\nlet a = 0;\nlet a = 0;\n");

        let missing = fx
            .edit(json!({"path": "s.rs", "old_string": "  let total = compute(1,2);", "new_string": "let total = 3;"}))
            .await;
        assert_eq!(missing.status, OutcomeStatus::Failed);
        assert!(missing.for_model.contains("was not found in s.rs"), "{}", missing.for_model);
        assert!(
            missing.for_model.contains("at line 2:\n     2\t    let total = compute(1, 2);"),
            "{}",
            missing.for_model
        );

        // Numbered, but not as read_file numbers them (not consecutive): not removed, but pointed out.
        let numbered = fx
            .edit(json!({"path": "s.rs", "old_string": "     2\t    let total = compute(1, 2);\n     4\t}", "new_string": "x"}))
            .await;
        assert!(numbered.for_model.contains("line numbers"), "{}", numbered.for_model);

        let ambiguous = fx.edit(json!({"path": "s.rs", "old_string": "let a = 0;", "new_string": "let a = 1;"})).await;
        assert_eq!(ambiguous.status, OutcomeStatus::Failed);
        assert!(ambiguous.for_model.contains("matches 2 places in s.rs (lines 5, 6)"), "{}", ambiguous.for_model);
        assert!(ambiguous.for_model.contains("replace_all"));

        let empty = fx.edit(json!({"path": "s.rs", "old_string": "", "new_string": "x"})).await;
        assert!(empty.for_model.contains("write_file"), "{}", empty.for_model);
        let same = fx.edit(json!({"path": "s.rs", "old_string": "main", "new_string": "main"})).await;
        assert!(same.for_model.contains("identical"), "{}", same.for_model);
        let half = fx.edit(json!({"path": "s.rs", "old_string": "main"})).await;
        assert!(half.for_model.contains("new_string is missing"), "{}", half.for_model);
        let nothing = fx.edit(json!({"path": "s.rs"})).await;
        assert_eq!(nothing.status, OutcomeStatus::Failed);
        let absent = fx.edit(json!({"path": "gone.rs", "old_string": "a", "new_string": "b"})).await;
        assert!(absent.for_model.contains("File not found") && absent.for_model.contains("write_file"));

        assert!(fx.content("s.rs").contains("compute(1, 2)"), "the file is untouched");
    }

    /// Issue 31: a recovered edit is shown as the real change to the real
    /// file (in the permission prompt's preview and the result), and the
    /// model is told which correction was applied, edit by edit.
    #[tokio::test]
    async fn recovered_edits_show_the_real_diff_and_tell_the_model() {
        let fx = Fixture::new();
        let original = "def f():\n    x = 1   \n    return x\n";
        let path = fx.file("f.py", original);
        let args = json!({"path": "f.py", "old_string": "x = 1\nreturn x", "new_string": "x = 2\nreturn x"});
        let expected = "def f():\n    x = 2\n    return x\n";

        let call = prepare("edit_file", &args.to_string(), fx.cwd()).unwrap();
        assert_eq!(
            call.description.preview,
            vec![DisplayContent::Diff {
                path: path.clone(),
                old_text: Some(original.into()),
                new_text: expected.into()
            }]
        );
        let out = fx.edit(args).await;
        assert_eq!(out.status, OutcomeStatus::Completed, "{}", out.for_model);
        assert_eq!(
            out.for_model,
            "Applied 1 edit to f.py. old_string matched after ignoring trailing whitespace, and re-indenting it: the \
             file has 4 spaces more indentation than old_string on every line, so new_string was re-indented the \
             same way. Check the diff, and copy old_string exactly from the file next time."
        );
        assert_eq!(
            out.content,
            vec![DisplayContent::Diff { path, old_text: Some(original.into()), new_text: expected.into() }]
        );
        assert_eq!(fx.content("f.py"), expected);

        // Every edit of a multi-edit call, each named.
        let out = fx
            .edit(json!({"path": "f.py", "edits": [
                {"old_string": "def f():", "new_string": "def g():"},
                {"old_string": "\tx = 2", "new_string": "\tx = 3"},
                {"old_string": "     3\t    return x", "new_string": "     3\t    return x + 1"},
            ]}))
            .await;
        assert_eq!(out.status, OutcomeStatus::Completed, "{}", out.for_model);
        assert_eq!(fx.content("f.py"), "def g():\n    x = 3\n    return x + 1\n");
        assert!(
            out.for_model.starts_with("Applied 3 edits to f.py. edits[1]'s old_string matched after reading its tabs"),
            "{}",
            out.for_model
        );
        assert!(
            out.for_model.contains(" edits[2]'s old_string matched after removing the line-number prefixes"),
            "{}",
            out.for_model
        );
    }

    /// Issue 31: the refusal table through the real tool: every file stays
    /// byte for byte as it was, and a multi-edit call whose later edit is
    /// refused writes nothing, even when an earlier one was recovered.
    #[tokio::test]
    async fn refused_edits_leave_the_file_byte_identical() {
        let fx = Fixture::new();
        let cases = [
            ("token.py", "x = compute(a, b)\n", json!({"old_string": "x = compute(a; b)", "new_string": "y"})),
            ("ident.rs", "    let total = 0;\n", json!({"old_string": "let totl = 0;", "new_string": "y"})),
            (
                "ambiguous.yaml",
                "a:\n  x: 1\nb:\n    x: 1   \n",
                json!({"old_string": "\tx: 1\n", "new_string": "\tx: 2\n"}),
            ),
            ("comment.ts", "\tf(); // keep\n\tg();\n", json!({"old_string": "f();\ng();", "new_string": "y"})),
            ("case.md", "# Hello World\r\n", json!({"old_string": "# hello world", "new_string": "y"})),
            (
                "multi.py",
                "a = 1   \nb = 2\n",
                json!({"edits": [
                    {"old_string": "a = 1", "new_string": "a = 10"},
                    {"old_string": "c = 3", "new_string": "c = 30"},
                ]}),
            ),
        ];
        for (name, text, edit) in cases {
            fx.file(name, text);
            let mut args = edit.clone();
            args["path"] = json!(name);
            let out = fx.edit(args).await;
            assert_eq!(out.status, OutcomeStatus::Failed, "{name}: {}", out.for_model);
            assert!(out.for_model.contains("No changes were made"), "{name}: {}", out.for_model);
            assert_eq!(std::fs::read(fx.cwd().join(name)).unwrap(), text.as_bytes(), "{name} is untouched");
        }
    }

    #[tokio::test]
    async fn edits_match_crlf_files_and_keep_their_line_endings() {
        let fx = Fixture::new();
        fx.file("win.txt", "one\r\ntwo\r\nthree\r\n");
        let out = fx.edit(json!({"path": "win.txt", "old_string": "one\ntwo", "new_string": "1\n2\n2.5"})).await;
        assert_eq!(out.status, OutcomeStatus::Completed, "{}", out.for_model);
        assert_eq!(fx.content("win.txt"), "1\r\n2\r\n2.5\r\nthree\r\n");

        let single = fx.edit(json!({"path": "win.txt", "old_string": "three", "new_string": "3\n4"})).await;
        assert_eq!(single.status, OutcomeStatus::Completed);
        assert_eq!(fx.content("win.txt"), "1\r\n2\r\n2.5\r\n3\r\n4\r\n");

        fx.file("unix.txt", "a\nb\n");
        let out = fx.edit(json!({"path": "unix.txt", "old_string": "a\r\nb", "new_string": "c\r\nd"})).await;
        assert_eq!(out.status, OutcomeStatus::Completed, "{}", out.for_model);
        assert_eq!(fx.content("unix.txt"), "c\nd\n");
    }

    #[tokio::test]
    async fn writes_keep_a_crlf_file_crlf_and_new_files_follow_their_folder() {
        let fx = Fixture::new();
        fx.file("win.txt", "one\r\ntwo\r\n");
        fx.read(json!({"path": "win.txt"})).await;
        let out = fx.write(json!({"path": "win.txt", "content": "1\n2\n3\n"})).await;
        assert_eq!(out.status, OutcomeStatus::Completed, "{}", out.for_model);
        assert_eq!(std::fs::read(fx.cwd().join("win.txt")).unwrap(), b"1\r\n2\r\n3\r\n");
        // What was written counts as seen: the next write is no change behind the model's back.
        let again = fx.write(json!({"path": "win.txt", "content": "4\n"})).await;
        assert_eq!(again.status, OutcomeStatus::Completed, "{}", again.for_model);
        assert_eq!(std::fs::read(fx.cwd().join("win.txt")).unwrap(), b"4\r\n");

        let created = fx.write(json!({"path": "new.txt", "content": "a\nb\n"})).await;
        assert_eq!(created.status, OutcomeStatus::Completed, "{}", created.for_model);
        assert_eq!(std::fs::read(fx.cwd().join("new.txt")).unwrap(), b"a\r\nb\r\n", "beside a CRLF file");
        let nested = fx.write(json!({"path": "unix/new.txt", "content": "a\n"})).await;
        assert_eq!(nested.status, OutcomeStatus::Completed, "{}", nested.for_model);
        assert_eq!(std::fs::read(fx.cwd().join("unix/new.txt")).unwrap(), b"a\r\n", "a new folder: its parent's");
        fx.file("unix/old.txt", "x\ny\n");
        fx.file("unix/older.txt", "x\n");
        let beside_lf = fx.write(json!({"path": "unix/other.txt", "content": "a\nb\n"})).await;
        assert_eq!(beside_lf.status, OutcomeStatus::Completed, "{}", beside_lf.for_model);
        assert_eq!(std::fs::read(fx.cwd().join("unix/other.txt")).unwrap(), b"a\nb\n", "beside LF files");
        let preview = describe_write_file(
            &serde_json::from_value(json!({"path": "more.txt", "content": "a\n"})).unwrap(),
            fx.cwd(),
            false,
        );
        assert!(
            matches!(&preview.preview[..], [DisplayContent::Diff { new_text, .. }] if new_text == "a\r\n"),
            "the preview shows what is written: {:?}",
            preview.preview
        );
    }

    #[test]
    fn unified_diffs_have_headers_and_hunks() {
        let diff = unified_diff("a\nb\nc\n", "a\nB\nc\n", "src/x.rs");
        assert!(diff.starts_with("--- a/src/x.rs\n+++ b/src/x.rs\n@@ -1,3 +1,3 @@\n"), "{diff}");
        assert!(diff.contains("-b\n+B\n"), "{diff}");
        assert_eq!(unified_diff("same", "same", "x"), "");
    }

    #[tokio::test]
    async fn changes_behind_the_models_back_are_not_overwritten() {
        let fx = Fixture::new();
        fx.file("app.rs", "fn main() {\n    run();\n}\n");
        let read = fx.read(json!({"path": "app.rs", "offset": 2, "limit": 1})).await;
        assert_eq!(read.status, OutcomeStatus::Completed);
        // The user changes the file after the model read (part of) it.
        fx.file("app.rs", "fn main() {\n    setup();\n    run();\n}\n");

        let edit = json!({"path": "app.rs", "old_string": "    run();", "new_string": "    run_fast();"});
        let refused = fx.edit(edit.clone()).await;
        assert_eq!(refused.status, OutcomeStatus::Failed);
        assert!(refused.for_model.starts_with("app.rs changed since you last read it"), "{}", refused.for_model);
        assert!(refused.for_model.contains("the edit was not applied"), "{}", refused.for_model);
        assert!(
            refused.for_model.ends_with("     2\t    setup();\n     3\t    run();\n     4\t}"),
            "{}",
            refused.for_model
        );
        assert_eq!(
            refused.content,
            vec![DisplayContent::Text("Not applied: app.rs changed since the model last read it.".into())]
        );
        assert_eq!(fx.content("app.rs"), "fn main() {\n    setup();\n    run();\n}\n", "the user's change is kept");

        // The model has now seen the current text: the same edit goes through.
        let applied = fx.edit(edit).await;
        assert_eq!(applied.status, OutcomeStatus::Completed, "{}", applied.for_model);
        assert_eq!(fx.content("app.rs"), "fn main() {\n    setup();\n    run_fast();\n}\n");

        // Its own writes count as seen; a change after them is caught again.
        fx.file("app.rs", "// formatted by the user\n");
        let write = fx.write(json!({"path": "app.rs", "content": "fn main() {}\n"})).await;
        assert_eq!(write.status, OutcomeStatus::Failed);
        assert!(
            write.for_model.contains("so write_file did not overwrite it. Its current content follows."),
            "{}",
            write.for_model
        );
        assert!(write.for_model.ends_with("     1\t// formatted by the user"), "{}", write.for_model);
        assert_eq!(fx.content("app.rs"), "// formatted by the user\n");
        let write = fx.write(json!({"path": "app.rs", "content": "fn main() {}\n"})).await;
        assert_eq!(write.status, OutcomeStatus::Completed, "{}", write.for_model);

        // Emptied behind its back: said plainly.
        fx.file("app.rs", "");
        let emptied = fx.edit(json!({"path": "app.rs", "old_string": "main", "new_string": "start"})).await;
        assert!(emptied.for_model.ends_with("(app.rs is now empty.)"), "{}", emptied.for_model);
    }

    #[tokio::test]
    async fn unread_files_may_be_edited_but_not_overwritten_unseen() {
        let fx = Fixture::new();
        fx.file("notes.md", "# Notes\nkeep me\n");
        // An exact old_string shows the model knows the part it changes.
        let edit = fx.edit(json!({"path": "notes.md", "old_string": "# Notes", "new_string": "# My notes"})).await;
        assert_eq!(edit.status, OutcomeStatus::Completed, "{}", edit.for_model);

        fx.file("todo.md", "- call mum\n");
        let write = fx.write(json!({"path": "todo.md", "content": "- nothing\n"})).await;
        assert_eq!(write.status, OutcomeStatus::Failed);
        assert!(
            write.for_model.starts_with(
                "todo.md already exists and you have not read it yet, so write_file did not overwrite it."
            ),
            "{}",
            write.for_model
        );
        assert!(write.for_model.ends_with("     1\t- call mum"), "{}", write.for_model);
        assert_eq!(write.raw_output, Some(json!({"path": fx.cwd().join("todo.md"), "changedSinceRead": false})));
        assert_eq!(fx.content("todo.md"), "- call mum\n");
        let again = fx.write(json!({"path": "todo.md", "content": "- nothing\n"})).await;
        assert_eq!(again.status, OutcomeStatus::Completed, "having seen it, the model may replace it");
        assert_eq!(fx.content("todo.md"), "- nothing\n");

        // Nothing to lose in an empty file.
        fx.file("empty.txt", "");
        let out = fx.write(json!({"path": "empty.txt", "content": "x"})).await;
        assert_eq!(out.status, OutcomeStatus::Completed, "{}", out.for_model);
    }

    #[tokio::test]
    async fn paths_with_nul_are_refused_clearly() {
        let fx = Fixture::new();
        for out in [
            fx.read(json!({"path": "src/a\0.rs"})).await,
            fx.write(json!({"path": "a\0b", "content": "x"})).await,
            fx.edit(json!({"path": "a\0b", "old_string": "x", "new_string": "y"})).await,
        ] {
            assert_eq!(out.status, OutcomeStatus::Failed);
            assert!(
                out.for_model.contains("\\0") && out.for_model.contains("\" contains a NUL character"),
                "{}",
                out.for_model
            );
            assert!(!out.for_model.contains('\0'), "the message itself has no NUL: {:?}", out.for_model);
        }
        let call = prepare("write_file", r#"{"path": "a\u0000b", "content": "x"}"#, fx.cwd()).unwrap();
        assert!(call.description.title.starts_with("Create "), "describing it does not fail either");
        assert_eq!(std::fs::read_dir(fx.cwd()).unwrap().count(), 0, "nothing was created");
    }

    /// A host whose reads never finish, like an editor asked to read `/dev/zero`.
    struct HangingHost;

    impl crate::tools::Host for HangingHost {
        fn read_text_file<'a>(
            &'a self,
            _: &'a Target,
        ) -> futures_util::future::BoxFuture<'a, Result<String, HostError>> {
            Box::pin(std::future::pending())
        }
        fn write_text_file<'a>(
            &'a self,
            _: &'a Target,
            _: &'a str,
        ) -> futures_util::future::BoxFuture<'a, Result<(), HostError>> {
            Box::pin(std::future::pending())
        }
        fn reads_via_client(&self) -> bool {
            true
        }
        fn writes_in_place(&self) -> bool {
            true
        }
        fn terminals(&self) -> Option<&dyn crate::tools::Terminals> {
            None
        }
    }

    #[tokio::test]
    async fn devices_are_refused_whoever_serves_reads() {
        let fx = Fixture::new();
        if !(crate::platform::testing::devices()
            && crate::platform::testing::symlink("/dev/zero", fx.cwd().join("zeros")))
        {
            return;
        }
        let ctx = ToolContext { host: &HangingHost, ..fx.ctx() };
        fn args<T: serde::de::DeserializeOwned>(value: Value) -> T {
            serde_json::from_value(value).unwrap()
        }
        let at = |path: &str| Target::resolve(fx.cwd(), path);
        let outcomes = tokio::time::timeout(Duration::from_secs(5), async {
            vec![
                read_file(args(json!({"path": "/dev/zero"})), &at("/dev/zero"), &ctx).await,
                read_file(args(json!({"path": "/dev/urandom"})), &at("/dev/urandom"), &ctx).await,
                read_file(args(json!({"path": "zeros"})), &at("zeros"), &ctx).await,
                write_file(args(json!({"path": "/dev/null", "content": "x"})), &at("/dev/null"), &ctx).await,
                edit_file(args(json!({"path": "zeros", "old_string": "a", "new_string": "b"})), &at("zeros"), &ctx)
                    .await,
            ]
        })
        .await
        .expect("no device is ever read");
        for out in outcomes {
            assert_eq!(out.status, OutcomeStatus::Failed);
            assert!(out.for_model.contains("is a device, not a regular file"), "{}", out.for_model);
        }
    }

    #[tokio::test]
    async fn very_long_files_and_lines_are_paged_and_cut() {
        let fx = Fixture::new();
        let text: String = (1..=100_000).map(|n| format!("line {n}\n")).collect();
        fx.file("long.log", &text);
        let out = fx.read(json!({"path": "long.log"})).await;
        assert!(out.for_model.starts_with(&numbered(1..=2000)), "the default page");
        assert!(
            out.for_model.ends_with("[Showing lines 1-2000 of 100000. Call read_file with offset=2001 to read more.]"),
            "{}",
            &out.for_model[out.for_model.len() - 200..]
        );
        let last = fx.read(json!({"path": "long.log", "offset": 99_999})).await;
        assert_eq!(last.for_model, numbered(99_999..=100_000));

        // One 1 MiB line: cut to the line limit, well within the byte limit.
        fx.file("minified.js", &format!("{}\nend\n", "x".repeat(1 << 20)));
        let out = fx.read(json!({"path": "minified.js"})).await;
        let expected = format!("     1\t{}… [line cut: 1048576 characters in total]\n     2\tend", "x".repeat(2000));
        assert_eq!(out.for_model, expected);
        // Wide lines: the byte limit ends the page before the line count does.
        fx.file("wide.csv", &format!("{}\n", "y".repeat(1000)).repeat(1000));
        let out = fx.read(json!({"path": "wide.csv"})).await;
        assert!(
            out.for_model.contains("of 1000 (output is limited to 256.0 KiB)"),
            "{}",
            &out.for_model[out.for_model.len() - 200..]
        );

        // Edits in such a file work, and the editor is not sent megabytes of diff.
        let missing =
            fx.edit(json!({"path": "minified.js", "old_string": "let answer = 42;", "new_string": "x"})).await;
        assert_eq!(missing.status, OutcomeStatus::Failed);
        assert!(missing.for_model.ends_with("retry with text copied exactly."), "{}", missing.for_model);
        let edit = fx.edit(json!({"path": "minified.js", "old_string": "end", "new_string": "fin"})).await;
        assert_eq!(edit.status, OutcomeStatus::Completed, "{}", edit.for_model);
        assert_eq!(
            edit.content,
            vec![DisplayContent::Text(
                "Applied 1 edit to minified.js. The file is too large to show as a diff.".into()
            )]
        );
    }

    #[test]
    fn first_changed_lines() {
        assert_eq!(first_changed_line("a\nb\nc", "a\nb\nC"), 3);
        assert_eq!(first_changed_line("a\n", "a\nb\n"), 2);
        assert_eq!(first_changed_line("x", "y"), 1);
    }
}
