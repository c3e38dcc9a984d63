//! The front ends' plumbing on the console: interrupts (the signals that ask
//! lathe to stop) and a raw handle on stdout.
//!
//! Unix: SIGINT, SIGTERM and SIGHUP. Windows: Ctrl-C, Ctrl-Break and the
//! console window being closed (tokio's `ctrl_c`, `ctrl_break`,
//! `ctrl_close`).

use std::fs::File;

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
}
