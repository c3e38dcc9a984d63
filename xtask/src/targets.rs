//! The targets a release is built for: each one's registry platform, archive
//! format, and how and where it is built.

/// How an archive is packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `.tar.gz`: Linux and macOS.
    TarGz,
    /// `.zip`: Windows.
    Zip,
}

impl Format {
    /// The file name's ending.
    pub fn extension(self) -> &'static str {
        match self {
            Format::TarGz => ".tar.gz",
            Format::Zip => ".zip",
        }
    }
}

/// What builds a target, and on which host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builder {
    /// `cargo zigbuild` on a Linux host: zig (PyPI `ziglang`) as the C
    /// compiler and linker, musl from zig; a static binary.
    Zig,
    /// `cargo build` on a host of this OS (`std::env::consts::OS`): the
    /// release workflow's native runners.
    Native(&'static str),
    /// `cargo build` on a Linux host with Debian's mingw-w64 as the C
    /// compiler and linker (rustc's default linker for the target).
    Mingw,
}

/// One release target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The Rust target triple.
    pub triple: &'static str,
    /// The ACP registry's platform key.
    pub platform: &'static str,
    /// The archive format.
    pub format: Format,
    /// How it is built.
    pub builder: Builder,
    /// `None` when lathe builds for it; else why not yet. Such a target is
    /// listed and skipped unless `--include-unready` asks to try it.
    pub unready: Option<&'static str>,
}

/// Why the macOS and Windows MSVC targets are skipped today.
const PLATFORM_ISSUE: &str = "not yet proven on its own system (issue 26: linted from Linux, \
     the Windows code run only as the mingw build under wine, never on a Mac or by MSVC); \
     the release workflow builds it on its runner; pass --include-unready to try";

/// Every target, in the order the registry lists platforms. When two
/// targets give one platform (Windows x86_64 from MSVC and from mingw), the
/// first listed is the one the registry entry names.
pub const TARGETS: &[Target] = &[
    Target {
        triple: "aarch64-apple-darwin",
        platform: "darwin-aarch64",
        format: Format::TarGz,
        builder: Builder::Native("macos"),
        unready: Some(PLATFORM_ISSUE),
    },
    Target {
        triple: "x86_64-apple-darwin",
        platform: "darwin-x86_64",
        format: Format::TarGz,
        builder: Builder::Native("macos"),
        unready: Some(PLATFORM_ISSUE),
    },
    Target {
        triple: "aarch64-unknown-linux-musl",
        platform: "linux-aarch64",
        format: Format::TarGz,
        builder: Builder::Zig,
        unready: None,
    },
    Target {
        triple: "x86_64-unknown-linux-musl",
        platform: "linux-x86_64",
        format: Format::TarGz,
        builder: Builder::Zig,
        unready: None,
    },
    Target {
        triple: "aarch64-pc-windows-msvc",
        platform: "windows-aarch64",
        format: Format::Zip,
        builder: Builder::Native("windows"),
        unready: Some(PLATFORM_ISSUE),
    },
    Target {
        triple: "x86_64-pc-windows-msvc",
        platform: "windows-x86_64",
        format: Format::Zip,
        builder: Builder::Native("windows"),
        unready: Some(PLATFORM_ISSUE),
    },
    // What this Linux host builds for Windows (mingw-w64's C compiler and
    // linker, msvcrt.dll rather than MSVC's runtime) and runs under wine for
    // `cargo xtask check`. Users' archives
    // are the -msvc ones above, built on Windows runners by the release
    // workflow; this one stands in for windows-x86_64 only in an entry made
    // without them (a local `cargo xtask dist`).
    Target {
        triple: "x86_64-pc-windows-gnu",
        platform: "windows-x86_64",
        format: Format::Zip,
        builder: Builder::Mingw,
        unready: None,
    },
];

impl Target {
    /// The target with this triple.
    pub fn find(triple: &str) -> Option<&'static Target> {
        TARGETS.iter().find(|target| target.triple == triple)
    }

    /// The executable's name in the archive.
    pub fn exe(&self) -> &'static str {
        if self.is_windows() { "lathe.exe" } else { "lathe" }
    }

    /// Whether it is a Windows target.
    pub fn is_windows(&self) -> bool {
        self.triple.contains("-windows-")
    }

    /// Whether its binary is static (no dynamic loader, no shared libraries).
    pub fn is_static(&self) -> bool {
        self.triple.ends_with("-linux-musl")
    }

    /// Whether its C compiler takes gcc/clang flags (`-ffile-prefix-map`).
    pub fn gcc_like_cc(&self) -> bool {
        !self.triple.ends_with("-msvc")
    }

    /// The archive's file name for `version`.
    pub fn archive_name(&self, version: &str) -> String {
        format!("lathe-{version}-{}{}", self.triple, self.format.extension())
    }

    /// Why this host cannot build it, if it cannot (the tools are checked
    /// when the build starts).
    pub fn host_cannot_build(&self) -> Option<String> {
        let host = std::env::consts::OS;
        match self.builder {
            Builder::Zig | Builder::Mingw if host != "linux" => {
                Some(format!("built on a Linux host (this one is {host})"))
            }
            Builder::Native(os) if host != os => Some(format!("built on a {os} host (this one is {host})")),
            Builder::Zig | Builder::Mingw | Builder::Native(_) => None,
        }
    }

    /// What runs its binaries on this host when they do not run natively:
    /// wine for the mingw build on Linux (Debian's wine 8, with the
    /// `bcryptprimitives.dll` shim `.ci/install-cross windows` puts in its
    /// prefix).
    pub fn runner_here(&self) -> Option<&'static str> {
        (self.builder == Builder::Mingw && std::env::consts::OS == "linux" && std::env::consts::ARCH == "x86_64")
            .then_some("wine")
    }

    /// Whether this host runs its binaries (for the checks on an archive).
    pub fn runs_here(&self) -> bool {
        let (arch, os) = (std::env::consts::ARCH, std::env::consts::OS);
        let target_os = match self.builder {
            Builder::Zig => "linux",
            Builder::Native(os) => os,
            Builder::Mingw => "windows",
        };
        self.triple.starts_with(&format!("{arch}-")) && target_os == os
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registry_platform_has_a_target_and_names_are_distinct() {
        for platform in
            ["darwin-aarch64", "darwin-x86_64", "linux-aarch64", "linux-x86_64", "windows-aarch64", "windows-x86_64"]
        {
            assert!(TARGETS.iter().any(|t| t.platform == platform), "{platform}");
        }
        let mut names: Vec<String> = TARGETS.iter().map(|t| t.archive_name("1.2.3")).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), TARGETS.len());
        assert_eq!(
            Target::find("x86_64-unknown-linux-musl").map(|t| t.archive_name("1.2.3")),
            Some("lathe-1.2.3-x86_64-unknown-linux-musl.tar.gz".to_owned())
        );
        assert_eq!(Target::find("x86_64-pc-windows-msvc").map(Target::exe), Some("lathe.exe"));
    }

    #[test]
    fn the_mingw_build_is_run_under_wine_on_linux() {
        let gnu = Target::find("x86_64-pc-windows-gnu").unwrap();
        assert_eq!(gnu.unready, None, "lathe builds for Windows (issue 26's platform layer)");
        assert_eq!(gnu.format, Format::Zip);
        let linux_x86_64 = std::env::consts::OS == "linux" && std::env::consts::ARCH == "x86_64";
        assert_eq!(gnu.runner_here(), linux_x86_64.then_some("wine"));
        assert_eq!(Target::find("x86_64-pc-windows-msvc").unwrap().runner_here(), None);
        // The registry entry names the MSVC archive for windows-x86_64 when both are there.
        let first = TARGETS.iter().find(|t| t.platform == "windows-x86_64").unwrap();
        assert_eq!(first.triple, "x86_64-pc-windows-msvc");
    }

    /// `.github/workflows/release.yml`'s build matrix has a row for every
    /// registry platform, each a target of this table (the first for its
    /// platform, as the entry names, or a later one standing in while the
    /// first is unready: the mingw build for windows-x86_64), and its
    /// `ready` says what `unready` says: a row marked ready that dist
    /// skips, or the other way round, would publish a release without that
    /// platform or fail it.
    #[test]
    fn the_release_matrix_is_the_target_table() {
        let workflow = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.github/workflows/release.yml"),
        )
        .unwrap();
        let field = |row: &str, key: &str| -> String {
            let rest = row.split(&format!("{key}: ")).nth(1).unwrap_or_else(|| panic!("{key} in {row}"));
            rest.split([',', ' ', '}']).next().unwrap().to_owned()
        };
        let rows: Vec<(String, bool)> = workflow
            .lines()
            .map(str::trim)
            .filter(|line| line.starts_with("- { os: "))
            .map(|row| (field(row, "target"), field(row, "ready") == "true"))
            .collect();
        let mut platforms: Vec<&str> = rows
            .iter()
            .map(|(triple, ready)| {
                let target = Target::find(triple).unwrap_or_else(|| panic!("{triple} is not in TARGETS"));
                assert_eq!(*ready, target.unready.is_none(), "{triple}: ready in release.yml vs unready in TARGETS");
                let first = TARGETS.iter().find(|t| t.platform == target.platform).unwrap();
                assert!(
                    first.triple == target.triple || first.unready.is_some(),
                    "{} is built from {}",
                    target.platform,
                    first.triple
                );
                target.platform
            })
            .collect();
        platforms.sort_unstable();
        platforms.dedup();
        let mut expected: Vec<&str> = TARGETS.iter().map(|t| t.platform).collect();
        expected.sort_unstable();
        expected.dedup();
        assert_eq!(platforms, expected);
    }

    /// Cargo.toml's `[package.metadata.binstall]` names, for every target,
    /// the archive `cargo xtask dist` writes, at the URL the registry entry
    /// uses; and the binary where the archive has it.
    #[test]
    fn binstall_metadata_names_the_dist_archives() {
        let manifest =
            std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml")).unwrap();
        let value = |key: &str, after: &str| -> Option<String> {
            let section = manifest.split(after).nth(1)?;
            let section = section.split("\n[").next()?;
            let line = section.lines().find(|line| line.starts_with(&format!("{key} = ")))?;
            Some(line.split_once(" = ")?.1.trim_matches('"').to_owned())
        };
        let binstall = "[package.metadata.binstall]";
        let url = value("pkg-url", binstall).unwrap();
        assert_eq!(value("bin-dir", binstall).as_deref(), Some("{ bin }{ binary-ext }"));
        let default_format = value("pkg-fmt", binstall).unwrap();
        for target in TARGETS {
            let format = value("pkg-fmt", &format!("[package.metadata.binstall.overrides.{}]", target.triple))
                .unwrap_or_else(|| default_format.clone());
            let suffix = match format.as_str() {
                "tgz" => ".tar.gz",
                "zip" => ".zip",
                other => panic!("pkg-fmt {other}"),
            };
            let expanded = url
                .replace("{ repo }", "https://github.com/example/lathe")
                .replace("{ version }", "1.2.3")
                .replace("{ target }", target.triple)
                .replace("{ archive-suffix }", suffix);
            let base = crate::registry::default_base_url("https://github.com/example/lathe", "1.2.3");
            assert_eq!(expanded, format!("{base}/{}", target.archive_name("1.2.3")), "{}", target.triple);
        }
    }
}
