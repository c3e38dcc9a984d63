//! The platform layer: everything that differs between the systems lathe
//! runs on, behind one seam per concern, so the rest of lathe never writes
//! `cfg(unix)` or `cfg(windows)`.
//!
//! This is the bottom floor: it imports nothing of lathe (the settings it is
//! given live in `settings`, which `config` builds). One module per concern; where the systems differ, one file per
//! family (`unix`, `windows`) beneath it, chosen by `cfg` at the leaves only
//! (the shape of tokio's `sys/` and `ignore`'s walkers).
//!
//! ```text
//! paths      path text: lexical normalisation, showing a path relative to a cwd
//! authority  the path authority: a path judged on its final target, touched
//!            on the object judged (handle-relative opens, no link followed)
//! stamp      a file's identity and change stamp (the session index, checkpoints)
//! private    files and folders only the user may read (sessions, traces)
//! files      room taken on disk (sparse files), advisory locks, opens that never block
//! sandbox    the command sandbox: a session's policy, what this system
//!            enforces of it (Landlock on Linux, Seatbelt on macOS, none on
//!            Windows), how a command is started in it
//! console    the front ends' plumbing: stdout's raw handle, interrupts
//! cpu        the CPU time a thread has used (the fetch tool's conversion budget)
//! folders    the config and data folders by the platform's convention
//! settings   what the config tells the sandbox and the process starter
//! testing    (tests only) links, FIFOs, modes where the system has them, else skipped
//! ```
//!
//! The process trees (`process`, from `child.rs`) and the shell (`shell`)
//! are issue 26's too.

pub mod authority;
pub mod console;
pub mod cpu;
pub mod files;
pub mod folders;
pub mod paths;
pub mod private;
pub mod process;
pub mod sandbox;
pub mod settings;
pub mod shell;
pub mod stamp;
#[cfg(test)]
pub mod testing;
