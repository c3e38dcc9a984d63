//! Line endings are a property of the project's files, not of the system
//! lathe runs on. Models write `\n`; what `write_file` puts on disk follows
//! this rule, on every system alike:
//!
//! - content that has a carriage return anywhere is written as given (the
//!   model chose its endings);
//! - else, replacing an existing text file: that file's endings (CRLF when
//!   most of its line breaks are CRLF, as [`edit_match`](super::edit_match)
//!   matches edits);
//! - else, a new file: the endings most text files in its folder use (the
//!   nearest existing folder on its way when the folder is new): up to
//!   [`MAX_SIBLINGS`] regular files, by name, the first [`SIBLING_PREFIX`]
//!   bytes of each; CRLF only when more of them use CRLF than LF; else LF.
//!
//! So a CRLF project gets CRLF files on Linux too, and an LF project on
//! Windows stays LF. `edit_file` never changes endings: the replacement
//! takes the file's (see `edit_match`). Siblings are read through the path
//! authority: links are skipped, never followed; FIFOs and devices are never
//! opened; binary files have no vote.

use std::borrow::Cow;
use std::path::Path;

use super::edit_match::prefers_crlf;
use crate::platform::authority::{Found, Target};

/// Files of a folder looked at, at most, for a new file's endings.
pub const MAX_SIBLINGS: usize = 16;

/// Bytes read of each of them.
pub const SIBLING_PREFIX: u64 = 8 * 1024;

/// `content` as `write_file` writes it over an existing file whose text is
/// `old`.
pub fn like_file<'a>(content: &'a str, old: &str) -> Cow<'a, str> {
    if content.contains('\r') || !prefers_crlf(old) { Cow::Borrowed(content) } else { Cow::Owned(to_crlf(content)) }
}

/// `content` as `write_file` writes it to a new file at `target` (judged):
/// its folder's endings. Reads the disk (blocking).
pub fn like_siblings<'a>(content: &'a str, target: &Target) -> Cow<'a, str> {
    if content.contains('\r') || !content.contains('\n') {
        return Cow::Borrowed(content);
    }
    let folder = target.real.ancestors().skip(1).find(|dir| dir.is_dir());
    if folder.is_some_and(folder_prefers_crlf) { Cow::Owned(to_crlf(content)) } else { Cow::Borrowed(content) }
}

/// Whether more of the text files in `folder` (the first [`MAX_SIBLINGS`]
/// regular files by name) use CRLF than LF.
fn folder_prefers_crlf(folder: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(folder) else { return false };
    // The entry's own type: a link is never followed to count.
    let mut names: Vec<_> = entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
        .map(|entry| entry.file_name())
        .collect();
    names.sort();
    let (mut crlf, mut lf) = (0_usize, 0_usize);
    for name in names.into_iter().take(MAX_SIBLINGS) {
        let path = folder.join(name);
        let sibling = Target::of(&path);
        if !matches!(sibling.found, Found::File { .. }) || sibling.real != path {
            continue;
        }
        let Ok((bytes, _)) = sibling.read_prefix(SIBLING_PREFIX) else { continue };
        if bytes.contains(&0) {
            continue;
        }
        match ending_of(&bytes) {
            Some(true) => crlf += 1,
            Some(false) => lf += 1,
            None => {}
        }
    }
    crlf > lf
}

/// Whether `bytes` mostly break lines with CRLF; `None` without a line break.
fn ending_of(bytes: &[u8]) -> Option<bool> {
    let breaks = bytes.iter().filter(|&&byte| byte == b'\n').count();
    if breaks == 0 {
        return None;
    }
    let crlf = bytes.windows(2).filter(|pair| pair == b"\r\n").count();
    Some(crlf * 2 >= breaks)
}

fn to_crlf(text: &str) -> String {
    text.replace('\n', "\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(files: &[(&str, &[u8])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, content) in files {
            std::fs::write(dir.path().join(name), content).unwrap();
        }
        dir
    }

    fn new_file(dir: &Path, name: &str) -> Target {
        Target::of(&std::fs::canonicalize(dir).unwrap().join(name))
    }

    #[test]
    fn a_replaced_file_keeps_its_endings() {
        assert_eq!(like_file("a\nb\n", "x\r\ny\r\n"), "a\r\nb\r\n");
        assert_eq!(like_file("a\nb\n", "x\ny\n"), "a\nb\n");
        assert_eq!(like_file("a\r\nb\n", "x\ny\n"), "a\r\nb\n", "the model's own CR is kept");
        assert_eq!(like_file("a\nb", "x\r\ny\nz\r\n"), "a\r\nb", "most breaks CRLF");
        assert_eq!(like_file("a\nb", "one line"), "a\nb");
    }

    #[test]
    fn a_new_file_takes_its_folders_endings() {
        let crlf = folder(&[("a.txt", b"1\r\n2\r\n"), ("b.rs", b"x\r\n"), ("c.md", b"y\n")]);
        assert_eq!(like_siblings("p\nq\n", &new_file(crlf.path(), "new.txt")), "p\r\nq\r\n");
        assert_eq!(
            like_siblings("p\nq\n", &new_file(crlf.path(), "deeper/still/new.txt")),
            "p\r\nq\r\n",
            "a new folder: the nearest existing one"
        );
        let lf = folder(&[("a.txt", b"1\n2\n"), ("b.txt", b"1\r\n2\r\n")]);
        assert_eq!(like_siblings("p\nq\n", &new_file(lf.path(), "new.txt")), "p\nq\n", "a tie is LF");
        let empty = folder(&[]);
        assert_eq!(like_siblings("p\nq\n", &new_file(empty.path(), "new.txt")), "p\nq\n");
        let binary = folder(&[("a.bin", b"\0\r\n\r\n"), ("b.txt", b"1\n")]);
        assert_eq!(like_siblings("p\n", &new_file(binary.path(), "new.txt")), "p\n", "binary files have no vote");
        assert_eq!(like_siblings("p\r\nq\n", &new_file(lf.path(), "n")), "p\r\nq\n", "given endings stay");
    }

    #[test]
    fn linked_siblings_are_not_followed() {
        let outside = folder(&[("a.txt", b"1\r\n2\r\n"), ("b.txt", b"1\r\n")]);
        let inside = folder(&[("c.txt", b"1\n")]);
        for name in ["a.txt", "b.txt"] {
            if !crate::platform::testing::symlink(outside.path().join(name), inside.path().join(name)) {
                return;
            }
        }
        assert_eq!(like_siblings("p\n", &new_file(inside.path(), "new.txt")), "p\n");
    }

    #[test]
    fn only_the_first_siblings_by_name_vote() {
        let mut files: Vec<(String, &[u8])> =
            (0..MAX_SIBLINGS).map(|i| (format!("a{i:02}.txt"), &b"1\n"[..])).collect();
        files.extend((0..MAX_SIBLINGS + 1).map(|i| (format!("b{i:02}.txt"), &b"1\r\n"[..])));
        let named: Vec<(&str, &[u8])> = files.iter().map(|(name, bytes)| (name.as_str(), *bytes)).collect();
        let dir = folder(&named);
        assert_eq!(like_siblings("p\n", &new_file(dir.path(), "new.txt")), "p\n");
    }
}
