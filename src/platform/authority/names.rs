//! Names Windows would not give a file as spelled: the Win32 layer drops a
//! name's trailing dots and spaces (`.git.` opens `.git`), reads `name:x`
//! as the alternate data stream `x` of `name`, and opens a reserved device
//! name (`NUL`, `CON`, `COM1`..., with any extension: `nul.txt` is `NUL`)
//! instead of a file. A path with such a name would be judged as one thing
//! and touch another (a write to `.git.\hooks` lands in `.git\hooks`; a
//! write to `nul.txt` reports success and keeps nothing), so the authority
//! refuses it on Windows. Pure text: tested on every system, applied on
//! Windows only (a Unix file system takes every such name as it is).

#![cfg_attr(not(windows), allow(dead_code))]

use std::ffi::OsStr;

/// The device names Windows reserves in every folder (Microsoft's "Naming
/// Files, Paths, and Namespaces"), compared without case.
const RESERVED: [&str; 30] = [
    "CON", "PRN", "AUX", "NUL", "COM0", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8", "COM9", "COM¹",
    "COM²", "COM³", "LPT0", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9", "LPT¹", "LPT²",
    "LPT³",
];

/// Why Windows would not give a file named `name` what the name says, if
/// it would not. `.` and `..` are steps, not names, and pass.
pub fn windows_trouble(name: &OsStr) -> Option<&'static str> {
    let name = name.to_string_lossy();
    if name == "." || name == ".." {
        return None;
    }
    if name.ends_with('.') || name.ends_with(' ') {
        return Some("Windows drops a name's trailing dots and spaces, so the file would be another one");
    }
    if name.contains(':') {
        return Some("a `:` in a name names an alternate data stream on Windows, not a file");
    }
    // `nul.txt`, `NUL .tar.gz`: what comes before the first dot, spaces trimmed.
    let stem = name.split('.').next().unwrap_or_default().trim_end_matches(' ');
    let reserved = RESERVED.iter().any(|device| device.eq_ignore_ascii_case(stem) || *device == stem.to_uppercase());
    let console = ["CONIN$", "CONOUT$"].iter().any(|device| device.eq_ignore_ascii_case(&name));
    (reserved || console)
        .then_some("it is a device name Windows reserves (CON, PRN, AUX, NUL, COM0-9, LPT0-9), not a file")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_trailing_dots_and_streams_are_named() {
        for troubled in [
            "nul",
            "NUL",
            "nul.txt",
            "Nul.tar.gz",
            "con",
            "aux.rs",
            "com1",
            "LPT9.log",
            "com¹",
            "NUL .txt",
            "conin$",
            "CONOUT$",
        ] {
            assert!(windows_trouble(OsStr::new(troubled)).is_some_and(|why| why.contains("device")), "{troubled}");
        }
        for troubled in [".git.", "hooks ", "a.txt.", "x. "] {
            assert!(windows_trouble(OsStr::new(troubled)).is_some_and(|why| why.contains("trailing")), "{troubled}");
        }
        assert!(windows_trouble(OsStr::new("a.txt:secret")).is_some_and(|why| why.contains("stream")));
        for fine in
            [".", "..", ".git", "null", "nul_", "console.rs", "com10", "lpt", "auxiliary.txt", "my nul.txt", "a.b.c"]
        {
            assert_eq!(windows_trouble(OsStr::new(fine)), None, "{fine}");
        }
    }
}
