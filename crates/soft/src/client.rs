//! Connecting to a `remora serve` server: the connection manager's handshake, then a
//! library [`Client`] on a real-time node.

use crate::cm::{Cm, CmError, RefuseCode, CLEAR_STEP, CM_FRAME, HANDSHAKE_TIMEOUT};
use crate::runtime::RtNode;
use remora::Client;
use remora_exec::net::TcpStream;
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::Rnic;
use remora_model::verbs::{NodeId, QpNum};
use remora_model::ServerConfig;

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The network said no.
    #[error("cannot reach {addr}: {err}")]
    Io {
        /// Server address.
        addr: String,
        /// Error.
        err: std::io::Error,
    },
    /// The connection broke in the middle of the connection manager's handshake.
    #[error(
        "lost the connection to {addr} during the handshake: {}",
        lost_why(err)
    )]
    Lost {
        /// Server address.
        addr: String,
        /// Error.
        err: std::io::Error,
    },
    /// The server's reports of a slot's clear did not advance: the same total, and at least
    /// [`CLEAR_STEP`] more done each time or the end.
    #[error(
        "{addr} reported the clear of this client's slot going from {} to {} of {} bytes \
         (of {} before): not progress, so the client stopped waiting",
        from.0, to.0, to.1, from.1
    )]
    ClearStalled {
        /// Server address.
        addr: String,
        /// What it said before (done, total); (0, total) before its first report.
        from: (u64, u64),
        /// What it said now.
        to: (u64, u64),
    },
    /// The server spoke something else.
    #[error("bad handshake from {addr}: {err}")]
    Handshake {
        /// Server address.
        addr: String,
        /// What was wrong.
        err: CmError,
    },
    /// Nothing came back in time.
    #[error("{addr} did not {what} within {after:?}")]
    Timeout {
        /// Server address.
        addr: String,
        /// What it did not do.
        what: &'static str,
        /// How long we waited.
        after: std::time::Duration,
    },
    /// The server sent a valid frame out of turn.
    #[error("unexpected handshake step from {0}")]
    Protocol(String),
    /// The server refused.
    #[error("{addr} refused the connection ({code:?}): {code}")]
    Refused {
        /// Server address.
        addr: String,
        /// Why.
        code: RefuseCode,
    },
    /// A reconnecting node was assigned another node id than the one it has.
    #[error("{addr} assigned node id {assigned}, but the reconnecting node is {have}")]
    NodeId {
        /// Server address.
        addr: String,
        /// Id the server assigned.
        assigned: NodeId,
        /// The node's id.
        have: NodeId,
    },
    /// A returning client was accepted under another key than the one it claimed.
    #[error("{addr} accepted the client that claimed key {claimed:#018x} under key {given:#018x}")]
    WrongKey {
        /// Server address.
        addr: String,
        /// The key the client claimed.
        claimed: u64,
        /// The key the server answered.
        given: u64,
    },
    /// Local verbs failed.
    #[error(transparent)]
    Verbs(#[from] remora_verbs::VerbsError),
}

impl ConnectError {
    /// What an I/O error on the connection to `addr` in the middle of the handshake
    /// becomes: `.map_err(ConnectError::lost(addr))`.
    pub fn lost(addr: &str) -> impl FnOnce(std::io::Error) -> ConnectError + '_ {
        move |err| ConnectError::Lost {
            addr: addr.to_string(),
            err,
        }
    }
}

/// Why a handshake's connection broke, in words: an end of file is the server closing
/// it, which says more than "unexpected end of file".
fn lost_why(err: &std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::UnexpectedEof => {
            "the server closed it (it stopped, or it is not a remora server)".into()
        }
        _ => err.to_string(),
    }
}

/// A connection made by [`connect_as`].
pub struct Connection {
    /// The local node.
    pub node: RtNode,
    /// The server's configuration.
    pub config: ServerConfig,
    /// A library client whose QP is connected; call [`Client::connect`] next.
    pub client: Client<RtNode>,
    /// The client's key on the server: pass it to [`connect_as`] to come back to the same
    /// slot (and region) after this connection, or the server, went down. 0 from a server
    /// that does not identify clients by key.
    pub key: u64,
    /// Bytes the server cleared before it accepted the connection (zeroed and synced: the
    /// slot it gave this client had another client before), 0 if none. A clear takes
    /// time in proportion to the slot: seconds for gigabytes in a file on disk.
    pub cleared: u64,
}

/// Connects to `addr` (`host:port`; IPv4, IPv6 or a name) as a new client. Returns the
/// local node, the server's configuration, and a library client whose QP is connected;
/// call [`Client::connect`] next. Must run inside `remora_exec::block_on`.
pub async fn connect(
    addr: &str,
    profile: &LatencyProfile,
) -> Result<(RtNode, ServerConfig, Client<RtNode>), ConnectError> {
    let c = connect_as(addr, profile, 0).await?;
    Ok((c.node, c.config, c.client))
}

/// [`connect`], as the client whose key is `key` (0: a new client, which the server gives
/// a key). A `remora serve` server gives a returning client its own slot, its region as
/// the client (or a crash) left it; a key the server does not know is refused
/// ([`RefuseCode::NotOwner`]).
pub async fn connect_as(
    addr: &str,
    profile: &LatencyProfile,
    key: u64,
) -> Result<Connection, ConnectError> {
    let opening = open_as(addr, profile, None, key, &[]).await?;
    let config = opening.config();
    let mut lib = Client::create(opening.node().clone())?;
    // The library's Hello must name the configuration the connection manager announced.
    lib.expect_config(config);
    let Finished { node, key, cleared } = opening.finish_keyed(lib.qp()).await?;
    // The server's first message, its Hello, is what `Client::connect` waits for: a server
    // that accepted and then never sends it is a time-out here, not a hang there.
    within(
        addr,
        "send its Hello after accepting",
        remora_verbs::Verbs::wait_cq(&node, lib.recv_cq()),
    )
    .await?;
    Ok(Connection {
        node,
        config,
        client: lib,
        key,
        cleared,
    })
}

/// A connection the connection manager accepted: what [`Opening::finish_keyed`] gives.
pub struct Finished {
    /// The local node, its QP connected to the server's.
    pub node: RtNode,
    /// The client's key (see [`Connection::key`]).
    pub key: u64,
    /// See [`Connection::cleared`].
    pub cleared: u64,
}

/// A connection halfway through the connection manager's handshake: the server assigned
/// node ids and sent its configuration (`Assign`); the client's QP is not connected yet.
/// Between [`open`] and [`finish`](Opening::finish) an application may exchange frames of
/// its own on [`stream`](Opening::stream), as it would in RDMA CM's private data (the
/// durable RPCs carry their log's address there).
pub struct Opening {
    addr: String,
    node: RtNode,
    config: ServerConfig,
    server: NodeId,
    stream: TcpStream,
    /// The key claimed in `Hello`.
    claimed: u64,
}

impl Opening {
    /// The local node (created by [`open`], or the one passed to it).
    pub fn node(&self) -> &RtNode {
        &self.node
    }
    /// The server's configuration.
    pub fn config(&self) -> ServerConfig {
        self.config
    }
    /// The server's node id.
    pub fn server(&self) -> NodeId {
        self.server
    }
    /// The TCP connection, for application frames before [`finish`](Self::finish).
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Sends the client's QP (`Ready`), waits for the server's (`Accepted`; while the server
    /// clears the slot it gives the client, for as long as it reports progress), connects
    /// the two and starts exchanging packets over the connection; when it closes, `qp`
    /// fails.
    pub async fn finish(self, qp: QpNum) -> Result<RtNode, ConnectError> {
        Ok(self.finish_keyed(qp).await?.node)
    }

    /// [`finish`](Self::finish), also giving the client's key and what the server cleared
    /// for it.
    pub async fn finish_keyed(mut self, qp: QpNum) -> Result<Finished, ConnectError> {
        let addr = self.addr.clone();
        self.stream
            .write_all(&Cm::Ready { qp }.emit())
            .await
            .map_err(ConnectError::lost(&addr))?;
        // A slot another client had is cleared first: each `Clearing` frame restarts the
        // wait, so a client waits as long as the server makes progress, and only then (a
        // server that repeats itself, or moves backwards, is not clearing).
        let mut cleared: Option<(u64, u64)> = None;
        let (server_qp, key) = loop {
            match next_cm(&mut self.stream, &addr).await? {
                Cm::Clearing { done, total } => {
                    let (last, t) = cleared.unwrap_or((0, total));
                    let progress =
                        t == total && last < done && (done == total || done - last >= CLEAR_STEP);
                    if !progress {
                        return Err(ConnectError::ClearStalled {
                            addr,
                            from: (last, t),
                            to: (done, total),
                        });
                    }
                    cleared = Some((done, total));
                }
                Cm::Accepted { qp, key } => break (qp, key),
                _ => return Err(ConnectError::Protocol(addr)),
            }
        };
        if self.claimed != 0 && key != self.claimed {
            return Err(ConnectError::WrongKey {
                addr,
                claimed: self.claimed,
                given: key,
            });
        }
        self.node.connect(qp, self.server, server_qp)?;
        let (read, write) = self.stream.into_split();
        self.node.attach(self.server, read, write, move |n| {
            let _ = n.with(|r, now| r.fail_qp(now, qp));
        });
        Ok(Finished {
            node: self.node,
            key,
            cleared: cleared.map_or(0, |(done, _)| done),
        })
    }
}

/// `f`, or [`ConnectError::Timeout`] if the server does not `what` within
/// [`HANDSHAKE_TIMEOUT`].
async fn within<T>(
    addr: &str,
    what: &'static str,
    f: impl std::future::Future<Output = T>,
) -> Result<T, ConnectError> {
    remora_exec::time::timeout(HANDSHAKE_TIMEOUT, f)
        .await
        .map_err(|_| ConnectError::Timeout {
            addr: addr.to_string(),
            what,
            after: HANDSHAKE_TIMEOUT,
        })
}

async fn next_cm(s: &mut TcpStream, addr: &str) -> Result<Cm, ConnectError> {
    let mut b = [0u8; CM_FRAME];
    within(
        addr,
        "answer the connection manager's handshake",
        s.read_exact(&mut b),
    )
    .await?
    .map_err(ConnectError::lost(addr))?;
    match Cm::parse(&b) {
        Ok(Cm::Refused { code }) => Err(ConnectError::Refused {
            addr: addr.to_string(),
            code,
        }),
        Ok(f) => Ok(f),
        Err(err) => Err(ConnectError::Handshake {
            addr: addr.to_string(),
            err,
        }),
    }
}

/// Opens a connection to `addr` and runs the connection manager's handshake up to the
/// server's `Assign`. With `node`, reuses that local node (a client reconnecting after
/// its server restarted keeps its memory and queues); the server must then assign the
/// same node id. Without, creates and starts a node with the assigned id. Must run inside
/// `remora_exec::block_on`.
pub async fn open(
    addr: &str,
    profile: &LatencyProfile,
    node: Option<RtNode>,
) -> Result<Opening, ConnectError> {
    open_with(addr, profile, node, &[]).await
}

/// [`open`], with an application's frame sent right after the connection manager's
/// `Hello`, in the same write, for a server that reads it before it assigns a node id
/// (the durable RPCs' claim of a reconnecting client's log).
pub async fn open_with(
    addr: &str,
    profile: &LatencyProfile,
    node: Option<RtNode>,
    after_hello: &[u8],
) -> Result<Opening, ConnectError> {
    open_as(addr, profile, node, 0, after_hello).await
}

/// [`open_with`], claiming `key` in `Hello` (0: a new client).
pub async fn open_as(
    addr: &str,
    profile: &LatencyProfile,
    node: Option<RtNode>,
    key: u64,
    after_hello: &[u8],
) -> Result<Opening, ConnectError> {
    let io = |err| ConnectError::Io {
        addr: addr.to_string(),
        err,
    };
    let mut s = within(addr, "accept the connection", TcpStream::connect(addr))
        .await?
        .map_err(io)?;
    s.set_nodelay(true).map_err(io)?;
    crate::cm::watch_peer(&s).map_err(io)?;
    let mut first = Cm::Hello { key }.emit().to_vec();
    first.extend_from_slice(after_hello);
    s.write_all(&first)
        .await
        .map_err(ConnectError::lost(addr))?;
    let Cm::Assign {
        client,
        server,
        config,
    } = next_cm(&mut s, addr).await?
    else {
        return Err(ConnectError::Protocol(addr.to_string()));
    };
    let node = match node {
        Some(n) => {
            let have = remora_verbs::Verbs::node(&n);
            if have != client {
                return Err(ConnectError::NodeId {
                    addr: addr.to_string(),
                    assigned: client,
                    have,
                });
            }
            n
        }
        None => {
            // The client's RNIC shares the fabric's transport and extensions; its own
            // persistence domain plays no part.
            let rnic = Rnic::new(
                client,
                config,
                &crate::runtime::real_time_profile(profile),
                Prng::from_seed(client as u64),
            );
            let n = RtNode::new(rnic);
            remora_exec::spawn_local(n.clone().drive());
            n
        }
    };
    Ok(Opening {
        addr: addr.to_string(),
        node,
        config,
        server,
        stream: s,
        claimed: key,
    })
}
