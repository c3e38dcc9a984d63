//! The read allow-list worked out once per session instead of at every
//! sandboxed command's start (issue 25's start-up figure).
//!
//! The allow-list ([`super::secrets::readable_beneath`]) depends on the
//! entries of the directories it splits (`/`, the home directory's parent
//! chain, the home directory, the folders holding nested credentials) and
//! on nothing else unless a link was met on the way to a denied path. lathe
//! reads those directories once, hands the trampoline the result
//! (`--read-grants`: the granted paths, each still opened by the trampoline
//! itself with the same flags as before, so a path that changed since is
//! judged as it is now), and reads them again only when one of them may
//! have changed. The trampoline of an editor's terminal, which lathe does
//! not start, still works the list out itself.
//!
//! "May have changed" must never miss a change, since a stale list could
//! grant what a fresh one would not (`~/.ssh` made a link into a folder
//! granted whole has that folder split). So the list is kept only while
//! all of these hold, checked before each use with one `poll(2)`:
//!
//! - an inotify watch on every listed directory, added before the list
//!   that is kept was read, has seen no entry created, removed or renamed
//!   and no directory itself removed, renamed or unmounted (the kernel
//!   queues the event before the change's system call returns, so a change
//!   made before the check is seen by it);
//! - the mount table of lathe's namespace, which the trampoline's copies,
//!   has not changed (`/proc/self/mountinfo` turns `POLLPRI` when it does:
//!   a file system mounted over a listed directory sends no inotify event);
//! - no link was met at or above a denied path (the grants would depend on
//!   where it leads, through directories not watched);
//! - every listed directory is on a local file system that reports every
//!   change to inotify ([`LOCAL_FILE_SYSTEMS`]; on NFS, say, another
//!   machine's changes are not reported; overlayfs is left out too, as
//!   changes made to its layers beneath it are not reported);
//! - no granted path holds a newline, and the list is at most 32 KiB (it
//!   crosses as one argument).
//!
//! Otherwise the trampoline gets no list and works it out itself, as
//! before; lathe remembers that and tries again only once a watched
//! directory or the mount table changes (never, where the watches could
//! not be set up). What a kept list can still miss is only what a fresh one would
//! have granted in the moment between the check and the trampoline's own
//! opens, the same window the trampoline's own reading had. A granted path
//! that is gone, or is now a link, is not granted (the trampoline opens
//! it without following links); a name created since is not in the list,
//! and so unreadable until the list is read again.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rustix::event::{PollFd, PollFlags};
use rustix::fs::inotify;

use super::secrets::{self, Granted};

/// The file systems (`statfs`'s `f_type`) whose every change reaches
/// inotify: local ones. ext2/3/4, XFS, Btrfs, tmpfs, F2FS, ZFS.
const LOCAL_FILE_SYSTEMS: [i64; 6] = [0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994, 0xF2F5_2010, 0x2FC1_2FC1];

/// Bytes of the encoded list at most: one argument may hold 128 KiB
/// (`MAX_ARG_STRLEN`), and the command's own arguments and environment
/// share the rest of the limit. A longer list (a crowded `/tmp` holding the
/// home) is read by the trampoline.
const MAX_ENCODED: usize = 32 * 1024;

/// Lists kept at most (one per set of denied paths: sessions share one
/// when their home and `deny_read` agree).
const MAX_KEPT: usize = 8;

/// One kept list, or the finding that none can be kept, and what says it
/// is still so.
struct Kept {
    denied: Vec<PathBuf>,
    top: PathBuf,
    /// The list, `None` when it cannot be kept (the trampoline reads it).
    encoded: Option<OsString>,
    /// The inotify watches and the mount table; `None` when they could not
    /// be set up, and then the list is never kept.
    watched: Option<(OwnedFd, File)>,
}

impl Kept {
    /// Whether nothing the list depends on has changed: no inotify event
    /// is queued, the mount table is as it was.
    fn fresh(&self) -> bool {
        let Some((watches, mounts)) = &self.watched else { return true };
        let mut fds = [PollFd::new(watches, PollFlags::IN), PollFd::new(mounts, PollFlags::PRI | PollFlags::ERR)];
        match rustix::event::poll(&mut fds, Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 })) {
            Ok(0) => true,
            Ok(_) | Err(_) => false,
        }
    }

    /// Reads the list beneath `top` with the `denied` paths, watching the
    /// directories it depends on before the reading that is kept (see the
    /// module docs for when it is not kept).
    fn read(top: &Path, denied: &[PathBuf]) -> Kept {
        let mut kept = Kept { denied: denied.to_vec(), top: top.to_path_buf(), encoded: None, watched: None };
        // Which directories to watch: read once to know, watch them, and
        // read again; kept only if the second reading listed the same.
        let first = secrets::readable_beneath_listed(top, denied);
        let Some(watched) = watch(&first.listed) else { return kept };
        kept.watched = Some(watched);
        if first.links || !first.listed.iter().all(|dir| local(dir)) {
            return kept;
        }
        let listing = secrets::readable_beneath_listed(top, denied);
        if !listing.links && listing.listed == first.listed {
            kept.encoded = encode(&listing.granted);
        }
        kept
    }
}

/// Whether `dir` is on a file system of [`LOCAL_FILE_SYSTEMS`].
fn local(dir: &Path) -> bool {
    // `f_type`'s width differs between architectures and libcs.
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::statfs(dir).is_ok_and(|found| LOCAL_FILE_SYSTEMS.contains(&(found.f_type as i64)))
}

/// Watches the `listed` directories (and the mount table, opened first).
fn watch(listed: &[PathBuf]) -> Option<(OwnedFd, File)> {
    let mounts = File::open("/proc/self/mountinfo").ok()?;
    let watches = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).ok()?;
    let changes = inotify::WatchFlags::CREATE
        | inotify::WatchFlags::DELETE
        | inotify::WatchFlags::MOVED_FROM
        | inotify::WatchFlags::MOVED_TO
        | inotify::WatchFlags::DELETE_SELF
        | inotify::WatchFlags::MOVE_SELF
        | inotify::WatchFlags::ONLYDIR
        | inotify::WatchFlags::DONT_FOLLOW;
    for dir in listed {
        inotify::add_watch(&watches, dir, changes).ok()?;
    }
    Some((watches, mounts))
}

/// The lists kept by this process.
static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

/// The read allow-list beneath `/` around the `denied` paths (as named),
/// encoded for the trampoline's `--read-grants`: the one kept since an
/// earlier call while it is fresh, else read anew (and kept when it can
/// be). `None` when it cannot be kept: the trampoline then reads it itself.
pub fn current(denied: &[PathBuf]) -> Option<OsString> {
    current_beneath(Path::new("/"), denied)
}

/// [`current`] beneath `top`.
fn current_beneath(top: &Path, denied: &[PathBuf]) -> Option<OsString> {
    let mut kept = KEPT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(index) = kept.iter().position(|kept| kept.top == top && kept.denied == denied) {
        if kept[index].fresh() {
            return kept[index].encoded.clone();
        }
        kept.remove(index);
    }
    let fresh = Kept::read(top, denied);
    let encoded = fresh.encoded.clone();
    if kept.len() >= MAX_KEPT {
        kept.remove(0);
    }
    kept.push(fresh);
    encoded
}

/// The grants as one argument: per grant `d` (a directory) or `f` (a
/// file), the path, a newline. `None` when a path holds a newline, or
/// when it would be longer than [`MAX_ENCODED`].
fn encode(granted: &[Granted]) -> Option<OsString> {
    let mut bytes = Vec::new();
    for granted in granted {
        let path = granted.path.as_os_str().as_bytes();
        if path.contains(&b'\n') {
            return None;
        }
        bytes.push(if granted.directory { b'd' } else { b'f' });
        bytes.extend_from_slice(path);
        bytes.push(b'\n');
        if bytes.len() > MAX_ENCODED {
            return None;
        }
    }
    Some(OsString::from_vec(bytes))
}

/// The grants of a `--read-grants` argument; lines that are not a kind and
/// an absolute path are left out (granting less).
pub fn decode(encoded: &std::ffi::OsStr) -> Vec<Granted> {
    encoded
        .as_bytes()
        .split(|byte| *byte == b'\n')
        .filter_map(|line| {
            let (kind, path) = line.split_first()?;
            let directory = match kind {
                b'd' => true,
                b'f' => false,
                _ => return None,
            };
            let path = PathBuf::from(std::ffi::OsStr::from_bytes(path));
            path.is_absolute().then_some(Granted { path, directory })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::sandbox::secrets::tests::tree;

    /// Whether `top` is on a file system whose lists can be kept (the
    /// test's temp dir might not be).
    fn keepable(top: &Path) -> bool {
        let kept = local(top);
        if !kept {
            eprintln!("NOTE: {} is not on a local file system; nothing to check", top.display());
        }
        kept
    }

    #[test]
    fn the_list_crosses_as_one_argument() {
        let granted = vec![
            Granted { path: PathBuf::from("/usr"), directory: true },
            Granted { path: PathBuf::from("/h/.bashrc"), directory: false },
        ];
        let encoded = encode(&granted).unwrap();
        assert_eq!(decode(&encoded), granted);
        assert_eq!(encode(&[Granted { path: PathBuf::from("/a\nd/etc"), directory: true }]), None);
        let crowded: Vec<Granted> = (0..2000)
            .map(|n| Granted { path: PathBuf::from(format!("/tmp/a-crowded-folder-entry-{n}")), directory: true })
            .collect();
        assert_eq!(encode(&crowded), None, "too long for one argument");
        let odd = OsString::from("d/usr\nxd/etc\ndrelative\nf\n\nf/h/x");
        assert_eq!(
            decode(&odd),
            [
                Granted { path: PathBuf::from("/usr"), directory: true },
                Granted { path: PathBuf::from("/h/x"), directory: false }
            ]
        );
    }

    /// The kept list is handed out while nothing changed, and read anew the
    /// moment an entry of a listed directory is created, renamed or removed:
    /// a new folder in the home is granted by the next command, and a
    /// credential moved in under a granted name is not.
    #[test]
    fn a_change_in_a_listed_directory_reads_the_list_again() {
        let top = tempfile::tempdir().unwrap();
        let top = top.path().canonicalize().unwrap();
        if !keepable(&top) {
            return;
        }
        tree(
            &top,
            &["home/.ssh/key", "home/.config/gh/hosts.yml", "home/.config/nvim/init.lua", "home/notes/a", "usr/x"],
        );
        let denied = secrets::named(Some(&top.join("home")), &[]);
        let paths = |encoded: &OsString| -> Vec<String> {
            decode(encoded)
                .iter()
                .map(|granted| granted.path.strip_prefix(&top).unwrap().display().to_string())
                .collect()
        };
        let first = current_beneath(&top, &denied).expect("a local tree without links is kept");
        assert_eq!(paths(&first), ["home/.config/nvim", "home/notes", "usr"]);
        assert_eq!(current_beneath(&top, &denied).as_ref(), Some(&first), "nothing changed");
        // A change in a file inside a granted folder changes nothing listed.
        std::fs::write(top.join("home/notes/b"), "x").unwrap();
        assert_eq!(current_beneath(&top, &denied).as_ref(), Some(&first));
        std::fs::create_dir(top.join("home/projects")).unwrap();
        let second = current_beneath(&top, &denied).unwrap();
        assert_eq!(paths(&second), ["home/.config/nvim", "home/notes", "home/projects", "usr"]);
        // `notes` renamed to a denied name: no longer granted.
        std::fs::remove_dir_all(top.join("home/.ssh")).unwrap();
        std::fs::rename(top.join("home/notes"), top.join("home/.ssh")).unwrap();
        let third = current_beneath(&top, &denied).unwrap();
        assert_eq!(paths(&third), ["home/.config/nvim", "home/projects", "usr"]);
        // A nested split folder is watched too.
        std::fs::create_dir(top.join("home/.config/git")).unwrap();
        assert!(paths(&current_beneath(&top, &denied).unwrap()).contains(&"home/.config/git".to_owned()));
    }

    /// A link met on the way to a denied path (`~/.ssh` made a link into a
    /// folder granted whole) makes the list depend on where it leads: it is
    /// not kept, and the trampoline reads it itself, splitting that folder.
    #[test]
    fn a_link_to_a_denied_path_is_not_kept() {
        let top = tempfile::tempdir().unwrap();
        let top = top.path().canonicalize().unwrap();
        if !keepable(&top) {
            return;
        }
        tree(&top, &["home/notes/a", "vault/ssh/key", "vault/other"]);
        let denied = secrets::named(Some(&top.join("home")), &[]);
        let kept = current_beneath(&top, &denied).unwrap();
        assert!(decode(&kept).iter().any(|granted| granted.path == top.join("vault")), "granted whole at first");
        if !crate::platform::testing::symlink(top.join("vault/ssh"), top.join("home/.ssh")) {
            return;
        }
        assert_eq!(current_beneath(&top, &denied), None, "a link: not kept");
        let fresh = secrets::readable_beneath(&top, &denied);
        assert!(fresh.iter().any(|granted| granted.path == top.join("vault/other")), "{fresh:?}");
        assert!(!fresh.iter().any(|granted| granted.path == top.join("vault")), "{fresh:?}");
    }
}
