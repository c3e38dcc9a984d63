//! lathe's terminal commands other than the front end itself: `lathe
//! sessions` (the store, from a shell), `lathe permissions` (the rules kept
//! beyond a session), `lathe init` (a config file from a preset) and `lathe
//! setup` (the same, asking which server, key and model). Each writes to the
//! `Write` it is given (the binary passes
//! stdout); none knows ACP.

pub mod init;
pub mod permissions;
pub mod sessions;
pub mod setup;
