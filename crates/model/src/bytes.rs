//! Message payloads: up to [`INLINE`] bytes are stored in place (RDMA persistence traffic is
//! mostly 8-byte pointers and 64-byte records), larger ones are shared behind an `Arc`, so
//! cloning a payload for retransmission never copies a large buffer.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// Payloads up to this size live inline.
pub const INLINE: usize = 64;

/// An immutable byte string, cheap to clone.
#[derive(Clone)]
pub struct Bytes(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, buf: [u8; INLINE] },
    Shared(Arc<[u8]>),
}

impl Bytes {
    /// The empty payload.
    pub const EMPTY: Bytes = Bytes(Repr::Inline {
        len: 0,
        buf: [0; INLINE],
    });

    /// Copies `data`.
    pub fn copy_from(data: &[u8]) -> Self {
        if data.len() <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..data.len()].copy_from_slice(data);
            Bytes(Repr::Inline {
                len: data.len() as u8,
                buf,
            })
        } else {
            Bytes(Repr::Shared(Arc::from(data)))
        }
    }
}

impl Bytes {
    /// `len` bytes written by `fill`; inline payloads need no allocation.
    pub fn filled(len: usize, fill: impl FnOnce(&mut [u8])) -> Self {
        if len <= INLINE {
            let mut buf = [0u8; INLINE];
            fill(&mut buf[..len]);
            Bytes(Repr::Inline {
                len: len as u8,
                buf,
            })
        } else {
            // Collected straight into the `Arc` (an exact-length iterator: one allocation,
            // where a `Vec` turned into an `Arc` takes two and a copy).
            let mut a: Arc<[u8]> = std::iter::repeat_n(0u8, len).collect();
            fill(Arc::get_mut(&mut a).expect("a new Arc has no other owner"));
            Bytes(Repr::Shared(a))
        }
    }
}

impl From<&[u8]> for Bytes {
    fn from(data: &[u8]) -> Self {
        Bytes::copy_from(data)
    }
}

impl<const N: usize> From<[u8; N]> for Bytes {
    fn from(data: [u8; N]) -> Self {
        Bytes::copy_from(&data)
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Self {
        if v.len() <= INLINE {
            Bytes::copy_from(&v)
        } else {
            Bytes(Repr::Shared(Arc::from(v)))
        }
    }
}

impl Bytes {
    /// True when the bytes live in a shared heap buffer rather than in place.
    #[inline]
    pub fn is_shared(&self) -> bool {
        matches!(self.0, Repr::Shared(_))
    }
}

impl Deref for Bytes {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, buf } => &buf[..*len as usize],
            Repr::Shared(a) => a,
        }
    }
}

impl PartialEq for Bytes {
    fn eq(&self, other: &Bytes) -> bool {
        **self == **other
    }
}
impl Eq for Bytes {}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bytes({} bytes)", self.len())
    }
}

/// A scratch buffer for copies through the CPU: up to [`Scratch::SMALL`] bytes on the
/// stack (records, acknowledgements, small messages: the hot paths), larger ones on the
/// heap, so the common copy allocates nothing.
pub struct Scratch {
    small: [u8; Scratch::SMALL],
    large: Vec<u8>,
    /// `small` is still all zero (nothing handed out yet): the first `get` need not clear it.
    clean: bool,
}

impl Scratch {
    /// Bytes served from the stack.
    pub const SMALL: usize = 512;

    /// An empty scratch buffer.
    pub fn new() -> Self {
        Scratch {
            small: [0; Self::SMALL],
            large: Vec::new(),
            clean: true,
        }
    }

    /// `len` zeroed bytes.
    pub fn get(&mut self, len: usize) -> &mut [u8] {
        if len <= Self::SMALL {
            let b = &mut self.small[..len];
            if !std::mem::take(&mut self.clean) {
                b.fill(0);
            }
            b
        } else {
            self.large.clear();
            self.large.resize(len, 0);
            &mut self.large
        }
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_payloads_round_trip() {
        for n in [0usize, 1, 8, 64, 65, 4096] {
            let v: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let b = Bytes::from(v.clone());
            assert_eq!(&*b, &v[..]);
            assert_eq!(b.clone(), Bytes::copy_from(&v));
        }
        assert!(Bytes::EMPTY.is_empty());
    }

    #[test]
    fn filled_payloads_hold_what_fill_wrote() {
        for n in [0usize, 64, 65, 300] {
            let b = Bytes::filled(n, |out| {
                out.iter_mut().enumerate().for_each(|(i, x)| *x = i as u8)
            });
            assert_eq!(&*b, &(0..n).map(|i| i as u8).collect::<Vec<_>>()[..]);
        }
    }

    #[test]
    fn scratch_buffers_come_zeroed_every_time() {
        let mut s = Scratch::new();
        for len in [10, 10, Scratch::SMALL, 3, Scratch::SMALL + 1, 7] {
            let b = s.get(len);
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0), "{len} bytes not zeroed");
            b.fill(0xEE);
        }
    }
}
