//! Connecting to a `remora serve` server: the connection manager's handshake, then a
//! library [`Client`] on a real-time node.

use crate::cm::{Cm, CmError, RefuseCode, CM_FRAME};
use crate::runtime::RtNode;
use remora::Client;
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::Rnic;
use remora_model::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
    /// The server spoke something else.
    #[error("bad handshake from {addr}: {err}")]
    Handshake {
        /// Server address.
        addr: String,
        /// What was wrong.
        err: CmError,
    },
    /// The server sent a valid frame out of turn.
    #[error("unexpected handshake step from {0}")]
    Protocol(String),
    /// The server refused.
    #[error("{addr} refused the connection: {code:?}")]
    Refused {
        /// Server address.
        addr: String,
        /// Why.
        code: RefuseCode,
    },
    /// Local verbs failed.
    #[error(transparent)]
    Verbs(#[from] remora_verbs::VerbsError),
}

/// Connects to `addr` (`host:port`; IPv4, IPv6 or a name). Returns the local node, the
/// server's configuration, and a library client whose QP is connected; call
/// [`Client::connect`] next. Must run inside a `tokio::task::LocalSet`.
pub async fn connect(
    addr: &str,
    profile: &LatencyProfile,
) -> Result<(RtNode, ServerConfig, Client<RtNode>), ConnectError> {
    let io = |err| ConnectError::Io {
        addr: addr.to_string(),
        err,
    };
    let mut s = TcpStream::connect(addr).await.map_err(io)?;
    s.set_nodelay(true).map_err(io)?;
    s.write_all(&Cm::Hello.emit()).await.map_err(io)?;
    let mut b = [0u8; CM_FRAME];
    let mut next = async |s: &mut TcpStream| -> Result<Cm, ConnectError> {
        s.read_exact(&mut b).await.map_err(|err| ConnectError::Io {
            addr: addr.to_string(),
            err,
        })?;
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
    };
    let Cm::Assign {
        client,
        server,
        config,
    } = next(&mut s).await?
    else {
        return Err(ConnectError::Protocol(addr.to_string()));
    };
    // The client's RNIC shares the fabric's transport and extensions; its own persistence
    // domain plays no part.
    let rnic = Rnic::new(
        client,
        config,
        &crate::runtime::real_time_profile(profile),
        Prng::from_seed(client as u64),
    );
    let node = RtNode::new(rnic);
    tokio::task::spawn_local(node.clone().drive());
    let lib = Client::create(node.clone())?;
    s.write_all(&Cm::Ready { qp: lib.qp() }.emit())
        .await
        .map_err(io)?;
    let Cm::Accepted { qp } = next(&mut s).await? else {
        return Err(ConnectError::Protocol(addr.to_string()));
    };
    node.connect(lib.qp(), server, qp)?;
    let (read, write) = s.into_split();
    let my_qp = lib.qp();
    node.attach(server, read, write, move |n| {
        let _ = n.with(|r, now| r.destroy_qp(now, my_qp));
    });
    Ok((node, config, lib))
}
