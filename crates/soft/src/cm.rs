//! The connection manager's frames: what two soft RNICs exchange over a fresh TCP
//! connection before RDMA packets flow (the role RDMA CM plays on real fabrics).
//!
//! ```text
//! client → server  Hello    { key }
//! server → client  Assign   { client node, server node, server configuration }
//! client → server  Ready    { client QP }
//! server → client  Clearing { done, total }      (none or more: a slot taken over)
//! server → client  Accepted { server QP, key }   (or Refused { code } at any point)
//! ```
//!
//! A server with as many connections in their handshake as it admits answers a new one
//! `Refused { Busy }` at once, before it reads the client's `Hello`, and closes it.
//!
//! A slot another client had is cleared before a new client may use it, and a clear of
//! gigabytes of a file-backed pool takes seconds. The server says how far it got as it
//! goes (`Clearing`, at least every [`CLEAR_STEP`]), and each frame restarts the client's
//! wait for the next one: the client waits as long as the server makes progress, however
//! large the slot.
//!
//! Every frame is 24 bytes: magic `RMCM`, version (u16), kind (u8), a reserved zero byte,
//! then 16 bytes of kind-specific payload (unused bytes zero). `parse` refuses any other
//! magic, version, kind or a non-zero unused byte.
//!
//! The key is a client's identity on a `remora serve` server: `Hello { key: 0 }` is a new
//! client, which `Accepted` gives a key; a client that comes back (after its connection, or
//! the server, went down) says its key in `Hello` and is given its own slot of the pool, its
//! log where it left it. Servers that identify clients otherwise (the durable RPCs' claim)
//! take key 0 only and answer key 0.

use remora_model::config::ServerConfig;
use remora_model::verbs::{NodeId, QpNum};

const MAGIC: &[u8; 4] = b"RMCM";

/// How long either side waits for the other's next handshake frame: a server drops a
/// connection that stays silent this long (it would hold a socket for ever), and a client
/// gives up on a server that never answers (e.g. another service on that port).
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The least a `Clearing` frame may report beyond the one before it (the first: beyond 0),
/// unless it reports the end (`done == total`): so a clear of `total` bytes is reported in
/// at most `total / CLEAR_STEP + 1` frames, and a client that checks this waits for no
/// server longer than the clear it announced can last.
pub const CLEAR_STEP: u64 = 1 << 20;
/// Connection-manager protocol version.
pub const CM_VERSION: u16 = 3;
/// Bytes of every CM frame.
pub const CM_FRAME: usize = 24;

/// Why the server refused a connection.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RefuseCode {
    /// The client speaks another protocol version.
    Version,
    /// The server could not set up resources (memory, queues).
    Resources,
    /// The client claimed a connection that belongs to another client (a durable-RPC
    /// claim whose key is not the connection's), or a key no slot of the pool has.
    NotOwner,
    /// The server has as many connections in their handshake as it takes, from the
    /// client's address or from all (`server::Admission`); sent before the client's
    /// `Hello` is read, so a server answers it to any client.
    Busy,
}

impl std::fmt::Display for RefuseCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RefuseCode::Version => "it speaks another protocol or version",
            RefuseCode::Resources => {
                "it has no free connection slot (all in use, or kept for clients that may \
                 come back), or could not set one up; the server's log says which"
            }
            RefuseCode::NotOwner => {
                "the key this client claimed is not one of its slots' (the slot went to \
                 another client after its lease ran out, or this is another pool)"
            }
            RefuseCode::Busy => {
                "it has as many connections in their handshake as it takes, from this \
                 client's address or from all; try again once they are done"
            }
        })
    }
}

/// A connection-manager frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Cm {
    /// Client's opening.
    Hello {
        /// The key a returning client was given (its identity), or 0 for a new client.
        key: u64,
    },
    /// The server's node ids and configuration.
    Assign {
        /// Node id the client must use.
        client: NodeId,
        /// The server's node id.
        server: NodeId,
        /// The server's configuration (transport and NIC capabilities included).
        config: ServerConfig,
    },
    /// The client's queue pair.
    Ready {
        /// Its number.
        qp: QpNum,
    },
    /// The server's queue pair, connected.
    Accepted {
        /// Its number.
        qp: QpNum,
        /// The client's key: the one it claimed, a new one for a new client, or 0 from a
        /// server that does not identify clients by key.
        key: u64,
    },
    /// The server is clearing the slot the client will be given (another client had
    /// it): bytes zeroed and synced so far, of all it will clear. Of one clear's frames,
    /// `total` stays the same and `done` grows by at least [`CLEAR_STEP`] each time or
    /// reaches `total`.
    Clearing {
        /// Bytes cleared so far.
        done: u64,
        /// Bytes the clear covers (never fewer than `done`).
        total: u64,
    },
    /// No connection.
    Refused {
        /// Why.
        code: RefuseCode,
    },
}

/// Why bytes are not a CM frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// Not 24 bytes.
    #[error("connection-manager frame of {0} bytes (need {CM_FRAME})")]
    Length(usize),
    /// Not a remora CM frame.
    #[error("not a remora connection-manager frame")]
    BadMagic,
    /// Another protocol version.
    #[error("peer speaks connection-manager version {0}, this is {CM_VERSION}")]
    Version(u16),
    /// Unknown kind or field value.
    #[error("bad connection-manager frame: {0}")]
    BadValue(&'static str),
}

impl Cm {
    /// The 24-byte encoding.
    pub fn emit(&self) -> [u8; CM_FRAME] {
        let mut b = [0u8; CM_FRAME];
        b[..4].copy_from_slice(MAGIC);
        b[4..6].copy_from_slice(&CM_VERSION.to_le_bytes());
        let p = &mut b[8..];
        b[6] = match self {
            Cm::Hello { key } => {
                p[..8].copy_from_slice(&key.to_le_bytes());
                1
            }
            Cm::Assign {
                client,
                server,
                config,
            } => {
                p[..4].copy_from_slice(&client.to_le_bytes());
                p[4..8].copy_from_slice(&server.to_le_bytes());
                p[8..13].copy_from_slice(&config.to_bytes());
                2
            }
            Cm::Ready { qp } => {
                p[..4].copy_from_slice(&qp.0.to_le_bytes());
                3
            }
            Cm::Accepted { qp, key } => {
                p[..4].copy_from_slice(&qp.0.to_le_bytes());
                p[8..16].copy_from_slice(&key.to_le_bytes());
                4
            }
            Cm::Clearing { done, total } => {
                p[..8].copy_from_slice(&done.to_le_bytes());
                p[8..16].copy_from_slice(&total.to_le_bytes());
                6
            }
            Cm::Refused { code } => {
                p[0] = match code {
                    RefuseCode::Version => 1,
                    RefuseCode::Resources => 2,
                    RefuseCode::NotOwner => 3,
                    RefuseCode::Busy => 4,
                };
                5
            }
        };
        b
    }

    /// Parses exactly one frame.
    pub fn parse(b: &[u8]) -> Result<Cm, CmError> {
        if b.len() != CM_FRAME {
            return Err(CmError::Length(b.len()));
        }
        if &b[..4] != MAGIC {
            return Err(CmError::BadMagic);
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != CM_VERSION {
            return Err(CmError::Version(version));
        }
        if b[7] != 0 {
            return Err(CmError::BadValue("reserved byte"));
        }
        let p = &b[8..];
        let u32_at = |i: usize| u32::from_le_bytes(p[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(p[i..i + 8].try_into().expect("8 bytes"));
        let (frame, used) = match b[6] {
            1 => (Cm::Hello { key: u64_at(0) }, 8),
            2 => (
                Cm::Assign {
                    client: u32_at(0),
                    server: u32_at(4),
                    config: ServerConfig::from_bytes(p[8..13].try_into().expect("5 bytes"))
                        .map_err(CmError::BadValue)?,
                },
                13,
            ),
            3 => (
                Cm::Ready {
                    qp: QpNum(u32_at(0)),
                },
                4,
            ),
            4 => {
                if u32_at(4) != 0 {
                    return Err(CmError::BadValue("unused bytes"));
                }
                (
                    Cm::Accepted {
                        qp: QpNum(u32_at(0)),
                        key: u64_at(8),
                    },
                    16,
                )
            }
            5 => {
                let code = match p[0] {
                    1 => RefuseCode::Version,
                    2 => RefuseCode::Resources,
                    3 => RefuseCode::NotOwner,
                    4 => RefuseCode::Busy,
                    _ => return Err(CmError::BadValue("refusal code")),
                };
                (Cm::Refused { code }, 1)
            }
            6 => {
                let (done, total) = (u64_at(0), u64_at(8));
                if done > total {
                    return Err(CmError::BadValue("clearing: more done than its total"));
                }
                (Cm::Clearing { done, total }, 16)
            }
            _ => return Err(CmError::BadValue("kind")),
        };
        if p[used..].iter().any(|&x| x != 0) {
            return Err(CmError::BadValue("unused bytes"));
        }
        Ok(frame)
    }
}

/// The key a server keeps for a slot while it clears the slot for a new client (so that a
/// crash in the middle leaves the slot nobody's, to be cleared again, never a half-cleared
/// region to its old client). [`fresh_key`] never draws it, and a server refuses a claim
/// of it.
pub const CLEARING_KEY: u64 = u64::MAX;

/// A new client key: 64 bits from the OS's random source, never 0 (0 is a new client's
/// claim, and a slot whose key is 0 belongs to nobody) nor [`CLEARING_KEY`]. Not from the
/// model's seeded PRNG: a key must not be guessable by another client, nor repeat across
/// servers.
pub fn fresh_key() -> std::io::Result<u64> {
    use std::io::Read;
    let mut urandom = std::fs::File::open("/dev/urandom")?;
    loop {
        let mut b = [0u8; 8];
        urandom.read_exact(&mut b)?;
        let key = u64::from_le_bytes(b);
        if key != 0 && key != CLEARING_KEY {
            return Ok(key);
        }
    }
}

/// A silent connection is probed after this long (TCP keepalive): how soon a connection
/// notices that its peer's host vanished (crashed, or cut off the network) without closing
/// it. Without this a server would keep such a client's connection slot for ever (a kill of
/// the client process closes its connection; a crash of its host does not).
pub const DEAD_PEER_IDLE: std::time::Duration = std::time::Duration::from_secs(10);
/// Time between keepalive probes.
pub const DEAD_PEER_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);
/// Unanswered probes after which the connection is given up (Linux).
pub const DEAD_PEER_PROBES: u32 = 3;
/// Data left unacknowledged this long ends the connection too (`TCP_USER_TIMEOUT`, Linux).
pub const DEAD_PEER_UNACKED: std::time::Duration = std::time::Duration::from_secs(30);

/// Sets up `stream` to notice a vanished peer: keepalive probes after [`DEAD_PEER_IDLE`],
/// and a time-out for unacknowledged data.
pub fn watch_peer(stream: &remora_exec::net::TcpStream) -> std::io::Result<()> {
    let sock = socket2::SockRef::from(stream);
    let ka = socket2::TcpKeepalive::new()
        .with_time(DEAD_PEER_IDLE)
        .with_interval(DEAD_PEER_INTERVAL);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let ka = ka.with_retries(DEAD_PEER_PROBES);
    sock.set_tcp_keepalive(&ka)?;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    sock.set_tcp_user_timeout(Some(DEAD_PEER_UNACKED))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_bad_ones_are_refused() {
        let mut all = vec![
            Cm::Hello { key: 0 },
            Cm::Hello {
                key: 0x0123_4567_89ab_cdef,
            },
            Cm::Ready { qp: QpNum(7) },
            Cm::Accepted {
                qp: QpNum(9),
                key: u64::MAX,
            },
            Cm::Clearing { done: 0, total: 1 },
            Cm::Clearing {
                done: 3 << 30,
                total: 3 << 30,
            },
        ];
        for code in [
            RefuseCode::Version,
            RefuseCode::Resources,
            RefuseCode::NotOwner,
            RefuseCode::Busy,
        ] {
            all.push(Cm::Refused { code });
        }
        for config in ServerConfig::table1() {
            all.push(Cm::Assign {
                client: 3,
                server: 0,
                config,
            });
        }
        for f in all {
            let b = f.emit();
            assert_eq!(Cm::parse(&b), Ok(f));
            assert!(Cm::parse(&b[..23]).is_err());
            // Magic, version, kind and the reserved byte admit no other value.
            for i in 0..8 {
                let mut x = b;
                x[i] ^= 0x80;
                assert!(Cm::parse(&x).is_err(), "{f:?}: byte {i}");
            }
            // Neither does the payload past its fields.
            if !matches!(f, Cm::Accepted { .. } | Cm::Clearing { .. }) {
                let mut x = b;
                x[CM_FRAME - 1] = 1;
                assert!(Cm::parse(&x).is_err(), "{f:?}: unused byte");
            }
        }
        // Accepted's unused bytes lie between its QP and its key.
        let mut x = Cm::Accepted {
            qp: QpNum(1),
            key: 2,
        }
        .emit();
        x[8 + 5] = 1;
        assert!(Cm::parse(&x).is_err(), "Accepted: unused byte");
        // A clear never gets further than its total.
        let x = Cm::Clearing { done: 2, total: 1 }.emit();
        assert!(Cm::parse(&x).is_err(), "Clearing: done past total");
        // Version 1's frames (no keys) are refused by their version, not misread.
        let mut b = Cm::Hello { key: 0 }.emit();
        b[4] = 1;
        assert_eq!(Cm::parse(&b), Err(CmError::Version(1)));
    }
}
