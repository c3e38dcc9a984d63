//! The single integration-test binary: every suite links into it.

mod suite;
mod support;
