//! The taxonomy of remote persistence (seed 000 §3) as data: `taxonomy/methods.toml` holds
//! every method of Tables 2 and 3 as steps in the paper's notation and maps each of the 72
//! cells (12 configurations × {WRITE, WRITE_WITH_IMM, SEND} × {singleton, compound}) to one.
//! This module parses and validates that file, applies the rules the paper states in its
//! text rather than its tables ([`Taxonomy::method_for`]), and prints the tables back.

use remora_model::config::{PersistenceDomain, RqwrbPlacement, ServerConfig, Transport};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// The shipped taxonomy.
pub const METHODS_TOML: &str = include_str!("../../../taxonomy/methods.toml");

/// Which of the two updates a step concerns.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Item {
    /// The first (or only) update.
    A,
    /// The second update of a compound update, persisted after `a`.
    B,
}

/// The RDMA operation a scenario is built on (the tables' columns).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Primitive {
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with immediate data.
    WriteImm,
    /// RDMA SEND.
    Send,
}

impl Primitive {
    /// The three, in the tables' column order.
    pub const ALL: [Primitive; 3] = [Primitive::Write, Primitive::WriteImm, Primitive::Send];
    /// Column name.
    pub fn name(self) -> &'static str {
        match self {
            Primitive::Write => "WRITE",
            Primitive::WriteImm => "WRITEIMM",
            Primitive::Send => "SEND",
        }
    }
}

/// Singleton (Table 2) or compound (Table 3) update.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Update {
    /// One contiguous update `a`.
    Singleton,
    /// `a` then `b`, persisted in that order.
    Compound,
}

impl Update {
    /// Both kinds.
    pub const ALL: [Update; 2] = [Update::Singleton, Update::Compound];
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Update::Singleton => "singleton",
            Update::Compound => "compound",
        }
    }
}

/// One step of a method.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// `Rq Write(x)`.
    RqWrite(Item),
    /// `Rq WriteImm(x)`.
    RqWriteImm(Item),
    /// `Rq Send(a)` or `Rq Send(a,b)`: the updates travel in the message.
    RqSend(Vec<Item>),
    /// `Rq Send(&x)`: a message naming the location just written.
    RqSendAddr(Item),
    /// `Rq Flush`: an RDMA FLUSH (or its READ emulation) of what the method wrote since
    /// the last one (the paper's FLUSH names no range; an IBTA FLUSH covers only the bytes
    /// it names, so the client names them: the region's, and the receive ring's after a
    /// SEND).
    RqFlush,
    /// `Rq Flush(x)`: a FLUSH of item `x`'s bytes in the region and nothing else. No method
    /// of the paper has one: negative controls do, to show that a FLUSH naming other
    /// bytes than were written is caught.
    RqFlushOf(Item),
    /// `Rq CompFlush`: wait for the last FLUSH's completion.
    RqCompFlush,
    /// `Rq Writeatomic(x)`: an 8-byte ATOMIC WRITE.
    RqWriteAtomic(Item),
    /// `Rq CompWrite(x)`, `Rq CompWriteImm(x)`, `Rq CompSend(..)`: wait for the completion
    /// of the operation just posted.
    RqComp,
    /// `Rq Receive(ack)`.
    RqReceiveAck,
    /// `Rsp Receive(..)`.
    RspReceive,
    /// `Rsp copy(..)`, optionally `+ flush(..)`.
    RspCopy {
        /// The copy is followed by a local flush.
        flush: bool,
    },
    /// `Rsp flush(..)`.
    RspFlush,
    /// `Rsp Send(ack)`.
    RspSendAck,
}

/// A step that did not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown taxonomy step {0:?}")]
pub struct StepError(String);

impl std::str::FromStr for Step {
    type Err = StepError;
    fn from_str(s: &str) -> Result<Step, StepError> {
        let err = || StepError(s.to_string());
        let item = |x: &str| match x {
            "a" => Ok(Item::A),
            "b" => Ok(Item::B),
            _ => Err(err()),
        };
        let (who, rest) = s.split_once(' ').ok_or_else(err)?;
        let (op, arg) = match rest.split_once('(') {
            Some((op, arg)) => (op, Some(arg.split(')').next().ok_or_else(err)?)),
            None => (rest, None),
        };
        Ok(match (who, op, arg) {
            ("Rq", "Write", Some(x)) => Step::RqWrite(item(x)?),
            ("Rq", "WriteImm", Some(x)) => Step::RqWriteImm(item(x)?),
            ("Rq", "Writeatomic", Some(x)) => Step::RqWriteAtomic(item(x)?),
            ("Rq", "Send", Some(x)) if x.starts_with('&') => Step::RqSendAddr(item(&x[1..])?),
            ("Rq", "Send", Some(x)) => {
                Step::RqSend(x.split(',').map(item).collect::<Result<_, _>>()?)
            }
            ("Rq", "Flush", None) => Step::RqFlush,
            ("Rq", "Flush", Some(x)) => Step::RqFlushOf(item(x)?),
            ("Rq", "CompFlush", None) => Step::RqCompFlush,
            ("Rq", "CompWrite" | "CompWriteImm" | "CompSend", Some(_)) => Step::RqComp,
            ("Rq", "Receive", Some("ack")) => Step::RqReceiveAck,
            ("Rsp", "Receive", Some(_)) => Step::RspReceive,
            ("Rsp", "copy", Some(_)) => Step::RspCopy {
                flush: rest.contains("flush"),
            },
            ("Rsp", "flush", Some(_)) => Step::RspFlush,
            ("Rsp", "Send", Some("ack")) => Step::RspSendAck,
            _ => return Err(err()),
        })
    }
}

/// A method of remote persistence: a named sequence of steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Method {
    /// Name, as in `taxonomy/methods.toml`.
    pub name: String,
    /// The seed table it comes from (2 singleton, 3 compound).
    pub table: u8,
    /// The steps, in the paper's notation.
    pub text: Vec<String>,
    /// The steps, parsed.
    pub steps: Vec<Step>,
}

impl Method {
    /// True when the responder's CPU takes part (a two-sided method).
    pub fn two_sided(&self) -> bool {
        self.steps.iter().any(|s| matches!(s, Step::RqReceiveAck))
    }
    /// True when the method uses an RDMA FLUSH.
    pub fn uses_flush(&self) -> bool {
        self.steps
            .iter()
            .any(|s| matches!(s, Step::RqFlush | Step::RqFlushOf(_)))
    }
    /// The primitive the method is built on.
    pub fn primitive(&self) -> Primitive {
        match self.steps.first() {
            Some(Step::RqWriteImm(_)) => Primitive::WriteImm,
            Some(Step::RqSend(_)) => Primitive::Send,
            _ => Primitive::Write,
        }
    }
    /// The update kind.
    pub fn update(&self) -> Update {
        if self.table == 3 {
            Update::Compound
        } else {
            Update::Singleton
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.text.join("; "))
    }
}

/// One of the 72 scenarios of seed 000 §4.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scenario {
    /// Server configuration.
    pub config: ServerConfig,
    /// Primitive.
    pub primitive: Primitive,
    /// Update kind.
    pub update: Update,
}

impl Scenario {
    /// All 72, in table order: update, then configuration (Table 1 order), then primitive.
    pub fn all() -> Vec<Scenario> {
        let mut v = Vec::with_capacity(72);
        for update in Update::ALL {
            for config in ServerConfig::table1() {
                for primitive in Primitive::ALL {
                    v.push(Scenario {
                        config,
                        primitive,
                        update,
                    });
                }
            }
        }
        v
    }

    /// A short stable name, e.g. `singleton/DMP+DDIO+DRAM-RQWRB/WRITE`.
    pub fn name(&self) -> String {
        format!(
            "{}/{}/{}",
            self.update.name(),
            self.config.name(),
            self.primitive.name()
        )
    }
}

/// Options that decide between a table's method and the text's alternatives.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Length of `b` in a compound update; ATOMIC WRITE carries exactly 8 bytes (seed 000
    /// §3.3: "at most 8 bytes"; the IBTA ATOMIC WRITE is 8 bytes, and the client refuses
    /// any other length), so any other `b` waits for the first FLUSH.
    pub b_len: u64,
}

impl Default for Shape {
    fn default() -> Self {
        Shape { b_len: 8 }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MethodToml {
    table: u8,
    steps: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    methods: BTreeMap<String, MethodToml>,
    singleton: BTreeMap<String, Vec<Vec<String>>>,
    compound: BTreeMap<String, Vec<Vec<String>>>,
}

/// The taxonomy file is inconsistent.
#[derive(Debug, thiserror::Error)]
pub enum TaxonomyError {
    /// Not valid TOML or the wrong shape.
    #[error("taxonomy file: {0}")]
    Toml(#[from] toml::de::Error),
    /// A step is not in the notation.
    #[error("method {0}: {1}")]
    Step(String, StepError),
    /// A cell names a method that does not exist, or the table is not 4 × 3 × 3.
    #[error("taxonomy file: {0}")]
    Shape(String),
}

/// The parsed taxonomy.
#[derive(Clone, Debug)]
pub struct Taxonomy {
    methods: BTreeMap<String, Method>,
    cells: BTreeMap<(Update, bool, RqwrbPlacement, PersistenceDomain, Primitive), String>,
}

/// The four table rows in the paper's order: (DDIO, RQWRB placement, row key).
const ROWS: [(bool, RqwrbPlacement, &str); 4] = [
    (true, RqwrbPlacement::Dram, "DDIO+DRAM-RQWRB"),
    (true, RqwrbPlacement::Pm, "DDIO+PM-RQWRB"),
    (false, RqwrbPlacement::Dram, "noDDIO+DRAM-RQWRB"),
    (false, RqwrbPlacement::Pm, "noDDIO+PM-RQWRB"),
];
const DOMAINS: [PersistenceDomain; 3] = [
    PersistenceDomain::Dmp,
    PersistenceDomain::Mhp,
    PersistenceDomain::Wsp,
];

impl Taxonomy {
    /// The shipped taxonomy.
    pub fn shipped() -> Taxonomy {
        // Parsed once per process: every simulated connection asks for it.
        static SHIPPED: std::sync::OnceLock<Taxonomy> = std::sync::OnceLock::new();
        SHIPPED
            .get_or_init(|| Taxonomy::from_toml(METHODS_TOML).expect("shipped taxonomy is valid"))
            .clone()
    }

    /// Parses and validates a taxonomy file.
    pub fn from_toml(text: &str) -> Result<Taxonomy, TaxonomyError> {
        let file: FileToml = toml::from_str(text)?;
        let mut methods = BTreeMap::new();
        for (name, m) in file.methods {
            let steps = m
                .steps
                .iter()
                .map(|s| s.parse())
                .collect::<Result<Vec<Step>, _>>()
                .map_err(|e| TaxonomyError::Step(name.clone(), e))?;
            if !(m.table == 2 || m.table == 3) {
                return Err(TaxonomyError::Shape(format!(
                    "method {name}: table must be 2 or 3"
                )));
            }
            let mentions_b = steps.iter().any(|s| {
                matches!(
                    s,
                    Step::RqWrite(Item::B)
                        | Step::RqWriteImm(Item::B)
                        | Step::RqWriteAtomic(Item::B)
                        | Step::RqSendAddr(Item::B)
                ) || matches!(s, Step::RqSend(v) if v.contains(&Item::B))
            });
            if mentions_b != (m.table == 3) {
                return Err(TaxonomyError::Shape(format!(
                    "method {name}: a Table 3 method must update b, a Table 2 one must not"
                )));
            }
            methods.insert(
                name.clone(),
                Method {
                    name,
                    table: m.table,
                    text: m.steps,
                    steps,
                },
            );
        }
        let mut cells = BTreeMap::new();
        for (update, table) in [
            (Update::Singleton, &file.singleton),
            (Update::Compound, &file.compound),
        ] {
            if table.len() != 4 {
                return Err(TaxonomyError::Shape(format!(
                    "{} table needs 4 rows",
                    update.name()
                )));
            }
            for (ddio, rq, key) in ROWS {
                let row = table.get(key).ok_or_else(|| {
                    TaxonomyError::Shape(format!("{} table lacks row {key}", update.name()))
                })?;
                if row.len() != 3 || row.iter().any(|c| c.len() != 3) {
                    return Err(TaxonomyError::Shape(format!(
                        "row {key} needs 3 domains × 3 primitives"
                    )));
                }
                for (d, domain) in DOMAINS.iter().enumerate() {
                    for (p, prim) in Primitive::ALL.iter().enumerate() {
                        let name = &row[d][p];
                        let m = methods.get(name).ok_or_else(|| {
                            TaxonomyError::Shape(format!("row {key}: unknown method {name}"))
                        })?;
                        if m.update() != update || m.primitive() != *prim {
                            return Err(TaxonomyError::Shape(format!(
                                "row {key}: method {name} does not fit its cell"
                            )));
                        }
                        cells.insert((update, ddio, rq, *domain, *prim), name.clone());
                    }
                }
            }
        }
        Ok(Taxonomy { methods, cells })
    }

    /// A method by name.
    pub fn method(&self, name: &str) -> Option<&Method> {
        self.methods.get(name)
    }

    /// Every method.
    pub fn methods(&self) -> impl Iterator<Item = &Method> {
        self.methods.values()
    }

    /// The method the tables give for a configuration, ignoring transport and NIC
    /// capabilities.
    pub fn table_method(
        &self,
        config: &ServerConfig,
        primitive: Primitive,
        update: Update,
    ) -> &Method {
        let name = &self.cells[&(update, config.ddio, config.rqwrb, config.domain, primitive)];
        &self.methods[name]
    }

    /// The correct method for a scenario on a real server, applying the rules seed 000
    /// states in its text:
    /// - §3.2 "iWARP": a completion proves nothing under iWARP, so WSP servers on iWARP
    ///   use the MHP methods (which FLUSH);
    /// - §3.3: ATOMIC WRITE carries at most 8 bytes (exactly 8 in the IBTA verb), and
    ///   some RNICs lack it (§3.4, §4.2); then the requester waits for the first FLUSH's
    ///   completion before writing `b`.
    ///
    /// A missing native FLUSH does not change the method: the library emulates FLUSH by
    /// READ (§3.4), see [`remora_verbs::FlushMethod`].
    pub fn method_for(
        &self,
        config: &ServerConfig,
        primitive: Primitive,
        update: Update,
        shape: Shape,
    ) -> &Method {
        let mut table_config = *config;
        if config.transport == Transport::IWarp && config.domain == PersistenceDomain::Wsp {
            table_config.domain = PersistenceDomain::Mhp;
        }
        let m = self.table_method(&table_config, primitive, update);
        if m.steps.iter().any(|s| matches!(s, Step::RqWriteAtomic(_)))
            && (shape.b_len != 8 || !config.caps.atomic_write)
        {
            return &self.methods["write-flush-wait-write-flush"];
        }
        m
    }

    /// Other correct methods for the scenario's configuration and update kind, besides the
    /// [`method_for`](Self::method_for) of each primitive: the ∗ footnote's message
    /// exchange in place of a FLUSH under DMP without DDIO, and the wait-for-FLUSH variant
    /// of the compound WRITE method.
    pub fn alternatives(&self, config: &ServerConfig, update: Update) -> Vec<&Method> {
        let mut v = Vec::new();
        if config.domain == PersistenceDomain::Dmp && !config.ddio {
            match update {
                Update::Singleton => v.push(&self.methods["write-msg"]),
                Update::Compound => {
                    v.push(&self.methods["write-msg-2"]);
                    v.push(&self.methods["write-flush-wait-write-flush"]);
                }
            }
        }
        v
    }

    /// Whether `method` makes `update`s durable (and a compound update's in order) on a
    /// server of `config`: a method of this taxonomy for that update kind that is either
    /// two-sided (the message-passing idiom is universal, seed 000 §3.4: the responder
    /// flushes under DMP whatever the method's steps say) or one-sided and given for
    /// `config` by [`method_for`](Self::method_for) or [`alternatives`](Self::alternatives),
    /// or for a weaker persistence domain (what is durable under DMP without DDIO is under
    /// MHP, with or without DDIO, and what is under MHP is under WSP). Gives why not.
    pub fn check_method(
        &self,
        config: &ServerConfig,
        update: Update,
        method: &Method,
    ) -> Result<(), &'static str> {
        if self.methods.get(&method.name) != Some(method) {
            return Err("not a method of the taxonomy");
        }
        if method.update() != update {
            return Err("made for the other kind of update");
        }
        if method.two_sided() {
            return Ok(());
        }
        for domain in DOMAINS.into_iter().filter(|d| *d <= config.domain) {
            let mut c = *config;
            c.domain = domain;
            if domain < config.domain {
                c.ddio = false;
            }
            let shapes = [Shape { b_len: 8 }, Shape { b_len: 16 }];
            let admitted = Primitive::ALL
                .iter()
                .flat_map(|p| shapes.iter().map(|s| self.method_for(&c, *p, update, *s)))
                .chain(self.alternatives(&c, update))
                .any(|m| m.name == method.name);
            if admitted {
                return Ok(());
            }
        }
        Err("not correct for this server (seed 000 Tables 2-3)")
    }

    /// Table 2 or 3 as Markdown, laid out like the paper (rows: DDIO × RQWRB; columns:
    /// domain × primitive; steps separated by `<br>`).
    pub fn markdown(&self, update: Update) -> String {
        let mut s = String::new();
        let (num, title) = match update {
            Update::Singleton => (2, "Taxonomy for singleton updates (value a)"),
            Update::Compound => (3, "Taxonomy for compound updates (a, then b)"),
        };
        s.push_str(&format!("### Table {num}: {title}\n\n|  |"));
        for d in DOMAINS {
            for p in Primitive::ALL {
                s.push_str(&format!(" {:?} {} |", d, p.name()).to_uppercase());
            }
        }
        s.push_str("\n|---|");
        s.push_str(&"---|".repeat(9));
        s.push('\n');
        for (ddio, rq, key) in ROWS {
            s.push_str(&format!("| {key} |"));
            for d in DOMAINS {
                for p in Primitive::ALL {
                    let name = &self.cells[&(update, ddio, rq, d, p)];
                    let m = &self.methods[name];
                    s.push_str(&format!(" {} |", m.text.join("<br>")));
                }
            }
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_taxonomy_covers_all_72_scenarios() {
        let t = Taxonomy::shipped();
        let all = Scenario::all();
        assert_eq!(all.len(), 72);
        for sc in all {
            let m = t.table_method(&sc.config, sc.primitive, sc.update);
            assert_eq!(m.update(), sc.update, "{}", sc.name());
            assert_eq!(m.primitive(), sc.primitive, "{}", sc.name());
        }
    }

    #[test]
    fn spot_checks_against_the_paper() {
        let t = Taxonomy::shipped();
        let c = |s: &str| s.parse::<ServerConfig>().unwrap();
        // Table 2: DMP + DDIO needs the responder's CPU for WRITE.
        let m = t.table_method(
            &c("DMP+DDIO+DRAM-RQWRB"),
            Primitive::Write,
            Update::Singleton,
        );
        assert!(m.two_sided() && m.text[1] == "Rq Send(&a)");
        // Table 2: WSP + PM-RQWRB treats SEND as one-sided, completion only.
        let m = t.table_method(&c("WSP+DDIO+PM-RQWRB"), Primitive::Send, Update::Singleton);
        assert_eq!(m.text, ["Rq Send(a)", "Rq CompSend(a)"]);
        // Table 3: DMP without DDIO uses ATOMIC WRITE for b.
        let m = t.table_method(
            &c("DMP+noDDIO+DRAM-RQWRB"),
            Primitive::Write,
            Update::Compound,
        );
        assert!(m.steps.contains(&Step::RqWriteAtomic(Item::B)));
        // Table 3: MHP pipelines both WRITEs before one FLUSH.
        let m = t.table_method(&c("MHP+DDIO+PM-RQWRB"), Primitive::Write, Update::Compound);
        assert_eq!(
            m.steps,
            vec![
                Step::RqWrite(Item::A),
                Step::RqWrite(Item::B),
                Step::RqFlush,
                Step::RqCompFlush
            ]
        );
    }

    #[test]
    fn text_rules_change_the_method() {
        let t = Taxonomy::shipped();
        let mut wsp: ServerConfig = "WSP+noDDIO+PM-RQWRB".parse().unwrap();
        assert!(!t
            .method_for(&wsp, Primitive::Write, Update::Singleton, Shape::default())
            .uses_flush());
        wsp.transport = Transport::IWarp;
        assert_eq!(
            t.method_for(&wsp, Primitive::Write, Update::Singleton, Shape::default())
                .name,
            "write-flush"
        );
        let dmp: ServerConfig = "DMP+noDDIO+PM-RQWRB".parse().unwrap();
        assert_eq!(
            t.method_for(&dmp, Primitive::Write, Update::Compound, Shape { b_len: 8 })
                .name,
            "write-flush-atomic-flush"
        );
        assert_eq!(
            t.method_for(
                &dmp,
                Primitive::Write,
                Update::Compound,
                Shape { b_len: 16 }
            )
            .name,
            "write-flush-wait-write-flush"
        );
        // Shorter than 8 bytes too: the ATOMIC WRITE verb carries exactly 8, and the
        // client refuses any other length, so the table's method would fail every update.
        for b_len in [1, 4, 7] {
            let m = t.method_for(&dmp, Primitive::Write, Update::Compound, Shape { b_len });
            assert_eq!(m.name, "write-flush-wait-write-flush", "b of {b_len} bytes");
        }
        let mut no_aw = dmp;
        no_aw.caps.atomic_write = false;
        assert_eq!(
            t.method_for(&no_aw, Primitive::Write, Update::Compound, Shape::default())
                .name,
            "write-flush-wait-write-flush"
        );
    }

    #[test]
    fn broken_files_are_rejected() {
        let bad_step = METHODS_TOML.replace("\"Rq CompFlush\"]", "\"Rq Teleport\"]");
        assert!(matches!(
            Taxonomy::from_toml(&bad_step),
            Err(TaxonomyError::Step(..))
        ));
        let bad_ref = METHODS_TOML.replacen(
            "[\"write-msg\", \"writeimm-msg\"",
            "[\"nope\", \"writeimm-msg\"",
            1,
        );
        assert!(matches!(
            Taxonomy::from_toml(&bad_ref),
            Err(TaxonomyError::Shape(_))
        ));
        let misfit = METHODS_TOML.replacen(
            "[\"write-msg\", \"writeimm-msg\"",
            "[\"send-flush\", \"writeimm-msg\"",
            1,
        );
        assert!(Taxonomy::from_toml(&misfit).is_err());
    }

    #[test]
    fn markdown_tables_have_every_cell() {
        let t = Taxonomy::shipped();
        let md = t.markdown(Update::Compound);
        assert_eq!(
            md.lines()
                .filter(|l| l.starts_with("| ") && l.contains("RQWRB |"))
                .count(),
            4
        );
        assert!(md.contains("Rq Writeatomic(b)"));
        assert!(md.contains("| DMP WRITE |"));
    }
}
