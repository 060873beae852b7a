//! The client side: [`RealClient`] connects a [`DurableClient`]
//! to a soft-RNIC server, and reconnects it after the server restarted.

use crate::api::{RpcError, ServerCosts};
use crate::design::{Design, FlushForm};
use crate::durable::{DurableClient, DurableOptions, Fault};
use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::time::Duration;
use remora_soft::client::{ConnectError, Opening};
use remora_soft::runtime::RtNode;
use remora_verbs::*;

use super::hello::{DurableClaim, DurableHello, HelloError, HELLO_BYTES};
use super::HANDSHAKE_TIMEOUT;

/// Why a real client could not connect.
#[derive(Debug, thiserror::Error)]
pub enum RealConnectError {
    /// The soft connection manager failed.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The server's hello did not parse.
    #[error("from {addr}: {err}")]
    Hello {
        /// Server address.
        addr: String,
        /// What was wrong.
        err: HelloError,
    },
    /// The server runs another design than the client asked for.
    #[error("{addr} runs {server}, not {asked}")]
    Design {
        /// Server address.
        addr: String,
        /// The server's design.
        server: Design,
        /// The client's.
        asked: Design,
    },
    /// The server changed the connection's options across a restart.
    #[error("{addr} came back with other connection options: {what}")]
    Changed {
        /// Server address.
        addr: String,
        /// What changed.
        what: String,
    },
    /// The server refused the client's claim of its connection: the connection's key is
    /// not the one this client was given, because the server gave the connection to a new
    /// client since this one left. The log holds the other client's requests now, so which
    /// of this client's unacknowledged requests ran cannot be told.
    #[error(
        "{addr} gave connection {node} to another client since this one left (its key \
         changed); this client's unacknowledged requests cannot be accounted for"
    )]
    TakenOver {
        /// Server address.
        addr: String,
        /// The connection's node id.
        node: u32,
    },
    /// The handshake took too long.
    #[error("{0}: handshake timed out")]
    Timeout(String),
    /// The server's hello names another configuration than its connection manager
    /// announced: the Flush plan of one is not correct for the other.
    #[error(
        "{addr} announced configuration {announced} when connecting but {hello} in its \
         durable-RPC hello"
    )]
    ConfigMismatch {
        /// Server address.
        addr: String,
        /// The connection manager's.
        announced: ServerConfig,
        /// The hello's.
        hello: ServerConfig,
    },
    /// The server runs a negative control (a deliberate protocol error, for the crash
    /// checker) the client was not told to expect: it would make the client take requests
    /// as durable that are not.
    #[error(
        "{addr} runs the negative control {fault:?}, a deliberate protocol error; a client \
         joins one only when asked to (ClientSettings::fault)"
    )]
    Fault {
        /// Server address.
        addr: String,
        /// The fault the server announced.
        fault: Fault,
    },
    /// The durable-RPC client failed to set up or resume.
    #[error(transparent)]
    Rpc(#[from] RpcError),
}

/// A [`DurableClient`] connected to a soft-RNIC server.
pub struct RealClient {
    /// The durable-RPC client: call it through [`crate::RpcClient`].
    pub client: DurableClient<RtNode>,
    /// The local node.
    pub node: RtNode,
    /// What the server said on the last (re)connection.
    pub hello: DurableHello,
    profile: LatencyProfile,
}

/// A connection up to the server's [`DurableHello`]: the connection manager's handshake
/// with a [`DurableClaim`] right after `Hello`, then the server's hello.
struct Opened {
    opening: Opening,
    hello: DurableHello,
}

/// Connects to `addr`, claims `node`'s id with the connection's `key` (a new node, with the
/// assigned id, when `None`) and reads the server's hello.
async fn open(
    addr: &str,
    profile: &LatencyProfile,
    node: Option<(RtNode, u64)>,
    fault: Option<Fault>,
) -> Result<Opened, RealConnectError> {
    let claim = DurableClaim {
        node: node.as_ref().map_or(0, |(n, _)| n.node()),
        key: node.as_ref().map_or(0, |(_, k)| *k),
    };
    let frame = claim.emit();
    let opening = remora_soft::client::open_with(addr, profile, node.map(|(n, _)| n), &frame);
    let mut opening = match opening.await {
        Err(remora_soft::client::ConnectError::Refused {
            code: remora_soft::cm::RefuseCode::NotOwner,
            ..
        }) => {
            return Err(RealConnectError::TakenOver {
                addr: addr.to_string(),
                node: claim.node,
            })
        }
        r => r?,
    };
    let mut b = [0u8; HELLO_BYTES];
    opening
        .stream()
        .read_exact(&mut b)
        .await
        .map_err(ConnectError::lost(addr))?;
    let hello = DurableHello::parse(&b).map_err(|err| RealConnectError::Hello {
        addr: addr.to_string(),
        err,
    })?;
    if hello.info.config != opening.config() {
        return Err(RealConnectError::ConfigMismatch {
            addr: addr.to_string(),
            announced: opening.config(),
            hello: hello.info.config,
        });
    }
    if let Some(announced) = hello.opts.fault.filter(|f| Some(*f) != fault) {
        return Err(RealConnectError::Fault {
            addr: addr.to_string(),
            fault: announced,
        });
    }
    Ok(Opened { opening, hello })
}

/// Client-side settings of a real connection.
#[derive(Clone, Debug)]
pub struct ClientSettings {
    /// The design the client expects (`None`: whatever the server runs).
    pub design: Option<Design>,
    /// Requests per Flush (§4.3).
    pub batch: u32,
    /// Idle time after which the client probes the server.
    pub probe_interval: Duration,
    /// Idle time after which a wait fails.
    pub reply_timeout: Duration,
    /// The negative control the client joins (the crash checker's), or `None`: a server
    /// that announces another is refused.
    pub fault: Option<Fault>,
}

impl Default for ClientSettings {
    /// Any design, no batching, a 1 ms probe and a 10 s time-out: wall-clock values (the
    /// simulator's defaults are microseconds).
    fn default() -> Self {
        ClientSettings {
            design: None,
            batch: 1,
            probe_interval: Duration::from_millis(1),
            reply_timeout: Duration::from_millis(10_000),
            fault: None,
        }
    }
}

impl RealClient {
    /// Connects to a durable-RPC server at `addr` (`host:port`; IPv4, IPv6 or a name),
    /// adopts its connection options, and attaches. Must run inside a
    /// `remora_exec::block_on`.
    pub async fn connect(
        addr: &str,
        profile: &LatencyProfile,
        settings: &ClientSettings,
    ) -> Result<RealClient, RealConnectError> {
        let hs = async {
            let o = open(addr, profile, None, settings.fault).await?;
            let hello = o.hello.clone();
            if let Some(asked) = settings.design {
                if asked != hello.opts.design {
                    return Err(RealConnectError::Design {
                        addr: addr.to_string(),
                        server: hello.opts.design,
                        asked,
                    });
                }
            }
            let mut mine = DurableOptions::new(hello.opts.design);
            mine.batch = settings.batch;
            mine.probe_interval = settings.probe_interval;
            mine.reply_timeout = settings.reply_timeout;
            let opts = hello.adopt(&mine);
            let node = o.opening.node().clone();
            let mut client = DurableClient::create(node.clone(), &opts)?;
            o.opening.finish(client.qp()).await?;
            client.attach(hello.info)?;
            Ok(RealClient {
                client,
                node,
                hello,
                profile: profile.clone(),
            })
        };
        remora_exec::time::timeout(HANDSHAKE_TIMEOUT, hs)
            .await
            .map_err(|_| RealConnectError::Timeout(addr.to_string()))?
    }

    /// After the server restarted (its old connection failed): connects the same client,
    /// on a new queue pair of the same node, to `addr`, and runs
    /// [`DurableClient::resume`], which fails if the recovered server lost a request it
    /// had acknowledged as durable. Then [`crate::RpcClient::drain`] returns the replies
    /// of requests recovery executed.
    pub async fn reconnect(&mut self, addr: &str) -> Result<(), RealConnectError> {
        let hs = async {
            let o = open(
                addr,
                &self.profile,
                Some((self.node.clone(), self.hello.key)),
                self.hello.opts.fault,
            )
            .await?;
            let hello = o.hello.clone();
            if hello.opts != self.hello.opts || hello.kv_base != self.hello.kv_base {
                return Err(RealConnectError::Changed {
                    addr: addr.to_string(),
                    what: format!("{:?} then {:?}", self.hello.opts, hello.opts),
                });
            }
            if hello.info.config != self.hello.info.config {
                return Err(RealConnectError::Changed {
                    addr: addr.to_string(),
                    what: format!(
                        "configuration {} then {}",
                        self.hello.info.config, hello.info.config
                    ),
                });
            }
            let qp = self.client.reopen().await?;
            o.opening.finish(qp).await?;
            self.client.attach(hello.info)?;
            self.hello = hello;
            Ok::<_, RealConnectError>(())
        };
        remora_exec::time::timeout(HANDSHAKE_TIMEOUT, hs)
            .await
            .map_err(|_| RealConnectError::Timeout(addr.to_string()))??;
        self.client.resume().await?;
        Ok(())
    }
}

/// Default server options for the real backend: `DurableOptions::new(design)` with the
/// costs of `costs`.
pub fn server_options(design: Design, form: FlushForm, costs: ServerCosts) -> DurableOptions {
    let mut o = DurableOptions::new(design);
    o.flush.form = form;
    o.costs = costs;
    o
}
