//! A client and a server joined on the simulator, running this library: what the planner,
//! RemoteLog and the crash checker build on.

use crate::client::Client;
use crate::responder::{CpuCosts, RecoveryReport, Responder, ServerSetup};
use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;
use remora_sim::{NodeHandle, Sim};
use remora_verbs::{MrInfo, Verbs, VerbsError};

/// A simulated server and client.
pub struct SimPair {
    /// The simulation.
    pub sim: Sim,
    /// The server node.
    pub server: NodeHandle,
    /// The client node.
    pub client: NodeHandle,
    /// The server's setup.
    pub setup: ServerSetup,
    costs: CpuCosts,
}

impl SimPair {
    /// A server with `config` and a client on the same fabric (same transport and NIC).
    pub fn new(
        seed: u64,
        profile: LatencyProfile,
        config: ServerConfig,
        setup: ServerSetup,
    ) -> Self {
        let costs = CpuCosts::from_profile(&profile);
        let sim = Sim::new(seed, profile);
        let server = sim.add_node("server", config);
        // The client's own persistence domain does not matter; its transport and RNIC do.
        let client = sim.add_node("client", config);
        SimPair {
            sim,
            server,
            client,
            setup,
            costs,
        }
    }

    /// Sets up the server's side, connects a new client to it and starts the responder.
    /// Returns the client (call [`Client::connect`] in a task) and the server's region.
    pub fn open(&self) -> Result<(Client<NodeHandle>, MrInfo), VerbsError> {
        let responder = Responder::create(self.server.clone(), self.setup, self.costs)?;
        self.serve(responder)
    }

    /// Connects a new client to an already set-up responder (for instance the one
    /// [`recover_server`](Self::recover_server) returned) and starts serving it.
    pub fn serve(
        &self,
        mut responder: Responder<NodeHandle>,
    ) -> Result<(Client<NodeHandle>, MrInfo), VerbsError> {
        let client = Client::create(self.client.clone())?;
        self.sim
            .connect((&self.client, client.qp()), (&self.server, responder.qp()))?;
        let region = responder.region();
        self.sim.spawn_on(&self.server, async move {
            responder.serve().await;
        });
        Ok((client, region))
    }

    /// After a power failure of the server: powers it back on, sets the server side up
    /// again at the same addresses and runs recovery. The region's contents are then what
    /// a recovered server would serve.
    pub fn recover_server(&self) -> Result<(Responder<NodeHandle>, RecoveryReport), VerbsError> {
        self.sim.restart(self.server.id());
        let mut r = Responder::create(self.server.clone(), self.setup, self.costs)?;
        // A task of the server: a power failure during recovery stops it there.
        let report = self
            .sim
            .block_on_node(&self.server, Instant::NEVER, async move {
                let rep = r.recover().await;
                (r, rep)
            });
        report.ok_or(VerbsError::NodeDown(self.server.id()))
    }

    /// Reads the server's PM as the server's CPU sees it now.
    pub fn server_read(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        self.server.load(remora_verbs::Space::Pm, addr, &mut b);
        b
    }
}
