//! The macOS family of the command sandbox: Seatbelt, through
//! `/usr/bin/sandbox-exec` (by that absolute path only, never from `PATH`)
//! with a profile lathe generates for the session's policy. The launcher
//! starts `sandbox-exec -p <profile> -D NAME=path... -- <trampoline> ...`:
//! `sandbox-exec` puts the profile on itself and `exec`s lathe's trampoline,
//! so the trampoline (which keeps supervising the command) and everything
//! it starts are confined, and nothing can lift it.
//!
//! The profile is the Linux policy, not a stricter one: it allows by
//! default and denies
//!
//! - writes anywhere but beneath the session roots, the temp directories
//!   (the configured one and `/private/tmp`), the configured writable paths
//!   and the terminal and null devices;
//! - writes to the parts of a root that make git or lathe run something
//!   later (the one list of [`super::protected`], the Linux mounts: a `.git`
//!   directory's hooks, config and info, submodules' and worktrees' git
//!   directories, `.lathe/`), and renaming or removing the git directories
//!   they are in (what the Linux mount namespace pins);
//! - reading the credentials [`super::secrets`] lists and the `deny_read`
//!   paths, unless they lie inside a session root (stricter than Landlock,
//!   which cannot hide them from `stat`: Seatbelt denies their metadata too);
//! - with the network off, every IP connection, datagram and listener (TCP
//!   and UDP: stricter than Landlock's TCP rules, as the Linux seccomp
//!   filter is); Unix sockets stay usable, and so does name resolution,
//!   which macOS does through a system service;
//! - signals to processes outside the sandbox.
//!
//! Paths never appear in the profile's text: it names each as `(param
//! "NAME")` and the path is passed as `-D NAME=path`, so no file name, however
//! hostile (quotes, parentheses, newlines), is ever parsed as SBPL. Seatbelt
//! matches the paths the kernel resolved, so every path is passed as it
//! really is (`/tmp` is `/private/tmp`, `$TMPDIR` lies in
//! `/private/var/folders`).
//!
//! What this machine enforces is found once per process by running
//! `sandbox-exec` for real: a profile allowing everything, then a profile
//! of this generator's with every kind of rule. A missing `sandbox-exec`
//! (Apple deprecated it), or one that refuses (lathe already runs in a
//! sandbox, which cannot be nested), makes the sandbox unavailable with that
//! reason, so `auto` asks before commands.
//!
//! Written after measuring codex's Seatbelt profiles (`codex-rs/sandboxing`);
//! compile-checked for macOS and unit-tested on every system, never run on
//! a Mac here. The generator ([`profile`]) is pure and compiled everywhere.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::{SandboxPart, SandboxPolicy};

/// The one `sandbox-exec` lathe runs (one found on `PATH` could be anyone's).
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// Paths every sandboxed command may write besides the policy's, as SBPL
/// filters (constants: no path from outside ever goes here): the shared
/// temp directory, output thrown away, terminals, the descriptors it
/// already holds, and the DTrace helper every process may open.
const ALWAYS_WRITABLE: [&str; 8] = [
    r#"(subpath "/private/tmp")"#,
    r#"(literal "/dev/null")"#,
    r#"(literal "/dev/zero")"#,
    r#"(literal "/dev/tty")"#,
    r#"(literal "/dev/ptmx")"#,
    r#"(regex #"^/dev/ttys[0-9]+$")"#,
    r#"(subpath "/dev/fd")"#,
    r#"(literal "/dev/dtracehelper")"#,
];

/// What a profile is made of: every path as it really is (links followed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    /// Writable beneath: the roots, the temp directory, the writable paths.
    pub writable: Vec<PathBuf>,
    /// Read-only, and everything beneath: the protected parts of the roots.
    pub read_only: Vec<PathBuf>,
    /// Not to be renamed or removed (what they hold stays writable): the git
    /// directories holding protected parts, a root inside a writable path.
    pub pinned: Vec<PathBuf>,
    /// Unreadable, and everything beneath: credentials, `deny_read` paths.
    pub unreadable: Vec<PathBuf>,
    /// Readable even beneath an unreadable path: the session roots.
    pub readable: Vec<PathBuf>,
    /// Whether the network is on.
    pub network: bool,
}

impl Inputs {
    /// What `policy` amounts to on disk now: its paths as they really are,
    /// the protected parts of its roots as the Linux mounts find them
    /// (creating a git directory's missing `hooks/` and `info/` as they do),
    /// its read denials.
    pub fn of(policy: &SandboxPolicy) -> Inputs {
        let real = |path: &PathBuf| crate::platform::authority::Target::of(path).real;
        let roots: Vec<PathBuf> = policy.roots.iter().map(real).collect();
        let mut writable: Vec<PathBuf> = roots.iter().cloned().chain(policy.writable.iter().map(real)).collect();
        dedup(&mut writable);
        let mounts = if policy.applies(SandboxPart::Namespaces) {
            super::protected::mounts(&policy.roots, &policy.writable)
        } else {
            super::protected::Mounts::default()
        };
        let mut unreadable = policy.read_denials().paths().to_vec();
        dedup(&mut unreadable);
        Inputs {
            writable,
            read_only: mounts.read_only,
            pinned: mounts.pinned,
            unreadable,
            readable: roots,
            network: policy.network,
        }
    }
}

fn dedup(paths: &mut Vec<PathBuf>) {
    let mut seen = std::collections::HashSet::new();
    paths.retain(|path| seen.insert(path.clone()));
}

/// A generated profile: its text, and the paths it names by parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The SBPL text, which names no path from outside.
    pub text: String,
    /// Each parameter's name and path, in the order they are passed.
    pub params: Vec<(String, PathBuf)>,
}

impl Profile {
    /// `sandbox-exec`'s arguments to run `command` under this profile:
    /// `-p <text>`, `-D NAME=path` for each parameter, `--`, the command.
    pub fn arguments(&self, command: &Path) -> Vec<OsString> {
        let mut args = vec![OsString::from("-p"), OsString::from(&self.text)];
        for (name, path) in &self.params {
            let mut definition = OsString::from(format!("{name}="));
            definition.push(path.as_os_str());
            args.push(OsString::from("-D"));
            args.push(definition);
        }
        args.push(OsString::from("--"));
        args.push(command.as_os_str().to_owned());
        args
    }
}

/// The profile for `inputs` (see the module docs). Pure: the same inputs
/// give the same text and parameters on every system.
pub fn profile(inputs: &Inputs) -> Profile {
    let mut params: Vec<(String, PathBuf)> = Vec::new();
    let mut named = |prefix: &str, paths: &[PathBuf]| -> Vec<String> {
        paths
            .iter()
            .enumerate()
            .map(|(index, path)| {
                let name = format!("{prefix}_{index}");
                params.push((name.clone(), path.clone()));
                format!("(param \"{name}\")")
            })
            .collect()
    };
    let writable = named("WRITABLE", &inputs.writable);
    let read_only = named("READ_ONLY", &inputs.read_only);
    let pinned = named("PINNED", &inputs.pinned);
    let unreadable = named("UNREADABLE", &inputs.unreadable);
    let readable = named("READABLE", &inputs.readable);

    let mut text = String::from(
        "(version 1)\n\
         ; lathe's command sandbox: what is not denied below is allowed, as on Linux.\n\
         (allow default)\n",
    );
    text.push_str(
        "; Writes only beneath the roots, the temp directories and the writable paths, and to devices.\n\
         (deny file-write*\n    (require-all\n",
    );
    for path in &writable {
        text.push_str(&format!("        (require-not (subpath {path}))\n"));
    }
    for filter in ALWAYS_WRITABLE {
        text.push_str(&format!("        (require-not {filter})\n"));
    }
    text.push_str("    ))\n");
    if !read_only.is_empty() {
        text.push_str("; What makes git or lathe run something later is read-only.\n(deny file-write*\n");
        for path in &read_only {
            text.push_str(&format!("    (literal {path}) (subpath {path})\n"));
        }
        text.push_str(")\n");
    }
    if !pinned.is_empty() {
        text.push_str("; The folders holding them are not renamed or removed.\n(deny file-write*\n");
        for path in &pinned {
            text.push_str(&format!("    (literal {path})\n"));
        }
        text.push_str(")\n");
    }
    if !unreadable.is_empty() {
        text.push_str(
            "; Credentials and the denied paths are unreadable, unless inside a root.\n\
             (deny file-read*\n    (require-all\n        (require-any\n",
        );
        for path in &unreadable {
            text.push_str(&format!("            (subpath {path})\n"));
        }
        text.push_str("        )\n");
        for path in &readable {
            text.push_str(&format!("        (require-not (subpath {path}))\n"));
        }
        text.push_str("    ))\n");
    }
    if !inputs.network {
        text.push_str(
            "; No network: no IP connection, datagram or listener (TCP and UDP); Unix sockets stay.\n\
             (deny network-outbound (remote ip \"*:*\"))\n\
             (deny network-bind (local ip \"*:*\"))\n",
        );
    }
    text.push_str(
        "; No signal reaches a process outside the sandbox.\n(deny signal (require-not (target same-sandbox)))\n",
    );
    Profile { text, params }
}

#[cfg(target_os = "macos")]
pub use macos::{apply, launch_prefix, namespace_keeper, probe_here, status, tcp_rules, trampoline_args};

#[cfg(target_os = "macos")]
mod macos {
    //! Running `sandbox-exec`: the probe, the launch.

    use std::ffi::OsString;
    use std::path::Path;
    use std::sync::OnceLock;

    use super::{Inputs, SANDBOX_EXEC, profile};
    use crate::platform::sandbox::{Enforcement, Findings, SandboxError, SandboxPolicy, Status};
    use crate::platform::settings::SandboxSettings;

    /// Why the trampoline has nothing to put on here.
    const APPLIED_BEFORE: &str =
        "on macOS the sandbox is put on by /usr/bin/sandbox-exec before lathe's trampoline starts";

    /// What this machine enforces: Seatbelt, when `sandbox-exec` runs both
    /// probe profiles; else nothing, and why. `LATHE_SANDBOX_UNAVAILABLE`
    /// naming any part turns the whole of it off (Seatbelt has no parts).
    pub fn status(settings: &SandboxSettings, trampoline: Option<&Path>) -> Status {
        if trampoline.is_none() {
            return Status::unavailable(crate::platform::sandbox::UNKNOWN_TRAMPOLINE);
        }
        if !crate::platform::sandbox::SandboxPart::forced_off_by(settings).is_empty() {
            return Status::unavailable(crate::platform::sandbox::forced_off_why(settings));
        }
        static PROBED: OnceLock<Result<(), String>> = OnceLock::new();
        match PROBED.get_or_init(probe) {
            Ok(()) => Status {
                enforcement: Enforcement::Full,
                detail: format!("Seatbelt ({SANDBOX_EXEC}): fully enforced"),
                missing: Vec::new(),
            },
            Err(why) => Status::unavailable(why.clone()),
        }
    }

    /// Runs `sandbox-exec` with a profile allowing everything, then with a
    /// generated one holding every kind of rule (so that a profile this
    /// system's Seatbelt does not accept is found here, not at a command).
    fn probe() -> Result<(), String> {
        let allow_all =
            [OsString::from("-p"), OsString::from("(version 1)(allow default)"), OsString::from("/usr/bin/true")];
        run(&allow_all, "a profile allowing everything")?;
        let temp = crate::platform::authority::Target::of(&std::env::temp_dir()).real;
        let sample = Inputs {
            writable: vec![temp.clone()],
            read_only: vec![temp.join(".git/hooks")],
            pinned: vec![temp.join(".git")],
            unreadable: vec![temp.join(".ssh")],
            readable: vec![temp.join("project")],
            network: false,
        };
        run(&profile(&sample).arguments(Path::new("/usr/bin/true")), "lathe's profile")
    }

    fn run(args: &[OsString], what: &str) -> Result<(), String> {
        let output = std::process::Command::new(SANDBOX_EXEC)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .output();
        match output {
            Ok(output) if output.status.success() => Ok(()),
            Ok(output) => {
                let said = String::from_utf8_lossy(&output.stderr);
                let said = said.lines().next().unwrap_or_default().chars().take(200).collect::<String>();
                Err(format!("{SANDBOX_EXEC} refused {what} ({}: {said})", output.status))
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                Err(format!("{SANDBOX_EXEC} is missing (Seatbelt is the macOS sandbox lathe uses)"))
            }
            Err(err) => Err(format!("cannot start {SANDBOX_EXEC}: {err}")),
        }
    }

    /// Landlock's TCP rules are Linux's: never here.
    pub fn tcp_rules(_settings: &SandboxSettings, _trampoline: Option<&Path>) -> bool {
        false
    }

    /// `sandbox-exec -p <profile> -D NAME=path... -- <trampoline>`.
    pub fn launch_prefix(policy: &SandboxPolicy, trampoline: &Path) -> (OsString, Vec<OsString>) {
        let profile = profile(&Inputs::of(policy));
        (OsString::from(SANDBOX_EXEC), profile.arguments(trampoline))
    }

    /// Seatbelt needs no mount namespace.
    pub fn namespace_keeper() -> Option<String> {
        None
    }

    /// The trampoline puts nothing on: it already runs in the sandbox.
    pub fn trampoline_args(_policy: &SandboxPolicy) -> Vec<OsString> {
        Vec::new()
    }

    /// The trampoline puts nothing on here; asked to, it refuses to run the
    /// command rather than run it unconfined.
    pub fn apply(_policy: &SandboxPolicy) -> Result<(), SandboxError> {
        Err(SandboxError::NotHere(APPLIED_BEFORE))
    }

    /// The trampoline's probe mode tries Linux's parts, which macOS lacks.
    pub fn probe_here() -> Findings {
        Findings {
            landlock: Err(APPLIED_BEFORE.to_owned()),
            seccomp: Err(APPLIED_BEFORE.to_owned()),
            namespaces: Err(APPLIED_BEFORE.to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file name no profile text may hold: quotes, parentheses, a
    /// newline, SBPL of its own, a regex's quote.
    const HOSTILE: &str = "/Users/u/x\") (allow default)\n(deny \"#\";y";

    fn inputs(network: bool) -> Inputs {
        let paths = |list: &[&str]| list.iter().map(PathBuf::from).collect::<Vec<_>>();
        Inputs {
            writable: paths(&["/Users/u/proj", "/private/var/folders/xy/T", HOSTILE]),
            read_only: paths(&["/Users/u/proj/.git/hooks", "/Users/u/proj/.lathe"]),
            pinned: paths(&["/Users/u/proj/.git"]),
            unreadable: paths(&["/Users/u/.ssh", "/Users/u/.config/gh"]),
            readable: paths(&["/Users/u/proj"]),
            network,
        }
    }

    /// The whole profile for a session with the network off, as
    /// `sandbox-exec` gets it (issue 26's golden test).
    const GOLDEN: &str = r##"(version 1)
; lathe's command sandbox: what is not denied below is allowed, as on Linux.
(allow default)
; Writes only beneath the roots, the temp directories and the writable paths, and to devices.
(deny file-write*
    (require-all
        (require-not (subpath (param "WRITABLE_0")))
        (require-not (subpath (param "WRITABLE_1")))
        (require-not (subpath (param "WRITABLE_2")))
        (require-not (subpath "/private/tmp"))
        (require-not (literal "/dev/null"))
        (require-not (literal "/dev/zero"))
        (require-not (literal "/dev/tty"))
        (require-not (literal "/dev/ptmx"))
        (require-not (regex #"^/dev/ttys[0-9]+$"))
        (require-not (subpath "/dev/fd"))
        (require-not (literal "/dev/dtracehelper"))
    ))
; What makes git or lathe run something later is read-only.
(deny file-write*
    (literal (param "READ_ONLY_0")) (subpath (param "READ_ONLY_0"))
    (literal (param "READ_ONLY_1")) (subpath (param "READ_ONLY_1"))
)
; The folders holding them are not renamed or removed.
(deny file-write*
    (literal (param "PINNED_0"))
)
; Credentials and the denied paths are unreadable, unless inside a root.
(deny file-read*
    (require-all
        (require-any
            (subpath (param "UNREADABLE_0"))
            (subpath (param "UNREADABLE_1"))
        )
        (require-not (subpath (param "READABLE_0")))
    ))
; No network: no IP connection, datagram or listener (TCP and UDP); Unix sockets stay.
(deny network-outbound (remote ip "*:*"))
(deny network-bind (local ip "*:*"))
; No signal reaches a process outside the sandbox.
(deny signal (require-not (target same-sandbox)))
"##;

    #[test]
    fn the_profile_is_the_linux_policy() {
        let generated = profile(&inputs(false));
        assert_eq!(generated.text, GOLDEN);
        let params: Vec<(&str, &Path)> =
            generated.params.iter().map(|(name, path)| (name.as_str(), path.as_path())).collect();
        assert_eq!(
            params,
            [
                ("WRITABLE_0", Path::new("/Users/u/proj")),
                ("WRITABLE_1", Path::new("/private/var/folders/xy/T")),
                ("WRITABLE_2", Path::new(HOSTILE)),
                ("READ_ONLY_0", Path::new("/Users/u/proj/.git/hooks")),
                ("READ_ONLY_1", Path::new("/Users/u/proj/.lathe")),
                ("PINNED_0", Path::new("/Users/u/proj/.git")),
                ("UNREADABLE_0", Path::new("/Users/u/.ssh")),
                ("UNREADABLE_1", Path::new("/Users/u/.config/gh")),
                ("READABLE_0", Path::new("/Users/u/proj")),
            ]
        );
        // The network on: the same profile without its two network rules.
        let online = profile(&inputs(true)).text;
        assert!(!online.contains("network"), "{online}");
        let rules = |text: &str| text.lines().filter(|line| !line.starts_with(';')).count();
        assert_eq!(rules(&online) + 2, rules(GOLDEN));
        // Nothing to protect or deny: only the write and signal rules.
        let bare = profile(&Inputs { writable: vec![PathBuf::from("/w")], network: true, ..Inputs::default() }).text;
        assert!(!bare.contains("READ_ONLY") && !bare.contains("PINNED") && !bare.contains("file-read"), "{bare}");
    }

    /// Paths reach `sandbox-exec` only as `-D NAME=path`, whatever they
    /// hold: the text never quotes one, and stays balanced.
    #[test]
    fn hostile_names_are_only_parameters() {
        let generated = profile(&inputs(false));
        for (_, path) in &generated.params {
            let path = path.to_string_lossy();
            assert!(!generated.text.contains(path.as_ref()), "{path:?} is in the text");
        }
        assert!(!generated.text.contains("Users"), "no path is quoted into SBPL");
        assert_eq!(generated.text.matches('(').count(), generated.text.matches(')').count());
        assert_eq!(generated.text.matches("(allow").count(), 1, "the one allow is the default");

        let args = generated.arguments(Path::new("/opt/lathe (x)\n"));
        let args: Vec<String> = args.iter().map(|arg| arg.to_string_lossy().into_owned()).collect();
        assert_eq!(args[..2], ["-p".to_owned(), GOLDEN.to_owned()]);
        let definitions: Vec<&str> = args[2..args.len() - 2]
            .chunks(2)
            .map(|pair| {
                assert_eq!(pair[0], "-D");
                pair[1].as_str()
            })
            .collect();
        assert_eq!(definitions.len(), generated.params.len());
        assert_eq!(definitions[2], format!("WRITABLE_2={HOSTILE}"));
        assert_eq!(definitions[0], "WRITABLE_0=/Users/u/proj");
        assert_eq!(args[args.len() - 2..], ["--".to_owned(), "/opt/lathe (x)\n".to_owned()]);
    }

    /// A session's inputs come from its policy and the disk: its roots and
    /// writable paths as they really are, a root's protected git parts
    /// (the Linux mounts' list), the credentials beneath the home.
    #[test]
    fn a_sessions_inputs() {
        let top = tempfile::tempdir().unwrap();
        let real = |path: &Path| crate::platform::authority::Target::of(path).real;
        let top = real(top.path());
        let (root, temp, home) = (top.join("proj"), top.join("tmp"), top.join("home"));
        for dir in [root.join(".git/hooks"), root.join(".git/objects"), temp.clone(), home.join(".ssh")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
        let policy = SandboxPolicy::new(vec![temp.clone()], false)
            .with_roots(vec![root.clone()])
            .denying_reads(Some(home.clone()), vec![top.join("secret")]);
        let inputs = Inputs::of(&policy);
        assert_eq!(inputs.writable, [root.clone(), temp]);
        assert_eq!(inputs.readable, std::slice::from_ref(&root));
        assert!(!inputs.network);
        for part in [".git/hooks", ".git/config", ".git/info"] {
            assert!(inputs.read_only.contains(&real(&root.join(part))), "{part}: {:?}", inputs.read_only);
        }
        assert_eq!(inputs.pinned, [real(&root.join(".git"))]);
        for denied in [home.join(".ssh"), home.join(".aws"), top.join("secret")] {
            assert!(inputs.unreadable.contains(&denied), "{}: {:?}", denied.display(), inputs.unreadable);
        }
        // Without the protected parts (a policy leaving them out), none.
        let without = Inputs::of(&policy.clone().without(&[SandboxPart::Namespaces]));
        assert!(without.read_only.is_empty() && without.pinned.is_empty());
    }
}
