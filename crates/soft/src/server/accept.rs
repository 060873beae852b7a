//! The accept loop shared by `remora serve` and `remora rpc-serve`, and whom it admits.
//!
//! A connection in its handshake (the connection manager's frames, the wait for a slot, a
//! slot's clear) holds a socket and a task until it is served or [`HANDSHAKE_TIMEOUT`]
//! passes. Without a bound, a peer that opens connections and says nothing holds the
//! server's file descriptors: once they run out, `accept` fails and no client gets in.
//! So the loop admits at most [`Admission::handshakes`] connections in their handshake at
//! once, and at most [`Admission::per_address`] from one address, so that one peer's burst
//! does not shut out the others; one more is refused at once with [`RefuseCode::Busy`]
//! (before its `Hello` is read: the refusal does not wait on the client).
//!
//! [`HANDSHAKE_TIMEOUT`]: crate::cm::HANDSHAKE_TIMEOUT

use crate::cm::{Cm, RefuseCode};
use remora_exec::net::{TcpListener, TcpStream};
use remora_exec::Either;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::rc::Rc;

/// How many connections the accept loop lets be in their handshake at once.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    /// From all peers.
    pub handshakes: usize,
    /// From one address (an IPv6 peer's /64: see [`counted_as`]).
    pub per_address: usize,
}

impl Admission {
    /// The servers' default: well under the 1,024 descriptors a process gets by default,
    /// and more than any client that connects in turn needs from one address.
    pub const DEFAULT: Admission = Admission {
        handshakes: 256,
        per_address: 32,
    };

    /// Checks that both bounds admit a connection.
    pub fn validate(self) -> Result<Admission, String> {
        if self.handshakes == 0 || self.per_address == 0 {
            return Err(format!(
                "a server must admit at least one connection in its handshake (got \
                 {} in all, {} per address)",
                self.handshakes, self.per_address
            ));
        }
        Ok(self)
    }
}

impl std::fmt::Display for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "at most {} connections in their handshake at once, {} from one address; one \
             more is refused as busy",
            self.handshakes, self.per_address
        )
    }
}

impl Default for Admission {
    fn default() -> Self {
        Admission::DEFAULT
    }
}

/// The address a connection is counted under: an IPv4 address (an IPv4-mapped IPv6
/// address as the IPv4 one), or an IPv6 address's /64 prefix. One host is usually given a
/// whole /64, and counting its addresses apart would let it open the per-address bound
/// 2^64 times over.
pub fn counted_as(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// The connections in their handshake, counted.
#[derive(Debug, Default)]
struct InHandshake {
    total: usize,
    by_address: BTreeMap<IpAddr, usize>,
}

/// Why a connection was not admitted.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Full {
    /// Its address has this many in their handshake.
    Address(usize),
    /// All peers have this many.
    All(usize),
}

/// Counts connections in their handshake against an [`Admission`].
#[derive(Clone, Debug)]
pub struct Admitter {
    limits: Admission,
    counts: Rc<RefCell<InHandshake>>,
}

impl Admitter {
    /// Nothing admitted yet.
    pub fn new(limits: Admission) -> Admitter {
        Admitter {
            limits,
            counts: Rc::default(),
        }
    }

    /// A place for a connection from `ip`, if the bounds have room.
    fn admit(&self, ip: IpAddr) -> Result<Handshaking, Full> {
        let address = counted_as(ip);
        let mut c = self.counts.borrow_mut();
        let from = c.by_address.get(&address).copied().unwrap_or(0);
        if from >= self.limits.per_address {
            return Err(Full::Address(from));
        }
        if c.total >= self.limits.handshakes {
            return Err(Full::All(c.total));
        }
        c.total += 1;
        *c.by_address.entry(address).or_insert(0) += 1;
        Ok(Handshaking {
            counts: self.counts.clone(),
            address,
        })
    }

    /// Connections in their handshake now.
    pub fn in_handshake(&self) -> usize {
        self.counts.borrow().total
    }
}

/// An admitted connection's place among those in their handshake, given back when
/// dropped: by [`Handshaking::served`] once the connection is served, or with the
/// connection's task if the handshake fails.
#[derive(Debug)]
pub struct Handshaking {
    counts: Rc<RefCell<InHandshake>>,
    address: IpAddr,
}

impl Handshaking {
    /// The connection's handshake is over; its place goes to the next.
    pub fn served(self) {}
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        let mut c = self.counts.borrow_mut();
        c.total -= 1;
        if let Some(n) = c.by_address.get_mut(&self.address) {
            *n -= 1;
            if *n == 0 {
                c.by_address.remove(&self.address);
            }
        }
    }
}

/// How the accept loop says what it refused: a line at most every [`SAY_EVERY`], with how
/// many since the last, so that a flood of connections cannot fill a stderr nobody reads
/// (and block the server on it).
#[derive(Default)]
struct Refusals {
    unsaid: u64,
    said_at: Option<remora_exec::time::Instant>,
}

/// See [`Refusals`].
const SAY_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Refusals {
    fn refused(&mut self, peer: IpAddr, why: Full, limits: Admission) {
        self.unsaid += 1;
        let now = crate::server::wall_now();
        if self
            .said_at
            .is_some_and(|t| now.saturating_duration_since(t) < SAY_EVERY)
        {
            return;
        }
        let why = match why {
            Full::Address(n) => format!(
                "{n} connections from {} in their handshake (at most {})",
                counted_as(peer),
                limits.per_address
            ),
            Full::All(n) => format!(
                "{n} connections in their handshake (at most {})",
                limits.handshakes
            ),
        };
        eprintln!(
            "refused {} connection(s) as busy since the last such line; the last from \
             {peer}: {why}",
            self.unsaid
        );
        self.unsaid = 0;
        self.said_at = Some(now);
    }

    fn at_shutdown(&self) {
        if self.unsaid > 0 {
            eprintln!("refused {} more connection(s) as busy", self.unsaid);
        }
    }
}

/// How long the accept loop waits after a failed `accept` before it tries again.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

/// Accepts connections until SIGTERM or Ctrl-C, each admitted one served by `handle` in a
/// task of its own with its place among those in their handshake (which `handle` gives
/// back with [`Handshaking::served`] once the connection is served). Must run inside
/// `remora_exec::block_on`.
pub async fn accept_until_shutdown<F, Fut>(listener: TcpListener, admitter: Admitter, mut handle: F)
where
    F: FnMut(TcpStream, Handshaking) -> Fut + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let mut shutdown = std::pin::pin!(remora_exec::signal::shutdown());
    // Failed accepts since the last one that worked (said once per run of failures: a
    // stderr nobody reads must not fill up and block the server).
    let mut failing = 0u64;
    let mut refusals = Refusals::default();
    loop {
        match remora_exec::first(shutdown.as_mut(), listener.accept()).await {
            Either::Left(()) => {
                refusals.at_shutdown();
                return;
            }
            Either::Right(Ok((stream, peer))) => {
                if failing > 0 {
                    eprintln!("accepting connections again after {failing} failed attempts");
                    failing = 0;
                }
                match admitter.admit(peer.ip()) {
                    Ok(place) => {
                        remora_exec::spawn_local(handle(stream, place));
                    }
                    Err(full) => {
                        refuse_busy(stream);
                        refusals.refused(peer.ip(), full, admitter.limits);
                    }
                }
            }
            Either::Right(Err(e)) => {
                // Out of file descriptors or memory: the listener stays ready, so retrying
                // at once would spin (and starve the connections being served).
                if failing == 0 {
                    eprintln!("accept failed: {e}; retrying every {ACCEPT_BACKOFF:?}");
                }
                failing += 1;
                remora_exec::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// Tells a connection the server is busy, without waiting: a fresh connection's send
/// buffer is empty, so the frame goes whole, and if it somehow does not, the connection
/// closes all the same (the client sees the end of its handshake).
fn refuse_busy(stream: TcpStream) {
    let (_read, write) = stream.into_split();
    let _ = write.try_write(
        &Cm::Refused {
            code: RefuseCode::Busy,
        }
        .emit(),
    );
    // Dropping both halves closes the connection.
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn one_address_is_bounded_apart_from_all() {
        let a = Admitter::new(Admission {
            handshakes: 3,
            per_address: 2,
        });
        let x: IpAddr = Ipv4Addr::new(10, 0, 0, 1).into();
        let y: IpAddr = Ipv4Addr::new(10, 0, 0, 2).into();
        let x1 = a.admit(x).unwrap();
        let _x2 = a.admit(x).unwrap();
        assert_eq!(a.admit(x).unwrap_err(), Full::Address(2));
        let _y1 = a.admit(y).unwrap();
        assert_eq!(a.admit(y).unwrap_err(), Full::All(3));
        // A place given back is another's.
        x1.served();
        assert_eq!(a.in_handshake(), 2);
        let _y2 = a.admit(y).unwrap();
        assert_eq!(a.admit(x).unwrap_err(), Full::All(3));
    }

    #[test]
    fn an_ipv6_host_is_counted_by_its_64_and_a_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse::<Ipv6Addr>().unwrap().into();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse::<Ipv6Addr>().unwrap().into();
        let c: IpAddr = "2001:db8:1:3::1".parse::<Ipv6Addr>().unwrap().into();
        assert_eq!(counted_as(a), counted_as(b));
        assert_ne!(counted_as(a), counted_as(c));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse::<Ipv6Addr>().unwrap().into();
        assert_eq!(
            counted_as(mapped),
            IpAddr::from(Ipv4Addr::new(192, 0, 2, 7))
        );
        let admit = Admitter::new(Admission {
            handshakes: 10,
            per_address: 1,
        });
        let _a = admit.admit(a).unwrap();
        assert_eq!(admit.admit(b).unwrap_err(), Full::Address(1));
        let _c = admit.admit(c).unwrap();
    }

    #[test]
    fn a_bound_of_zero_is_refused() {
        assert!(Admission {
            handshakes: 0,
            per_address: 1
        }
        .validate()
        .is_err());
        assert!(Admission {
            handshakes: 1,
            per_address: 0
        }
        .validate()
        .is_err());
        assert!(Admission::DEFAULT.validate().is_ok());
    }
}
