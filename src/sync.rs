//! Locking a std `Mutex` the one way lathe does it. Knows nothing of what is
//! locked.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, taking it over even if a thread panicked while holding it:
/// every critical section in lathe leaves its data consistent at each step,
/// and one failed task must not wedge a session or the whole server.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
