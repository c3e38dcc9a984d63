//! Keeping a sandboxed command's mount namespace alive past its trampoline
//! (issue 25's start-up budget).
//!
//! A mount namespace is torn down when the last process in it exits, and
//! the teardown waits for an RCU grace period (milliseconds, more on a busy
//! machine) before that process's exit is reported to its parent: lathe
//! would wait for it after every sandboxed command. So the trampoline,
//! once it has entered its namespace and before it restricts itself, hands
//! lathe a descriptor of that namespace over an abstract Unix datagram
//! socket; the descriptor holds the namespace, so the trampoline's exit is
//! not the last reference. lathe's keeper thread closes it once the
//! process that sent it is gone, where the grace period delays nothing.
//!
//! Best effort: where the socket cannot be made or reached, the trampoline
//! goes on and its own exit pays the grace period. A sandboxed command
//! cannot reach the socket (Landlock scopes abstract Unix sockets to the
//! sandbox from ABI 6); whatever reaches it anyway can only make lathe hold
//! at most [`MAX_HELD`] descriptors, the oldest closed first.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::OnceLock;
use std::time::Duration;

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage,
    SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

/// Descriptors held at most.
const MAX_HELD: usize = 1024;

/// How often the keeper looks for senders that are gone, when nothing arrives.
const SWEEP: Duration = Duration::from_millis(500);

/// A process's keeper: the name of its socket.
#[derive(Debug)]
pub struct Keeper {
    name: String,
}

impl Keeper {
    /// This process's keeper, started on first use (a socket and a thread);
    /// `None` where it cannot be.
    pub fn get() -> Option<&'static Keeper> {
        static KEEPER: OnceLock<Option<Keeper>> = OnceLock::new();
        KEEPER.get_or_init(Keeper::start).as_ref()
    }

    /// The socket's name, for the trampoline's `--ns-keeper`.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn start() -> Option<Keeper> {
        let name = format!("lathe-ns-{}-{}", std::process::id(), uuid::Uuid::new_v4().simple());
        let socket =
            rustix::net::socket_with(AddressFamily::UNIX, SocketType::DGRAM, SocketFlags::CLOEXEC, None).ok()?;
        rustix::net::bind(&socket, &SocketAddrUnix::new_abstract_name(name.as_bytes()).ok()?).ok()?;
        // The kernel names each sender: its descriptor is held while it lives.
        rustix::net::sockopt::set_socket_passcred(&socket, true).ok()?;
        rustix::net::sockopt::set_socket_timeout(&socket, rustix::net::sockopt::Timeout::Recv, Some(SWEEP)).ok()?;
        std::thread::Builder::new().name("ns-keeper".to_owned()).spawn(move || serve(&socket)).ok()?;
        Some(Keeper { name })
    }
}

/// Receives descriptors and closes each once its sender is gone.
fn serve(socket: &OwnedFd) {
    let mut held: std::collections::VecDeque<(rustix::process::Pid, OwnedFd)> = std::collections::VecDeque::new();
    loop {
        let mut byte = [0u8; 1];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1), ScmCredentials(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let received =
            rustix::net::recvmsg(socket, &mut [IoSliceMut::new(&mut byte)], &mut control, RecvFlags::CMSG_CLOEXEC);
        if received.is_ok() {
            let mut sender = None;
            let mut fds = Vec::new();
            for message in control.drain() {
                match message {
                    RecvAncillaryMessage::ScmRights(received) => fds.extend(received),
                    RecvAncillaryMessage::ScmCredentials(credentials) => sender = Some(credentials.pid),
                    _ => {}
                }
            }
            if let Some(sender) = sender {
                held.extend(fds.into_iter().map(|fd| (sender, fd)));
            }
            while held.len() > MAX_HELD {
                held.pop_front();
            }
        }
        // A sender still exists while it is a zombie: its exit, which would
        // have torn the namespace down, is over by the time it is gone.
        held.retain(|(pid, _)| rustix::process::test_kill_process(*pid).is_ok());
    }
}

/// In the trampoline: hands the mount namespace this process is in to the
/// keeper named `name`. Best effort; errors are ignored.
pub fn hand_over(name: &str) {
    let handed = || -> rustix::io::Result<()> {
        let namespace = rustix::fs::open(
            "/proc/self/ns/mnt",
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        let socket = rustix::net::socket_with(AddressFamily::UNIX, SocketType::DGRAM, SocketFlags::CLOEXEC, None)?;
        let address = SocketAddrUnix::new_abstract_name(name.as_bytes())?;
        let fds = [namespace.as_fd()];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        control.push(SendAncillaryMessage::ScmRights(&fds));
        rustix::net::sendmsg_addr(&socket, &address, &[IoSlice::new(b"n")], &mut control, SendFlags::DONTWAIT)?;
        Ok(())
    };
    let _ = handed();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A descriptor handed over is held while its sender lives and closed
    /// once it is gone.
    #[test]
    #[allow(clippy::unwrap_used)]
    fn handed_descriptors_are_held_while_the_sender_lives() {
        let Some(keeper) = Keeper::get() else {
            eprintln!("NOTE: no keeper socket here; nothing to check");
            return;
        };
        // Handed from this process, which lives on: the namespace file stays open in the keeper.
        let count = || {
            std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .flatten()
                .filter(|entry| {
                    std::fs::read_link(entry.path()).is_ok_and(|link| link.to_string_lossy().starts_with("mnt:"))
                })
                .count()
        };
        let before = count();
        hand_over(keeper.name());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while count() == before && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(count(), before + 1, "the keeper holds it");
        std::thread::sleep(SWEEP * 2);
        assert_eq!(count(), before + 1, "still held: its sender lives");
    }
}
