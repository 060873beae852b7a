//! Signals as a future: [`Signals`] resolves when one of its signals arrives.

use std::io::{self, Read, Write};

use crate::net::Registered as Source;

/// Waits for any of a set of signals (from its creation on). Once one is made, those
/// signals no longer end the process by default, even after it is dropped (the handler
/// stays installed; as with tokio, the process then has to end by itself).
pub struct Signals {
    read: Source<mio::net::UnixStream>,
    ids: Vec<signal_hook_registry::SigId>,
}

impl Signals {
    /// Starts catching `signals` (e.g. `libc::SIGINT`, `libc::SIGTERM`).
    pub fn new(signals: &[libc::c_int]) -> io::Result<Signals> {
        let (read, write) = mio::net::UnixStream::pair()?;
        // Registered first, so a failure here leaves no handler behind.
        let read = Source::new(read, false)?;
        let write = std::sync::Arc::new(write);
        let mut ids = Vec::new();
        for &sig in signals {
            let w = write.clone();
            // SAFETY: the action only calls write(2) on a non-blocking socket, which is
            // async-signal-safe; a full socket drops the byte (one is enough to wake).
            let id = unsafe {
                signal_hook_registry::register(sig, move || {
                    let _ = (&*w).write(&[1]);
                })
            };
            match id {
                Ok(id) => ids.push(id),
                Err(e) => {
                    for id in ids {
                        signal_hook_registry::unregister(id);
                    }
                    return Err(e);
                }
            }
        }
        Ok(Signals { read, ids })
    }

    /// Waits for one of the signals.
    pub async fn recv(&mut self) {
        let mut b = [0u8; 64];
        let r = &self.read;
        let _ = std::future::poll_fn(|cx| {
            r.state
                .poll_io(crate::reactor::Dir::Read, cx, || (&r.io).read(&mut b))
        })
        .await;
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook_registry::unregister(id);
        }
    }
}

/// Resolves at the first SIGINT (Ctrl-C) or SIGTERM; never, if they cannot be caught.
pub async fn shutdown() {
    match Signals::new(&[libc::SIGINT, libc::SIGTERM]) {
        Ok(mut s) => s.recv().await,
        Err(_) => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_to_this_process_is_caught() {
        crate::block_on(async {
            let mut s = Signals::new(&[libc::SIGUSR1]).unwrap();
            // SAFETY: raise(3) sends the signal to this thread; the action above handles it.
            unsafe { libc::raise(libc::SIGUSR1) };
            crate::time::timeout(std::time::Duration::from_secs(5), s.recv())
                .await
                .expect("caught");
        });
    }
}
