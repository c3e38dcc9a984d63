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
//! Event-driven: the keeper thread sleeps in `poll(2)` on its socket and
//! on a pidfd of each sender, and closes a descriptor the moment its
//! sender has exited (the pidfd turns readable once the exit, and the
//! namespace's release in it, is over).
//!
//! Best effort: where the socket cannot be made or reached, the trampoline
//! goes on and its own exit pays the grace period. A sandboxed command
//! cannot reach the socket (Landlock scopes abstract Unix sockets to the
//! sandbox from ABI 6). Whatever else reaches it (any local process can
//! send to an abstract socket) gets little: only a sender of lathe's own
//! user, one descriptor per message, and only a mount namespace's, are
//! held, and at most [`MAX_HELD`] of them, the oldest closed first (each
//! is closed anyway when its sender exits).

use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::OnceLock;

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage,
    SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

/// Namespaces held at most (each with its sender's pidfd: twice as many
/// descriptors). Sandboxed commands running at once beyond this many pay
/// their namespace's teardown at their own exit, as without a keeper.
const MAX_HELD: usize = 128;

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
        std::thread::Builder::new().name("ns-keeper".to_owned()).spawn(move || serve(&socket)).ok()?;
        Some(Keeper { name })
    }
}

/// The namespaces held: each with a pidfd of the process that sent it.
#[derive(Default)]
struct Held {
    held: VecDeque<(OwnedFd, OwnedFd)>,
}

impl Held {
    /// Holds `namespace` while the process `sender` lives; nothing when it
    /// is gone already.
    fn hold(&mut self, sender: rustix::process::Pid, namespace: OwnedFd) {
        let Ok(pidfd) = rustix::process::pidfd_open(sender, rustix::process::PidfdFlags::empty()) else { return };
        self.held.push_back((pidfd, namespace));
        while self.held.len() > MAX_HELD {
            self.held.pop_front();
        }
    }

    /// Waits for a message on `socket` or a sender's exit (at most
    /// `timeout`, for ever without one), closes what exited senders sent,
    /// and says whether `socket` has something to read.
    fn wait(&mut self, socket: &OwnedFd, timeout: Option<&rustix::time::Timespec>) -> bool {
        use rustix::event::{PollFd, PollFlags};
        let ready: Vec<bool> = {
            let mut fds: Vec<PollFd<'_>> = std::iter::once(PollFd::new(socket, PollFlags::IN))
                .chain(self.held.iter().map(|(pidfd, _)| PollFd::new(pidfd, PollFlags::IN)))
                .collect();
            if rustix::event::poll(&mut fds, timeout).is_err() {
                return false;
            }
            fds.iter().map(|fd| !fd.revents().is_empty()).collect()
        };
        let mut exited = ready.iter().skip(1);
        self.held.retain(|_| !exited.next().copied().unwrap_or(false));
        ready.first().copied().unwrap_or(false)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.held.len()
    }
}

/// Receives namespaces and closes each once its sender is gone.
fn serve(socket: &OwnedFd) {
    let mut held = Held::default();
    let uid = rustix::process::getuid();
    loop {
        if held.wait(socket, None) {
            receive(socket, uid, &mut held);
        }
    }
}

/// Reads one message from `socket`: holds the mount namespace in it if it
/// is one, its only descriptor, sent by a process of the user `uid`.
/// Anything else is closed at once.
fn receive(socket: &OwnedFd, uid: rustix::process::Uid, held: &mut Held) {
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1), ScmCredentials(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let flags = RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT;
    if rustix::net::recvmsg(socket, &mut [IoSliceMut::new(&mut byte)], &mut control, flags).is_err() {
        return;
    }
    let mut sender = None;
    let mut fds = Vec::new();
    for message in control.drain() {
        match message {
            RecvAncillaryMessage::ScmRights(received) => fds.extend(received),
            RecvAncillaryMessage::ScmCredentials(credentials) => {
                sender = (credentials.uid == uid).then_some(credentials.pid);
            }
            _ => {}
        }
    }
    if let (Some(sender), [_]) = (sender, fds.as_slice())
        && let Some(namespace) = fds.pop()
        && is_mount_namespace(&namespace)
    {
        held.hold(sender, namespace);
    }
}

/// Whether `fd` is a mount namespace's (its link in `/proc/self/fd` reads `mnt:[...]`).
fn is_mount_namespace(fd: &OwnedFd) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .is_ok_and(|link| link.as_os_str().as_encoded_bytes().starts_with(b"mnt:["))
}

/// In the trampoline: hands the mount namespace this process is in to the
/// keeper named `name`. Best effort; errors are ignored.
pub fn hand_over(name: &str) {
    let namespace = rustix::fs::open(
        "/proc/self/ns/mnt",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    );
    if let Ok(namespace) = namespace {
        let _ = send(name, &namespace);
    }
}

/// Sends `fd` to the keeper named `name`.
fn send(name: &str, fd: &OwnedFd) -> rustix::io::Result<()> {
    let socket = rustix::net::socket_with(AddressFamily::UNIX, SocketType::DGRAM, SocketFlags::CLOEXEC, None)?;
    let address = SocketAddrUnix::new_abstract_name(name.as_bytes())?;
    let fds = [fd.as_fd()];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    control.push(SendAncillaryMessage::ScmRights(&fds));
    rustix::net::sendmsg_addr(&socket, &address, &[IoSlice::new(b"n")], &mut control, SendFlags::DONTWAIT)?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// How many descriptors of this process are mount namespaces'.
    fn namespaces_open() -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|entry| {
                std::fs::read_link(entry.path()).is_ok_and(|link| link.to_string_lossy().starts_with("mnt:"))
            })
            .count()
    }

    /// A namespace handed over is held while its sender lives; what is not
    /// a mount namespace is not held.
    #[test]
    fn handed_namespaces_are_held_while_the_sender_lives() {
        let Some(keeper) = Keeper::get() else {
            eprintln!("NOTE: no keeper socket here; nothing to check");
            return;
        };
        // A file first: refused (the keeper reads its messages in order).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("not-a-namespace");
        std::fs::write(&path, "x").unwrap();
        send(keeper.name(), &OwnedFd::from(std::fs::File::open(&path).unwrap())).unwrap();
        // Handed from this process, which lives on: the namespace file stays open in the keeper.
        let before = namespaces_open();
        hand_over(keeper.name());
        let deadline = Instant::now() + Duration::from_secs(10);
        while namespaces_open() == before && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(namespaces_open(), before + 1, "the keeper holds it");
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(namespaces_open(), before + 1, "still held: its sender lives");
        let file_held = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .any(|entry| std::fs::read_link(entry.path()).is_ok_and(|link| link == path));
        assert!(!file_held, "a file is not held");
    }

    /// A sender's namespace is closed when the sender exits, without
    /// waiting for anything else to happen; one from a process that is
    /// gone already is not held; the oldest go first beyond the limit.
    #[test]
    fn namespaces_are_closed_when_their_sender_exits() {
        let (socket, _other) = std::os::unix::net::UnixDatagram::pair().unwrap();
        let socket = OwnedFd::from(socket);
        // Any descriptor does here (receive() checks the kind); not a
        // namespace, so that the other test's count stays its own.
        let namespace = || OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
        let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
        let mut held = Held::default();
        held.hold(pid, namespace());
        let now = rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 };
        assert!(!held.wait(&socket, Some(&now)));
        assert_eq!(held.len(), 1, "held while the sender lives");
        child.kill().unwrap();
        child.wait().unwrap();
        // Reaped: a poll without a timeout returns at once.
        held.wait(&socket, None);
        assert_eq!(held.len(), 0, "closed once the sender is gone");
        held.hold(pid, namespace());
        assert_eq!(held.len(), 0, "a sender gone already");
        let me = rustix::process::getpid();
        for _ in 0..MAX_HELD + 3 {
            held.hold(me, namespace());
        }
        assert_eq!(held.len(), MAX_HELD);
    }
}
