//! The Linux family of the command sandbox: Landlock (writes, reads, TCP,
//! scopes), the seccomp filter ([`super::seccomp`]: sockets) and a mount
//! namespace ([`super::namespaces`]: the read-only git and lathe paths), all
//! put on by lathe's trampoline (`lathe sandbox-exec --sandbox ...`) on
//! itself before it starts the command, and tried for real by its probe
//! mode. Nothing runs before the trampoline: the launcher starts it as is.

use std::ffi::OsString;
use std::path::Path;

use crate::platform::settings::SandboxSettings;

use super::{
    DENY_READ_FLAG, Findings, HOME_FLAG, NO_NETWORK_FLAG, NS_KEEPER_FLAG, ROOT_FLAG, SANDBOX_FLAG, SandboxError,
    SandboxPart, SandboxPolicy, Status, WITHOUT_FLAG, WRITE_FLAG, keeper, namespaces, protected, seccomp, secrets,
};

/// Device files and scratch space every sandboxed command may write: output
/// thrown away, terminals, and the shared memory directory programs use
/// like the temp directory (POSIX semaphores, Python's multiprocessing).
/// Whether each is a directory (else a file, to which only file rights apply).
const ALWAYS_WRITABLE: [(&str, bool); 7] = [
    ("/dev/null", false),
    ("/dev/zero", false),
    ("/dev/full", false),
    ("/dev/tty", false),
    ("/dev/pts", true),
    ("/dev/ptmx", false),
    ("/dev/shm", true),
];

/// Puts the whole `policy` on the calling process, which must have a
/// single thread: the mount namespace (unless left out), then Landlock,
/// then the seccomp filter (with the network off, unless left out). Fails,
/// and the command must not run, when a part that was not left out cannot
/// be put on, or when Landlock enforces nothing.
pub fn apply(policy: &SandboxPolicy) -> Result<(), SandboxError> {
    if policy.applies(SandboxPart::Namespaces) {
        let mounts = protected::mounts(&policy.roots, &policy.writable);
        if !mounts.is_empty() {
            namespaces::isolate(&mounts.read_only, &mounts.pinned).map_err(SandboxError::Namespaces)?;
            if let Some(name) = &policy.keeper {
                keeper::hand_over(name);
            }
        }
    }
    if let Err(why) = restrict_self(policy)? {
        return Err(SandboxError::Unavailable(why));
    }
    if !policy.network && policy.applies(SandboxPart::Seccomp) {
        seccomp::deny_sockets().map_err(SandboxError::Seccomp)?;
    }
    Ok(())
}

/// Restricts the calling thread, and everything it starts from now on,
/// with Landlock as `policy` says (writes, reads, TCP, scopes). Returns the
/// kernel's ABI, or why Landlock enforced nothing (the caller decides
/// whether to go on).
pub fn restrict_self(policy: &SandboxPolicy) -> Result<Result<i32, String>, SandboxError> {
    use landlock::{
        ABI, AccessFs, AccessNet, BitFlags, LandlockStatus, PathBeneath, Ruleset, RulesetAttr, RulesetCreated,
        RulesetCreatedAttr, RulesetStatus, Scope,
    };
    /// What a rule's path must be: known to be a directory or a file (and
    /// then no link is followed), a file where a link may lead (a device),
    /// or either (links followed).
    #[derive(Clone, Copy)]
    enum Kind {
        Directory,
        File,
        LinkedFile,
        Either,
    }
    let failed = |err: landlock::RulesetError| SandboxError::Landlock(err.to_string());
    // ABI 3's writes: not ABI 5's device ioctls, which would break programs
    // that drive a GPU or a terminal and are no file writes.
    let writes = AccessFs::from_write(ABI::V3);
    let reads = AccessFs::ReadFile | AccessFs::ReadDir;
    let mut ruleset = Ruleset::default().handle_access(writes | reads).map_err(failed)?;
    if !policy.network {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp).map_err(failed)?;
    }
    // Abstract Unix sockets whatever the network: a local X server or bus
    // listening on one takes input that ends up run (and lathe's own
    // namespace keeper listens on one).
    let mut ruleset =
        ruleset.scope(Scope::Signal | Scope::AbstractUnixSocket).map_err(failed)?.create().map_err(failed)?;
    // Every rule's descriptor stays open until this process execs or ends
    // (they are close-on-exec): closing each would be one more system call
    // per rule, at every command's start.
    let mut opened: Vec<rustix::fd::OwnedFd> = Vec::new();
    let mut rule = |ruleset: RulesetCreated, path: &Path, kind: Kind, access: BitFlags<AccessFs>| {
        use rustix::fs::{FileType, Mode, OFlags, fstat, open};
        let mut flags = OFlags::PATH | OFlags::CLOEXEC;
        match kind {
            Kind::Directory => flags |= OFlags::DIRECTORY | OFlags::NOFOLLOW,
            Kind::File => flags |= OFlags::NOFOLLOW,
            Kind::LinkedFile | Kind::Either => {}
        }
        let Ok(fd) = open(path, flags, Mode::empty()) else { return Ok(ruleset) };
        let directory = match kind {
            Kind::Directory => true,
            Kind::File | Kind::LinkedFile => false,
            Kind::Either => fstat(&fd).is_ok_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Directory),
        };
        // A rule with directory rights on a file is refused; a file rule on
        // whatever is there now is harmless.
        let access = if directory { access } else { access & AccessFs::from_file(ABI::V3) };
        let added = ruleset.add_rule(PathBeneath::new(std::os::fd::AsFd::as_fd(&fd), access)).map_err(failed);
        opened.push(fd);
        added
    };
    // The read allow-list, never through a link (one swapped in since the
    // directory was read): a link is judged where it leads.
    // lathe's list for the session when it gave one (see `super::grants`),
    // else read here.
    let mut grants = match &policy.read_grants {
        Some(encoded) => super::grants::decode(encoded),
        None => secrets::readable_beneath(Path::new("/"), &secrets::named(policy.home.as_deref(), &policy.deny_read)),
    };
    // The roots and writable paths as given (links followed, as named by
    // the user or the session). One that the allow-list grants as it is (a
    // directory, say the temp dir) gets a single rule with both rights:
    // each rule costs microseconds at every command's start.
    let mut granted_dir = |path: &Path| {
        let found = grants.iter().position(|granted| granted.directory && granted.path == path);
        found.map(|index| grants.swap_remove(index))
    };
    for root in &policy.roots {
        let kind = if granted_dir(root).is_some() { Kind::Directory } else { Kind::Either };
        ruleset = rule(ruleset, root, kind, reads | writes)?;
    }
    for path in &policy.writable {
        ruleset = match granted_dir(path) {
            Some(granted) => rule(ruleset, &granted.path, Kind::Directory, reads | writes)?,
            None => rule(ruleset, path, Kind::Either, writes)?,
        };
    }
    for (path, directory) in ALWAYS_WRITABLE {
        ruleset = rule(ruleset, Path::new(path), if directory { Kind::Directory } else { Kind::LinkedFile }, writes)?;
    }
    for granted in &grants {
        let kind = if granted.directory { Kind::Directory } else { Kind::File };
        ruleset = rule(ruleset, &granted.path, kind, reads)?;
    }
    let status = ruleset.restrict_self().map_err(failed)?;
    std::mem::forget(opened);
    let abi = match status.landlock {
        LandlockStatus::Available { effective_abi, kernel_abi } => kernel_abi.unwrap_or(effective_abi as i32),
        LandlockStatus::NotEnabled => {
            return Ok(Err(
                "this kernel has Landlock but it is not enabled (add `landlock` to the `lsm=` boot parameter)".into(),
            ));
        }
        LandlockStatus::NotImplemented => {
            return Ok(Err("this kernel has no Landlock (Linux 5.13 or later has it)".into()));
        }
    };
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced => Ok(abi),
        RulesetStatus::NotEnforced => Err(format!("Landlock ABI {abi} enforced nothing")),
    })
}

/// The trampoline's probe mode (`lathe sandbox-exec --probe`): tries each
/// part for real on this process (which must have a single thread and
/// should exit afterwards) and says what held.
pub fn probe_here() -> Findings {
    let temp = std::env::temp_dir();
    let namespaces = namespaces::isolate(std::slice::from_ref(&temp), &[]);
    let landlock = match restrict_self(&SandboxPolicy::new(vec![temp], false)) {
        Ok(found) => found,
        Err(err) => Err(err.to_string()),
    };
    let seccomp = seccomp::deny_sockets().and_then(|()| match std::net::UdpSocket::bind("127.0.0.1:0") {
        Ok(_) => Err("the filter was installed, but a UDP socket still opens".to_owned()),
        Err(_) => Ok(()),
    });
    Findings { landlock, seccomp, namespaces }
}

/// What this machine enforces of a policy with `settings`' network: what
/// the `trampoline`'s probe found, less the parts `settings` force off.
pub(super) fn status(settings: &SandboxSettings, trampoline: Option<&Path>) -> Status {
    let Some(trampoline) = trampoline else { return Status::unavailable(super::UNKNOWN_TRAMPOLINE) };
    super::probe(trampoline)
        .forcing_off(&crate::platform::sandbox::SandboxPart::forced_off_by(settings), &super::forced_off_why(settings))
        .status(settings.network)
}

/// Whether Landlock refuses TCP here (ABI 4 or later, not forced off): what
/// the model is told of the network without the seccomp filter.
pub(super) fn tcp_rules(settings: &SandboxSettings, trampoline: Option<&Path>) -> bool {
    trampoline.is_some_and(|trampoline| {
        let findings = super::probe(trampoline).forcing_off(
            &crate::platform::sandbox::SandboxPart::forced_off_by(settings),
            &super::forced_off_why(settings),
        );
        findings.landlock.as_ref().is_ok_and(|abi| *abi >= 4)
    })
}

/// The keeper's name (see `keeper`), started on first use.
pub(super) fn namespace_keeper() -> Option<String> {
    keeper::Keeper::get().map(|keeper| keeper.name().to_owned())
}

/// The Landlock trampoline is started as is: nothing runs before it.
pub(super) fn launch_prefix(_policy: &SandboxPolicy, trampoline: &Path) -> (OsString, Vec<OsString>) {
    (trampoline.as_os_str().to_owned(), Vec::new())
}

/// The policy as trampoline arguments (see `crate::platform::process`): the trampoline
/// puts it on itself.
pub(super) fn trampoline_args(policy: &SandboxPolicy) -> Vec<OsString> {
    let mut args = vec![OsString::from(SANDBOX_FLAG)];
    let mut flagged = |flag: &str, path: &Path| {
        args.push(OsString::from(flag));
        args.push(path.as_os_str().to_owned());
    };
    for root in &policy.roots {
        flagged(ROOT_FLAG, root);
    }
    for path in &policy.writable {
        flagged(WRITE_FLAG, path);
    }
    if let Some(home) = &policy.home {
        flagged(HOME_FLAG, home);
    }
    for path in &policy.deny_read {
        flagged(DENY_READ_FLAG, path);
    }
    if !policy.network {
        args.push(OsString::from(NO_NETWORK_FLAG));
    }
    for part in &policy.without {
        args.push(OsString::from(WITHOUT_FLAG));
        args.push(OsString::from(part.name()));
    }
    if let Some(name) = &policy.keeper {
        args.push(OsString::from(NS_KEEPER_FLAG));
        args.push(OsString::from(name));
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// Runs `body` on a thread restricted to `policy` by Landlock alone
    /// (Landlock restricts the calling thread only, so the test process
    /// stays free).
    #[allow(clippy::unwrap_used)]
    fn in_sandbox<T: Send + 'static>(
        policy: SandboxPolicy,
        body: impl FnOnce() -> T + Send + 'static,
    ) -> (Result<i32, String>, T) {
        std::thread::spawn(move || {
            let found = restrict_self(&policy).unwrap();
            (found, body())
        })
        .join()
        .unwrap()
    }

    /// The kernel must have Landlock for these tests to mean anything; where
    /// it has none, the test says so and checks that nothing is claimed.
    #[allow(clippy::print_stderr)]
    fn landlock_abi(found: &Result<i32, String>) -> Option<i32> {
        match found {
            Ok(abi) => Some(*abi),
            Err(why) => {
                eprintln!("NOTE: no Landlock on this kernel ({why}); checking the fallback only");
                None
            }
        }
    }

    #[test]
    fn writes_stay_inside_the_writable_paths() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("kept"), "original").unwrap();
        let policy = SandboxPolicy::new(vec![root.path().to_path_buf()], true);
        let (root_path, outside_path) = (root.path().to_path_buf(), outside.path().to_path_buf());
        let (found, results) = in_sandbox(policy, move || {
            [
                std::fs::write(root_path.join("x"), "ok").map_err(|e| e.kind()),
                std::fs::write(outside_path.join("x"), "no").map_err(|e| e.kind()),
                std::fs::remove_file(outside_path.join("kept")).map_err(|e| e.kind()),
                std::fs::write(outside_path.join("kept"), "changed").map_err(|e| e.kind()),
                std::fs::create_dir(outside_path.join("d")).map_err(|e| e.kind()),
                std::fs::write("/dev/null", "discarded").map_err(|e| e.kind()),
            ]
        });
        if landlock_abi(&found).is_none() {
            return;
        }
        let denied = Err(std::io::ErrorKind::PermissionDenied);
        assert_eq!(results, [Ok(()), denied, denied, denied, denied, Ok(())]);
        assert_eq!(std::fs::read_to_string(outside.path().join("kept")).unwrap(), "original");
        assert!(!outside.path().join("x").exists());
        assert!(root.path().join("x").exists());
        // Without denied reads, everything reads.
        let reader = outside.path().join("kept");
        let (_, read) = in_sandbox(SandboxPolicy::new(Vec::new(), true), move || std::fs::read_to_string(reader).ok());
        assert_eq!(read.as_deref(), Some("original"));
    }

    /// Issue 25: the credentials beneath the home are unreadable, nested
    /// ones too (`~/.config/gh` in a readable `~/.config`), and listing
    /// them fails; the rest of the home and the system read as before; a
    /// `deny_read` path is unreadable; a denied path inside a root reads.
    #[test]
    fn reads_are_an_allow_list_around_the_secrets() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path().canonicalize().unwrap();
        for (path, text) in [
            (".ssh/id_ed25519", "key"),
            (".config/gh/hosts.yml", "token"),
            (".config/nvim/init.lua", "vim"),
            (".cargo/credentials.toml", "cargo token"),
            (".cargo/config.toml", "cargo config"),
            ("notes/private.txt", "private"),
            ("project/.ssh/x", "inside a root"),
        ] {
            std::fs::create_dir_all(home.join(path).parent().unwrap()).unwrap();
            std::fs::write(home.join(path), text).unwrap();
        }
        let policy = SandboxPolicy::new(Vec::new(), true)
            .with_roots(vec![home.join("project")])
            .denying_reads(Some(home.clone()), vec![home.join("notes/private.txt"), home.join("project/.ssh")]);
        let h = home.clone();
        let (found, results) = in_sandbox(policy, move || {
            let read = |path: &str| std::fs::read_to_string(h.join(path)).map_err(|e| e.kind());
            let list = |path: &str| std::fs::read_dir(h.join(path)).map(drop).map_err(|e| e.kind());
            (
                [
                    read(".ssh/id_ed25519"),
                    read(".config/gh/hosts.yml"),
                    read(".cargo/credentials.toml"),
                    read("notes/private.txt"),
                ],
                [read(".config/nvim/init.lua"), read(".cargo/config.toml"), read("project/.ssh/x")],
                [list(".ssh"), list(".config/gh")],
                std::fs::read_to_string("/etc/hostname").is_ok() || std::fs::read_to_string("/etc/passwd").is_ok(),
            )
        });
        if landlock_abi(&found).is_none() {
            return;
        }
        let (denied, allowed, listed, system) = results;
        let refused = Err(std::io::ErrorKind::PermissionDenied);
        assert_eq!(denied, [refused.clone(), refused.clone(), refused.clone(), refused.clone()]);
        assert_eq!(allowed, [Ok("vim".to_owned()), Ok("cargo config".to_owned()), Ok("inside a root".to_owned())]);
        assert_eq!(listed, [Err(std::io::ErrorKind::PermissionDenied); 2]);
        assert!(system, "the system reads");
    }

    #[test]
    fn network_off_refuses_tcp() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let connect = move || std::net::TcpStream::connect(address).map(drop).map_err(|err| err.kind());
        let (_, allowed) = in_sandbox(SandboxPolicy::new(Vec::new(), true), connect);
        let (found, refused) = in_sandbox(SandboxPolicy::new(Vec::new(), false), connect);
        assert_eq!(allowed, Ok(()));
        match landlock_abi(&found) {
            Some(abi) if abi >= 4 => assert_eq!(refused, Err(std::io::ErrorKind::PermissionDenied)),
            Some(abi) => eprintln!("NOTE: Landlock ABI {abi} has no TCP rules; TCP not checked"),
            None => {}
        }
    }

    #[test]
    fn the_policy_as_arguments() {
        let settings = SandboxSettings {
            network: false,
            writable: vec![PathBuf::from("/c")],
            home: Some(PathBuf::from("/home/u")),
            deny_read: vec![PathBuf::from("/srv/keys")],
            ..SandboxSettings::default()
        };
        let policy = SandboxPolicy::for_session(
            &[PathBuf::from("/p"), PathBuf::from("/p")],
            &settings,
            &[SandboxPart::Namespaces],
        );
        let temp = settings.temp_dir.clone();
        assert_eq!(policy.roots(), [PathBuf::from("/p")]);
        assert_eq!(policy.writable(), [temp.clone(), PathBuf::from("/c")]);
        let args: Vec<OsString> = policy.as_args();
        let expected: Vec<OsString> = ["--sandbox", "--root", "/p", "--write"]
            .into_iter()
            .map(OsString::from)
            .chain([temp.into_os_string()])
            .chain(
                [
                    "--write",
                    "/c",
                    "--home",
                    "/home/u",
                    "--deny-read",
                    "/srv/keys",
                    "--no-network",
                    "--without",
                    "namespaces",
                ]
                .into_iter()
                .map(OsString::from),
            )
            .collect();
        assert_eq!(args, expected);
        let described = policy.describe();
        assert!(described.contains("`/p`") && described.contains("no network"), "{described}");
        assert!(described.contains("`~/.ssh`"), "{described}");
        assert!(!described.contains(".git/hooks"), "the mounts are left out: {described}");
    }
}
