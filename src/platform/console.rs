//! The front ends' plumbing on the console: interrupts (the signals that ask
//! lathe to stop), a raw handle on stdout, and stdin waited on with a
//! timeout (the lines `lathe chat` reads while a turn runs).
//!
//! Unix: SIGINT, SIGTERM and SIGHUP; `poll(2)` and `read(2)` on stdin.
//! Windows: Ctrl-C, Ctrl-Break and the console window being closed (tokio's
//! `ctrl_c`, `ctrl_break`, `ctrl_close`); stdin cannot be waited on with a
//! timeout without unsafe code (`WaitForSingleObject` on the console
//! handle), so [`stdin_ready`] says it is unsupported there and lines typed
//! during a turn wait for its end.

use std::fs::File;
use std::time::Duration;

/// The interrupts this process listens to, each received as it comes.
pub struct Interrupts {
    listeners: Vec<sys::Listener>,
}

impl Interrupts {
    /// Listens to every interrupt the system has; `None` when none could
    /// be listened to (each failure is logged).
    pub fn listen() -> Option<Interrupts> {
        let listeners = sys::listeners();
        (!listeners.is_empty()).then_some(Interrupts { listeners })
    }

    /// Waits for the next interrupt, of any kind.
    pub async fn next(&mut self) {
        let waits = self.listeners.iter_mut().map(|listener| Box::pin(listener.recv()));
        futures_util::future::select_all(waits).await;
    }
}

/// Returns at the first interrupt (never, when none can be listened to).
pub async fn shutdown() {
    match Interrupts::listen() {
        Some(mut interrupts) => interrupts.next().await,
        None => std::future::pending().await,
    }
}

/// A handle on stdout of this process's own, for writes that skip std's
/// line buffering (the ACP writer batches and flushes itself).
pub fn raw_stdout() -> std::io::Result<File> {
    sys::raw_stdout()
}

/// What waiting on stdin found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdinReady {
    /// Something can be read (a read now does not block).
    Readable,
    /// Nothing came within the wait.
    Nothing,
    /// Hung up or failed: nothing more will come.
    Closed,
}

/// Waits up to `wait` for stdin to have something to read. Fails with
/// `ErrorKind::Unsupported` where stdin cannot be waited on (Windows).
pub fn stdin_ready(wait: Duration) -> std::io::Result<StdinReady> {
    sys::stdin_ready(wait)
}

/// Reads what stdin has into `buffer`, beneath std's buffering (so that
/// what [`stdin_ready`] saw is what is read, and nothing is kept back).
/// An interrupted read fails with `ErrorKind::Interrupted`.
pub fn read_stdin(buffer: &mut [u8]) -> std::io::Result<usize> {
    sys::read_stdin(buffer)
}

#[cfg(unix)]
mod sys {
    use std::fs::File;
    use std::os::fd::AsFd as _;

    use tokio::signal::unix::{Signal, SignalKind, signal};

    pub(super) struct Listener(Signal);

    impl Listener {
        pub(super) async fn recv(&mut self) {
            self.0.recv().await;
        }
    }

    pub(super) fn listeners() -> Vec<Listener> {
        let mut listeners = Vec::new();
        for kind in [SignalKind::interrupt(), SignalKind::terminate(), SignalKind::hangup()] {
            match signal(kind) {
                Ok(stream) => listeners.push(Listener(stream)),
                Err(err) => tracing::warn!(%err, "cannot listen for a signal"),
            }
        }
        listeners
    }

    pub(super) fn raw_stdout() -> std::io::Result<File> {
        Ok(File::from(std::io::stdout().as_fd().try_clone_to_owned()?))
    }

    pub(super) fn stdin_ready(wait: std::time::Duration) -> std::io::Result<super::StdinReady> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let stdin = std::io::stdin();
        let fd = stdin.as_fd();
        let tick = Timespec {
            tv_sec: i64::try_from(wait.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(wait.subsec_nanos()),
        };
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        match poll(&mut fds, Some(&tick)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => Ok(super::StdinReady::Nothing),
            Ok(_) if fds[0].revents().contains(PollFlags::IN) => Ok(super::StdinReady::Readable),
            Ok(_) => Ok(super::StdinReady::Closed),
            Err(err) => Err(err.into()),
        }
    }

    pub(super) fn read_stdin(buffer: &mut [u8]) -> std::io::Result<usize> {
        Ok(rustix::io::read(std::io::stdin().as_fd(), buffer)?)
    }
}

#[cfg(windows)]
mod sys {
    use std::fs::File;
    use std::os::windows::io::AsHandle as _;

    use tokio::signal::windows::{CtrlBreak, CtrlC, CtrlClose, ctrl_break, ctrl_c, ctrl_close};

    pub(super) enum Listener {
        C(CtrlC),
        Break(CtrlBreak),
        Close(CtrlClose),
    }

    impl Listener {
        pub(super) async fn recv(&mut self) {
            match self {
                Listener::C(listener) => listener.recv().await,
                Listener::Break(listener) => listener.recv().await,
                Listener::Close(listener) => listener.recv().await,
            };
        }
    }

    pub(super) fn listeners() -> Vec<Listener> {
        let listeners =
            [ctrl_c().map(Listener::C), ctrl_break().map(Listener::Break), ctrl_close().map(Listener::Close)];
        listeners
            .into_iter()
            .filter_map(|listener| {
                listener.map_err(|err| tracing::warn!(%err, "cannot listen for a console event")).ok()
            })
            .collect()
    }

    pub(super) fn raw_stdout() -> std::io::Result<File> {
        Ok(File::from(std::io::stdout().as_handle().try_clone_to_owned()?))
    }

    pub(super) fn stdin_ready(_wait: std::time::Duration) -> std::io::Result<super::StdinReady> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "the console's input cannot be waited on with a timeout here",
        ))
    }

    pub(super) fn read_stdin(buffer: &mut [u8]) -> std::io::Result<usize> {
        use std::io::Read as _;
        std::io::stdin().read(buffer)
    }
}
