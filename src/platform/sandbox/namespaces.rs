//! The mount namespace that makes a root's protected paths read-only to a
//! sandboxed command (see [`super::protected`]).
//!
//! Landlock grants rights beneath a directory and cannot take them back
//! below it, so "create files in the root" also covers `.git/hooks/`. The
//! trampoline therefore enters a mount namespace of its own before it
//! restricts itself with Landlock, and there bind-mounts each protected
//! path onto itself read-only (writes fail with EROFS), and each directory
//! that holds some onto itself as it is (a mount point cannot be renamed or
//! removed, so `mv .git elsewhere` fails with EBUSY). Everything it mounts
//! is private to the namespace, which ends with the last process in it:
//! nothing shows outside, nothing needs undoing. Landlock then forbids the
//! command to mount or unmount anything, so it cannot lift them.
//!
//! The trampoline first enters an unprivileged user namespace (as codex's
//! and bubblewrap's sandboxes do) in which its own user and group map to
//! themselves, so files keep their owners and the command its identity; a
//! command run by root then holds no capability outside it (it cannot load
//! a kernel module or make a usable device node), and, as for anyone, its
//! mounts propagate nowhere. (The price, for root: changing a file's owner
//! to another user fails in the sandbox.) Where user namespaces are
//! refused, root enters a mount namespace alone and makes its mounts
//! private first; anyone else gets no namespace, and the caller reports
//! the protection as missing.

use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::statvfs::{FsFlags, statvfs};

/// Enters a mount namespace of this process's own (through a user
/// namespace when it must), makes every mount in it private, and
/// bind-mounts `read_only` onto themselves read-only and `pinned` onto
/// themselves as they are, ancestors first. A path that vanished meanwhile
/// is skipped. Must be called while the process has a single thread.
pub fn isolate(read_only: &[PathBuf], pinned: &[PathBuf]) -> Result<(), String> {
    if !enter()? {
        // Entered without a user namespace, the mounts are copied shared:
        // nothing mounted here may propagate to the namespace lathe runs in.
        mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
            .map_err(|err| format!("making the mounts private: {err}"))?;
    }
    let mut all: Vec<(&Path, bool)> = read_only
        .iter()
        .map(|path| (path.as_path(), true))
        .chain(pinned.iter().map(|path| (path.as_path(), false)))
        .collect();
    // Ancestors first, so that a read-only mount inside a pinned one stays on top.
    all.sort();
    for (path, read_only) in all {
        bind(path, read_only)?;
    }
    // The working directory was reached before the mounts (a root mounted
    // onto itself hides the one it was in): reach it again through them, so
    // that a relative `.git/hooks` meets the read-only mount.
    let cwd = std::env::current_dir().map_err(|err| format!("cannot find the working directory: {err}"))?;
    std::env::set_current_dir(&cwd).map_err(|err| format!("cannot enter {}: {err}", cwd.display()))
}

/// Enters a new mount namespace in a new user namespace; where user
/// namespaces are refused, a process allowed to (root) enters a mount
/// namespace alone. Says whether it went through a user namespace.
fn enter() -> Result<bool, String> {
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    if let Err(err) = unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS) {
        return match unshare(CloneFlags::CLONE_NEWNS) {
            Ok(()) => Ok(false),
            Err(_) => Err(format!("cannot make a user namespace: {err}")),
        };
    }
    // An unprivileged map of one's own group needs setgroups denied first
    // (kernels before 3.19 have no such file).
    match std::fs::write("/proc/self/setgroups", "deny") {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(format!("cannot deny setgroups in the user namespace: {err}")),
    }
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))
        .map_err(|err| format!("cannot map the user in the user namespace: {err}"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))
        .map_err(|err| format!("cannot map the group in the user namespace: {err}"))?;
    Ok(true)
}

/// Bind-mounts `path` onto itself, read-only when asked, keeping the flags
/// the mount it lies on has (a user namespace may not drop `nosuid`,
/// `nodev`, `noexec` or the atime setting).
fn bind(path: &Path, read_only: bool) -> Result<(), String> {
    let failed = |what: &str, err: Errno| format!("{what} {}: {err}", path.display());
    match mount(Some(path), path, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>) {
        Ok(()) => {}
        Err(Errno::ENOENT) => return Ok(()),
        Err(err) => return Err(failed("cannot bind-mount", err)),
    }
    if !read_only {
        return Ok(());
    }
    let kept = statvfs(path).map(|stat| locked_flags(stat.flags())).map_err(|err| failed("cannot look at", err))?;
    let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | kept;
    mount(None::<&str>, path, None::<&str>, flags, None::<&str>).map_err(|err| failed("cannot make read-only", err))
}

/// `statvfs`'s relatime bit. nix names it only for glibc and Android, but
/// both libcs pass the kernel's `f_flags` through unchanged, and the kernel's
/// value (`ST_RELATIME`, include/linux/statfs.h) is part of its ABI: naming it
/// here keeps the static musl build keeping relatime like the glibc one.
const ST_RELATIME: FsFlags = FsFlags::from_bits_retain(0x1000);

/// The per-mount flags a remount must keep.
fn locked_flags(flags: FsFlags) -> MsFlags {
    let table = [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (ST_RELATIME, MsFlags::MS_RELATIME),
    ];
    table.into_iter().filter(|(found, _)| flags.contains(*found)).fold(MsFlags::empty(), |all, (_, flag)| all | flag)
}
