//! The seccomp filter that takes the network away from a sandboxed command
//! beyond what Landlock can (issue 25): with it, `socket(2)` creates Unix
//! sockets only, so no UDP (DNS included), raw, packet, netlink or other
//! socket can be made, and `io_uring_setup(2)` is refused, since an
//! io_uring can make sockets without calling `socket(2)`. Landlock's TCP
//! rules stay as the second lock on TCP.
//!
//! Measured against a fresh network namespace for the same job (see
//! BENCHMARKS.md, "The command sandbox's start-up cost"): the filter costs
//! microseconds; a network namespace costs far more per command, and its
//! teardown more again in the kernel after the command. The filter also
//! needs no user namespace, so it holds where those are restricted.
//!
//! Built with seccompiler (Firecracker's), which compiles the rules into a
//! BPF program for this architecture and installs it: no `unsafe` here.
//! Its program kills a process that makes a system call of another
//! architecture (a 32-bit x86 program on x86-64), which could otherwise
//! call `socketcall(2)` unseen. x32 system calls (the same numbers with bit
//! 30 set) are refused like their 64-bit twins. Architectures seccompiler
//! does not know (it knows x86-64, AArch64 and RISC-V 64) get no filter,
//! and the sandbox says so.

use std::collections::BTreeMap;

use nix::libc;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
};

/// The x32 ABI's bit in a system call number (x86-64 only).
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

/// The filter as a BPF program for this architecture.
fn program() -> Result<BpfProgram, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|_| format!("seccompiler has no filters for {}", std::env::consts::ARCH))?;
    let failed = |err: seccompiler::BackendError| format!("building the seccomp filter: {err}");
    let not_unix =
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, libc::AF_UNIX as u64).map_err(failed)?;
    let socket = vec![SeccompRule::new(vec![not_unix]).map_err(failed)?];
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_socket, socket.clone());
    // An empty list matches every call.
    rules.insert(libc::SYS_io_uring_setup, Vec::new());
    #[cfg(target_arch = "x86_64")]
    {
        rules.insert(libc::SYS_socket | X32_SYSCALL_BIT, socket);
        rules.insert(libc::SYS_io_uring_setup | X32_SYSCALL_BIT, Vec::new());
    }
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EACCES as u32), arch)
        .map_err(failed)?;
    filter.try_into().map_err(|err: seccompiler::BackendError| format!("compiling the seccomp filter: {err}"))
}

/// Installs the filter on the calling thread (and what it starts from now
/// on); sets `no_new_privs`, which it needs.
pub fn deny_sockets() -> Result<(), String> {
    let program = program()?;
    seccompiler::apply_filter(&program).map_err(|err| format!("installing the seccomp filter: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a thread with the filter: no UDP, TCP or netlink socket, no
    /// io_uring; Unix sockets and socket pairs as before.
    #[test]
    #[allow(clippy::unwrap_used)]
    fn only_unix_sockets_are_made() {
        let results = std::thread::spawn(|| -> Result<[Result<(), std::io::ErrorKind>; 4], String> {
            deny_sockets()?;
            let kind = |result: std::io::Result<()>| result.map_err(|err| err.kind());
            let unix_dir = tempfile::tempdir().unwrap();
            Ok([
                kind(std::net::UdpSocket::bind("127.0.0.1:0").map(drop)),
                kind(std::net::TcpListener::bind("127.0.0.1:0").map(drop)),
                kind(std::os::unix::net::UnixDatagram::pair().map(drop)),
                kind(std::os::unix::net::UnixListener::bind(unix_dir.path().join("s")).map(drop)),
            ])
        })
        .join()
        .unwrap();
        let results = match results {
            Ok(results) => results,
            Err(err) => {
                eprintln!("NOTE: no seccomp filter here ({err}); nothing to check");
                return;
            }
        };
        let denied = Err(std::io::ErrorKind::PermissionDenied);
        assert_eq!(results, [denied, denied, Ok(()), Ok(())]);
        // The test process itself is not filtered.
        assert!(std::net::UdpSocket::bind("127.0.0.1:0").is_ok());
    }
}
