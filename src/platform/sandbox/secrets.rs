//! What sandboxed commands may not read, and the read allow-list that
//! Landlock needs to say so (issue 25).
//!
//! The denied paths are the usual homes of credentials beneath the home
//! directory ([`HOME_SECRETS`]), lathe's own config and data folders (its
//! config holds keys; its data holds other projects' sessions), the config
//! file lathe was started with, and the `[sandbox] deny_read` paths. A denied
//! path inside a session root stays readable: the user opened it. The file
//! tools judge their reads against the same list ([`ReadDenials::covering`]),
//! so what a command may not read, `read_file` does not read unasked either.
//!
//! Landlock read rights are an allow-list: a right granted on a directory
//! covers everything beneath it. So the allow-list is built from the top
//! ([`readable_beneath`]): a directory with no denied path beneath it is
//! granted whole; one with a denied path beneath it is split into its
//! entries, each judged the same way, one level deeper where a denied path
//! is nested (`~/.config` is split so that `~/.config/gh` is left out and
//! `~/.config/nvim` is granted). Symbolic links among the entries are not
//! granted: what they lead to is judged where it really is. Names created
//! later in a split directory are not readable (they were not there to be
//! granted). [`readable_beneath_listed`] also says which directories were
//! read and whether a link was met: what the list kept once per session
//! (`grants`) watches. This module knows paths; nothing of Landlock itself.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// Credentials beneath the home directory, relative to it: unreadable to
/// sandboxed commands and asked about before a file tool reads them.
pub const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".config/gh",
    ".config/hub",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".vault-token",
    ".terraform.d/credentials.tfrc.json",
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".password-store",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".local/share/keyrings",
    // lathe's own config and data folders at their default places (the
    // configured ones are added by the config).
    ".config/lathe",
    ".local/share/lathe",
];

/// Directory entries the allow-list grants at most, across every split
/// directory: a home with more entries than this is granted only its first
/// ones (sorted), so that a command's start cannot be made slow.
pub const MAX_GRANTED: usize = 4096;

/// The paths sandboxed commands may not read, as they really are (links
/// followed), with the session roots that override them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadDenials {
    paths: Vec<PathBuf>,
}

impl ReadDenials {
    /// The standard list beneath `home` (when known) and the `extra` paths
    /// (absolute), each judged where it really leads.
    pub fn new(home: Option<&Path>, extra: &[PathBuf]) -> ReadDenials {
        // Each folder is resolved once (most secrets share `~`, `~/.config`
        // or `~/.local/share`).
        let mut folders: Vec<(PathBuf, PathBuf)> = Vec::new();
        let mut paths: Vec<PathBuf> = Vec::new();
        for path in named(home, extra) {
            let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else { continue };
            let real_parent = match folders.iter().find(|(folder, _)| folder == parent) {
                Some((_, real)) => real.clone(),
                None => {
                    let real = crate::platform::authority::Target::of(parent).real;
                    folders.push((parent.to_path_buf(), real.clone()));
                    real
                }
            };
            let candidate = real_parent.join(name);
            // The name and where it leads: a denied link and its target both.
            let is_link = std::fs::symlink_metadata(&candidate).is_ok_and(|found| found.file_type().is_symlink());
            let real = if is_link { crate::platform::authority::Target::of(&candidate).real } else { candidate };
            paths.push(path);
            paths.push(real);
        }
        paths.retain(|path| path.parent().is_some());
        paths.sort();
        paths.dedup();
        ReadDenials { paths }
    }

    /// The denied paths.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// The denied path that covers `real` (a path as it really is), unless
    /// `real` lies inside one of `roots`: a denied path the user opened as a
    /// session root, or one inside a root, stays readable.
    pub fn covering(&self, real: &Path, roots: &[PathBuf]) -> Option<&Path> {
        if roots.iter().any(|root| real.starts_with(root)) {
            return None;
        }
        self.paths.iter().find(|denied| real.starts_with(denied)).map(PathBuf::as_path)
    }

    /// Whether anything beneath `dir` (not `dir` itself) is denied.
    pub fn any_beneath(&self, dir: &Path) -> bool {
        self.paths.iter().any(|denied| denied != dir && denied.starts_with(dir))
    }
}

/// The denied paths as named (absolute, `.` and `..` removed, no link
/// followed): the credentials beneath `home` (when known) and `extra`.
pub fn named(home: Option<&Path>, extra: &[PathBuf]) -> Vec<PathBuf> {
    home.filter(|home| home.is_absolute() && home.parent().is_some())
        .into_iter()
        .flat_map(|home| HOME_SECRETS.iter().map(move |secret| home.join(secret)))
        .chain(extra.iter().filter(|path| path.is_absolute()).cloned())
        .map(|path| crate::platform::paths::normalize(&path))
        .filter(|path| path.parent().is_some())
        .collect()
}

/// Rounds of following links met on the way to a denied path, at most.
const MAX_LINK_ROUNDS: usize = 8;

/// The paths beneath which reading is allowed, starting from `top` (`/` for
/// a sandbox): everything except the `denied` paths (absolute), split one
/// level deeper wherever a denied path lies below (see the module docs). A
/// denied path is never granted, nor anything above it; symbolic links are
/// never granted. A link met at or above a denied path (`~/.ssh ->
/// /vault/ssh`, `~/.config -> dotfiles/config`) is followed and what the
/// denied path leads to through it is denied too, so the denied paths may
/// be given as named: this runs at every sandboxed command's start, and
/// resolving each one first costs more than the rare link. At most
/// [`MAX_GRANTED`] paths.
pub fn readable_beneath(top: &Path, denied: &[PathBuf]) -> Vec<Granted> {
    readable_beneath_listed(top, denied).granted
}

/// What [`readable_beneath`] found, and what it depends on: a later call
/// gives the same grants as long as the `listed` directories hold the same
/// entries and no link was met (`links`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// The grants.
    pub granted: Vec<Granted>,
    /// The directories whose entries were read (the split ones), in the
    /// order they were read, each once.
    pub listed: Vec<PathBuf>,
    /// Whether a link at or above a denied path was met (and followed):
    /// then the grants depend on where links lead as well.
    pub links: bool,
}

/// [`readable_beneath`], saying what the grants depend on (see [`Listing`]).
pub fn readable_beneath_listed(top: &Path, denied: &[PathBuf]) -> Listing {
    let mut denied: Vec<PathBuf> = denied.to_vec();
    let mut listing = Listing::default();
    for _ in 0..MAX_LINK_ROUNDS {
        let mut links = Vec::new();
        let granted = grant(top, &denied, &mut links, &mut listing.listed);
        listing.links |= !links.is_empty();
        let mut followed = Vec::new();
        for link in links {
            let real = crate::platform::authority::Target::of(&link).real;
            for path in &denied {
                if let Ok(rest) = path.strip_prefix(&link) {
                    followed.push(if rest.as_os_str().is_empty() { real.clone() } else { real.join(rest) });
                }
            }
        }
        followed.retain(|path| !denied.contains(path));
        if followed.is_empty() {
            listing.granted = granted;
            let mut seen = std::collections::HashSet::new();
            listing.listed.retain(|dir| seen.insert(dir.clone()));
            return listing;
        }
        denied.extend(followed);
    }
    // A chain of links longer than this: grant nothing rather than guess.
    Listing { granted: Vec::new(), listed: Vec::new(), links: true }
}

/// One pass of [`readable_beneath`]: the grants, in `links` the links met
/// at or above a denied path, in `listed` the directories read.
fn grant(top: &Path, denied: &[PathBuf], links: &mut Vec<PathBuf>, listed: &mut Vec<PathBuf>) -> Vec<Granted> {
    let mut granted = Vec::new();
    if denied.iter().any(|path| top.starts_with(path)) {
        return granted;
    }
    // Compared as bytes, for every entry of every split directory against
    // every denied path.
    let denied: Vec<&[u8]> = denied.iter().filter(|path| path.starts_with(top)).map(|path| bytes(path)).collect();
    if denied.is_empty() {
        granted.push(Granted { path: top.to_path_buf(), directory: top.is_dir() });
        return granted;
    }
    split(top, &denied, &mut granted, links, listed);
    // In path order, whatever order the split met them in.
    granted.sort_by(|a, b| a.path.cmp(&b.path));
    granted
}

/// A path the allow-list grants reading beneath, and whether it is a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    /// The path, as it really is.
    pub path: PathBuf,
    /// Whether it is a directory (else a file, to which only file rights apply).
    pub directory: bool,
}

fn bytes(path: &Path) -> &[u8] {
    path.as_os_str().as_encoded_bytes()
}

/// Whether `inner` is `outer` or lies beneath it (both absolute, normalized).
fn at_or_below(inner: &[u8], outer: &[u8]) -> bool {
    inner.starts_with(outer) && (inner.len() == outer.len() || outer == b"/" || inner[outer.len()] == b'/')
}

/// Grants the entries of `top`, which has the `denied` paths beneath it,
/// splitting again each entry with a denied path below; notes in `links`
/// the links at or above one. At most [`MAX_GRANTED`] in all: when the split
/// folders hold more, the budget is shared out so that each folder keeps all
/// its entries or an equal share with the other crowded ones (the largest
/// lose entries first, the last in name order). A crowded `/tmp` holding the
/// home folder then loses some of its own entries, never `/usr` nor the
/// home's (an earlier depth-first cut gave `/tmp` everything and `/usr`
/// nothing: no command could start).
fn split(
    top: &Path,
    denied: &[&[u8]],
    granted: &mut Vec<Granted>,
    links: &mut Vec<PathBuf>,
    listed: &mut Vec<PathBuf>,
) {
    let mut folders: Vec<Vec<Granted>> = Vec::new();
    let mut to_split: VecDeque<(PathBuf, Vec<&[u8]>)> = VecDeque::from([(top.to_path_buf(), denied.to_vec())]);
    while let Some((dir, denied)) = to_split.pop_front() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        listed.push(dir.clone());
        let mut entries: Vec<(PathBuf, Option<std::fs::FileType>)> =
            entries.flatten().map(|entry| (entry.path(), entry.file_type().ok())).collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut own = Vec::new();
        for (path, kind) in entries {
            let Some(kind) = kind else { continue };
            let name = bytes(&path);
            let below: Vec<&[u8]> = denied.iter().copied().filter(|denied| at_or_below(denied, name)).collect();
            if kind.is_symlink() {
                if !below.is_empty() {
                    links.push(path);
                }
                continue;
            }
            if below.contains(&name) {
                continue;
            }
            if below.is_empty() {
                own.push(Granted { path, directory: kind.is_dir() });
            } else if kind.is_dir() {
                to_split.push_back((path, below));
            }
        }
        folders.push(own);
    }
    let shares = shares(&folders.iter().map(Vec::len).collect::<Vec<_>>(), MAX_GRANTED);
    for (mut own, share) in folders.into_iter().zip(shares) {
        own.truncate(share);
        granted.extend(own);
    }
}

/// How many of each folder's `counts` entries fit in `budget`: all of them
/// when they do; else every folder keeps its entries up to a common share,
/// the largest that fits (water-filling), what is left over going to the
/// first of the folders above it.
fn shares(counts: &[usize], budget: usize) -> Vec<usize> {
    if counts.iter().sum::<usize>() <= budget {
        return counts.to_vec();
    }
    let mut order: Vec<usize> = (0..counts.len()).collect();
    order.sort_by_key(|&index| counts[index]);
    let mut shares = vec![0; counts.len()];
    let mut left = budget;
    for (position, &index) in order.iter().enumerate() {
        let share = counts[index].min(left / (order.len() - position));
        shares[index] = share;
        left -= share;
    }
    // The remainder of the division, to the crowded folders in turn.
    for &index in order.iter().rev() {
        let more = (counts[index] - shares[index]).min(left);
        shares[index] += more;
        left -= more;
    }
    shares
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Whether the read allow-list means anything here: it is what Landlock
    /// and Seatbelt are given, paths split on `/`; Windows has no sandbox.
    fn allow_lists() -> bool {
        cfg!(unix)
            || crate::platform::testing::skipped(
                "the read allow-list",
                "it is Landlock's and Seatbelt's (`/`-separated paths); Windows has no sandbox",
            )
    }

    #[test]
    fn the_budget_is_shared_out_largest_first() {
        assert_eq!(shares(&[3, 5, 2], 100), [3, 5, 2]);
        assert_eq!(shares(&[20, 5000, 40], 4096), [20, 4036, 40]);
        assert_eq!(shares(&[3000, 5000, 10], 4096), [2043, 2043, 10]);
        assert_eq!(shares(&[10, 10], 5), [2, 3]);
        assert_eq!(shares(&[], 10), Vec::<usize>::new());
        for counts in [[7usize, 9000, 4100], [4096, 1, 1], [0, 0, 5000]] {
            assert_eq!(shares(&counts, 4096).iter().sum::<usize>(), 4096, "{counts:?}");
        }
    }

    /// A split folder with more entries than [`MAX_GRANTED`] (a crowded
    /// `/tmp` holding the home folder) loses its last entries, not the
    /// folders beside it nor the home's: with the depth-first split, `/usr`
    /// came after `/tmp`, was never granted, and no sandboxed command
    /// could start.
    #[test]
    fn a_crowded_folder_above_home_does_not_starve_its_siblings() {
        if !allow_lists() {
            return;
        }
        let top = tempfile::tempdir().unwrap();
        let crowded = top.path().join("crowded");
        let home = crowded.join("home");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(home.join("projects")).unwrap();
        for n in 0..MAX_GRANTED + 10 {
            std::fs::write(crowded.join(format!("f{n:05}")), "").unwrap();
        }
        std::fs::create_dir_all(top.path().join("system/bin")).unwrap();
        let granted = readable_beneath(top.path(), &[home.join(".ssh")]);
        let paths: Vec<&Path> = granted.iter().map(|granted| granted.path.as_path()).collect();
        assert!(paths.contains(&top.path().join("system").as_path()), "the sibling is granted");
        assert!(paths.contains(&home.join("projects").as_path()), "the home's entries are granted");
        assert_eq!(granted.len(), MAX_GRANTED);
        assert!(!paths.iter().any(|path| path.starts_with(home.join(".ssh"))));
    }

    /// Makes `paths` beneath `root`: a path ending in `/` a folder, any
    /// other a file holding `x`.
    pub(in crate::platform::sandbox) fn tree(root: &Path, paths: &[&str]) {
        for path in paths {
            let path = root.join(path);
            if path.to_string_lossy().ends_with('/') {
                std::fs::create_dir_all(&path).unwrap();
            } else {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, "x").unwrap();
            }
        }
    }

    /// The allow-list is built one level deeper where a denied path is
    /// nested: `~/.config` is split to leave out `~/.config/gh`, `~/.cargo`
    /// to leave out its credentials; the rest is granted whole; links are
    /// not granted; a denied path that does not exist splits nothing below it.
    #[test]
    fn the_allow_list_is_split_where_a_denied_path_lies() {
        if !allow_lists() {
            return;
        }
        let top = tempfile::tempdir().unwrap();
        let top = top.path().canonicalize().unwrap();
        tree(
            &top,
            &[
                "home/.ssh/id_ed25519",
                "home/.config/gh/hosts.yml",
                "home/.config/nvim/init.lua",
                "home/.cargo/credentials.toml",
                "home/.cargo/bin/",
                "home/projects/a/",
                "home/.bashrc",
                "other/x",
            ],
        );
        // A link is never granted (where none can be made, nothing changes).
        crate::platform::testing::symlink(top.join("home/.ssh"), top.join("home/ssh-link"));
        let home = top.join("home");
        let denials = ReadDenials::new(Some(&home), &[]);
        let granted = readable_beneath(&top, denials.paths());
        let relative: Vec<(String, bool)> = granted
            .iter()
            .map(|granted| (granted.path.strip_prefix(&top).unwrap().display().to_string(), granted.directory))
            .collect();
        let expected = [
            ("home/.bashrc", false),
            ("home/.cargo/bin", true),
            ("home/.config/nvim", true),
            ("home/projects", true),
            ("other", true),
        ];
        assert_eq!(relative, expected.map(|(path, directory)| (path.to_owned(), directory)), "{granted:?}");
        // Nothing at or above a denied path; the top itself when nothing is denied.
        assert!(readable_beneath(&home.join(".ssh"), denials.paths()).is_empty());
        let other = readable_beneath(&top.join("other"), denials.paths());
        assert_eq!(other, [Granted { path: top.join("other"), directory: true }]);
        // A name that merely starts like a denied one is not denied.
        assert!(at_or_below(b"/h/.ssh/x", b"/h/.ssh") && !at_or_below(b"/h/.sshd", b"/h/.ssh"));
        assert!(at_or_below(b"/h", b"/"));
    }

    /// The allow-list follows a link met on the way to a denied path: a
    /// denied `~/.ssh` that is a link to `/vault`, and a `~/.config` that is
    /// a link to a dotfiles folder, leave out what they lead to.
    #[test]
    fn the_allow_list_follows_links_to_denied_paths() {
        let top = tempfile::tempdir().unwrap();
        let top = top.path().canonicalize().unwrap();
        tree(&top, &["vault/key", "home/dotfiles/config/gh/hosts.yml", "home/dotfiles/config/nvim/init.lua", "home/a"]);
        if !crate::platform::testing::symlink(top.join("vault"), top.join("home/.ssh")) {
            return;
        }
        assert!(crate::platform::testing::symlink("dotfiles/config", top.join("home/.config")));
        let granted = readable_beneath(&top, &named(Some(&top.join("home")), &[]));
        let relative: Vec<String> =
            granted.iter().map(|granted| granted.path.strip_prefix(&top).unwrap().display().to_string()).collect();
        assert_eq!(relative, ["home/a", "home/dotfiles/config/nvim"], "{granted:?}");
    }

    /// A denied link is denied where it leads too; a root overrides a denial.
    #[test]
    fn links_are_denied_where_they_lead_and_roots_win() {
        let top = tempfile::tempdir().unwrap();
        let top = top.path().canonicalize().unwrap();
        tree(&top, &["vault/key", "home/project/.ssh/x"]);
        if !crate::platform::testing::symlink(top.join("vault"), top.join("home/.ssh")) {
            return;
        }
        let denials = ReadDenials::new(Some(&top.join("home")), &[top.join("home/project/.ssh")]);
        assert!(denials.paths().contains(&top.join("vault")), "{denials:?}");
        assert_eq!(denials.covering(&top.join("vault/key"), &[]), Some(top.join("vault").as_path()));
        assert_eq!(denials.covering(&top.join("home/.bashrc"), &[]), None);
        let inside = top.join("home/project/.ssh/x");
        assert!(denials.covering(&inside, &[]).is_some());
        assert_eq!(denials.covering(&inside, &[top.join("home/project")]), None, "the user opened it");
        assert!(denials.any_beneath(&top.join("home")));
        assert!(!denials.any_beneath(&top.join("home/notes")));
    }
}
