//! The path authority moved to [`crate::platform::authority`] (issue 26);
//! this name stays for the callers the Linux sandbox work (issue 25) is
//! rewriting (`permission.rs`, `tools/shell.rs`) until that lands, then goes.

pub use crate::platform::authority::*;
