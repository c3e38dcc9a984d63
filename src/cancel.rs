//! The one way a wait is raced against a cancellation token:
//! [`OrCancel::or_cancel`]. Every await in a turn that can wait (opening the
//! model stream, each chunk, a retry back-off, a permission answer, an
//! editor request, a tool run, a blocking file job) goes through it, so
//! `grep -rn or_cancel src` shows the whole cancel surface.
//!
//! Cancellation wins when both are ready (the token is polled first): once
//! the user has cancelled, no further work is started on the strength of a
//! result that happened to arrive at the same instant. The losing work is
//! dropped, which is how it stops: an HTTP stream closes, a pending editor
//! request is withdrawn (`$/cancel_request`), a child process group is
//! killed by its guard.
//!
//! Waits that are not "this work, or cancel" stay hand-written `select!`s
//! with a comment saying why (a shell command's exit, deadline and output
//! together; the JSON-RPC reader's several sources). This module knows
//! nothing else.

use std::future::Future;

use tokio_util::sync::CancellationToken;

/// The token was cancelled before the work finished; the work was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cancelled")]
pub struct Cancelled;

/// Races any future against a [`CancellationToken`].
pub trait OrCancel: Future + Sized {
    /// The work's output, or [`Cancelled`] when `token` is (or becomes)
    /// cancelled first. Cancellation wins a tie.
    fn or_cancel(self, token: &CancellationToken) -> impl Future<Output = Result<Self::Output, Cancelled>>;
}

impl<F: Future> OrCancel for F {
    async fn or_cancel(self, token: &CancellationToken) -> Result<F::Output, Cancelled> {
        tokio::select! {
            biased;
            () = token.cancelled() => Err(Cancelled),
            value = self => Ok(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn finished_work_gives_its_output() {
        let token = CancellationToken::new();
        assert_eq!(async { 7 }.or_cancel(&token).await, Ok(7));
    }

    #[tokio::test]
    async fn a_cancelled_token_wins_over_ready_work() {
        let token = CancellationToken::new();
        token.cancel();
        assert_eq!(async { 7 }.or_cancel(&token).await, Err(Cancelled));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancel_interrupts_work_that_waits() {
        let token = CancellationToken::new();
        let canceller = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            canceller.cancel();
        });
        let never = std::future::pending::<()>();
        assert_eq!(never.or_cancel(&token).await, Err(Cancelled));
    }

    /// The race is `Send` when the work is, so it can run in spawned tasks.
    #[tokio::test]
    async fn the_race_is_send() {
        let token = CancellationToken::new();
        let task = tokio::spawn(async move { tokio::task::yield_now().or_cancel(&token).await });
        assert_eq!(task.await.ok(), Some(Ok(())));
    }
}
