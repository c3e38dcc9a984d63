//! What the model last saw of each file, per session, so that a change made
//! behind its back (by the user, the editor, or a command) is noticed before
//! an edit or a whole-file write could undo it.
//!
//! A file's version is a fingerprint (length and a fast non-cryptographic
//! hash) of its whole text as read through the [`Host`](super::Host): the
//! editor's buffer when the editor serves reads, the disk otherwise. It is
//! recorded whenever `read_file` shows any part of the file and whenever
//! `write_file` or `edit_file` writes it, and compared with the current text
//! before `write_file` or `edit_file` changes it. Collisions only matter as a
//! missed warning, never as a security boundary, so `DefaultHasher` is enough.
//!
//! Paths are keyed by their real location (symlinks followed), so a file read
//! through a link and edited by its target name is the same file.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::paths;
use crate::sync::lock;

/// The session's record of the file versions the model has seen.
#[derive(Debug, Default)]
pub struct FileVersions {
    seen: Mutex<HashMap<PathBuf, Fingerprint>>,
}

/// How the current text of a file compares with what the model last saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// The model has not seen this file in this session.
    Unseen,
    /// The file is as the model last saw it.
    Current,
    /// The file changed since the model last saw it.
    Changed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    len: usize,
    hash: u64,
}

impl Fingerprint {
    fn of(text: &str) -> Self {
        let mut hasher = std::hash::DefaultHasher::new();
        text.hash(&mut hasher);
        Self { len: text.len(), hash: hasher.finish() }
    }
}

impl FileVersions {
    /// Remembers `text` as the version of `path` the model has now seen.
    pub fn record(&self, path: &Path, text: &str) {
        let fingerprint = Fingerprint::of(text);
        self.lock().insert(paths::real_location(path), fingerprint);
    }

    /// Compares `current`, the file's text now, with the version last recorded.
    pub fn check(&self, path: &Path, current: &str) -> Freshness {
        let Some(seen) = self.lock().get(&paths::real_location(path)).copied() else {
            return Freshness::Unseen;
        };
        // The length alone settles most changes without hashing the text.
        if seen.len == current.len() && seen == Fingerprint::of(current) {
            Freshness::Current
        } else {
            Freshness::Changed
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Fingerprint>> {
        lock(&self.seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_compared_by_content_and_real_location() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        let versions = FileVersions::default();
        assert_eq!(versions.check(&path, "one"), Freshness::Unseen);
        versions.record(&path, "one");
        assert_eq!(versions.check(&path, "one"), Freshness::Current);
        assert_eq!(versions.check(&path, "two"), Freshness::Changed, "same length, other text");
        assert_eq!(versions.check(&path, "one more"), Freshness::Changed);
        versions.record(&path, "");
        assert_eq!(versions.check(&path, ""), Freshness::Current);
        assert_eq!(versions.check(&dir.path().join("b.txt"), ""), Freshness::Unseen);

        std::fs::write(&path, "x").unwrap();
        let link = dir.path().join("link.txt");
        if crate::platform::testing::symlink(&path, &link) {
            versions.record(&link, "x");
            assert_eq!(versions.check(&path, "x"), Freshness::Current, "a link and its target are one file");
        }
    }
}
