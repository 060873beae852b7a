//! The key-value service of seed 003 §5.1: objects live in the server's PM, the index at
//! the client ("Clients ... maintain KV indexes in the main memory of clients locally"),
//! so a request names its object directly and the server applies it without a lookup.
//!
//! Object slot layout (little-endian), `slot_bytes` each, 64-byte aligned:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | connection id of the last writer |
//! | 4..8 | value length |
//! | 8..16 | sequence number of the last write on that connection |
//! | 16..20 | CRC-32C of bytes 0..16 and the value |
//! | 20..64 | reserved (zero) |
//! | 64.. | value |
//!
//! The (connection, sequence) stamp makes re-executing a logged request after a crash
//! idempotent (seed 003 §4.2: "the RPC can be re-executed with the operation log"): a Put
//! whose stamp the object already carries, or passed, was executed and is skipped.

use crate::api::{Op, Reply, ReplyStatus, RpcError};
use remora_verbs::{Space, Verbs};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// Bytes of an object's header.
pub const OBJECT_HEADER: u64 = 64;

/// Where the objects live.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct KvLayout {
    /// PM address of slot 0 (64-byte aligned).
    pub base: u64,
    /// Number of slots (keys `0..objects`).
    pub objects: u64,
    /// Largest value a slot holds.
    pub max_value: u64,
}

impl KvLayout {
    /// Bytes per slot: header plus value, rounded up to a cache line.
    pub fn slot_bytes(&self) -> u64 {
        (OBJECT_HEADER + self.max_value).div_ceil(64) * 64
    }
    /// Bytes of the whole store.
    pub fn bytes(&self) -> u64 {
        self.slot_bytes() * self.objects
    }
    /// [`bytes`](Self::bytes), or `None` for a store larger than the address space (options
    /// or a peer's hello naming one: its size would wrap).
    pub fn checked_bytes(&self) -> Option<u64> {
        self.slot_bytes().checked_mul(self.objects)
    }
    /// Address of `key`'s slot: the client-side index of §5.1 is this arithmetic.
    pub fn slot(&self, key: u64) -> Result<u64, RpcError> {
        if key >= self.objects {
            return Err(RpcError::Malformed(format!(
                "key {key} outside the store's {} objects",
                self.objects
            )));
        }
        Ok(self.base + key * self.slot_bytes())
    }
}

/// A stored object's header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Connection of the last writer.
    pub conn: u32,
    /// Its sequence number.
    pub seq: u64,
}

/// Decodes one object slot's bytes (header and value, as laid out above): `None` if the
/// slot was never written, its length is past `max_value` or the slot, or its checksum
/// fails (the same rules as [`KvStore::read`]). Checkers that read a PM image from outside the server (the soft RNIC's pool
/// file) use it directly.
pub fn parse_object(slot: &[u8], max_value: u64) -> Option<(Stamp, Vec<u8>)> {
    let h = slot.get(..20)?;
    let conn = u32::from_le_bytes(h[0..4].try_into().unwrap());
    let len = u32::from_le_bytes(h[4..8].try_into().unwrap()) as u64;
    let seq = u64::from_le_bytes(h[8..16].try_into().unwrap());
    let crc = u32::from_le_bytes(h[16..20].try_into().unwrap());
    if seq == 0 || len > max_value {
        return None;
    }
    let value = slot.get(OBJECT_HEADER as usize..(OBJECT_HEADER + len) as usize)?;
    if remora::checksum::crc32c_append(remora::checksum::crc32c(&h[0..16]), value) != crc {
        return None;
    }
    Some((Stamp { conn, seq }, value.to_vec()))
}

/// What an object slot holds ([`KvStore::load`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// Never written (its header is all zero).
    Empty,
    /// Written, but it does not read back (length or checksum fails): a crash caught a
    /// Put's write-back half-way.
    Torn,
    /// An intact object: its stamp and value.
    Written(Stamp, Vec<u8>),
}

/// Per-request execution counts kept outside the simulated machine (they survive its
/// crashes), so a checker can tell "executed exactly once" from "executed twice".
pub type ExecutionLog = Rc<RefCell<BTreeMap<(u32, u64), u32>>>;

/// Called with (connection, sequence) each time an execution is counted in the
/// [`ExecutionLog`], so a checker can keep the counts where a `kill -9` of the server does
/// not reach them (the soft RNIC's execution journal).
pub type ExecutionHook = Rc<dyn Fn(u32, u64)>;

/// The server's object store.
pub struct KvStore<V: Verbs> {
    v: V,
    layout: KvLayout,
    executions: Option<ExecutionLog>,
    hook: Option<ExecutionHook>,
    /// Most objects a Scan may ask for (`None`: any number).
    max_scan: Option<u32>,
}

impl<V: Verbs> KvStore<V> {
    /// A store over `layout` on node `v`. Does not touch memory: a fresh store reads as
    /// empty objects, a recovered one as what survived.
    pub fn new(v: V, layout: KvLayout) -> Self {
        KvStore {
            v,
            layout,
            executions: None,
            hook: None,
            max_scan: None,
        }
    }

    /// Refuses a Scan of more than `max` objects ([`ReplyStatus::ScanTooLarge`]): a
    /// durable-RPC client's receive buffers hold `max_scan` objects, and a request read
    /// from a log is only as trustworthy as the client that wrote it.
    pub fn with_max_scan(mut self, max: u32) -> Self {
        self.max_scan = Some(max);
        self
    }

    /// Counts every executed (not skipped) Put in `log`.
    pub fn with_execution_log(mut self, log: ExecutionLog) -> Self {
        self.executions = Some(log);
        self
    }

    /// Calls `hook` whenever the execution log counts an execution.
    pub fn set_execution_hook(&mut self, hook: ExecutionHook) {
        self.hook = Some(hook);
    }

    fn counted(&self, conn: u32, seq: u64) {
        if let Some(h) = &self.hook {
            h(conn, seq);
        }
    }

    /// The layout.
    pub fn layout(&self) -> KvLayout {
        self.layout
    }

    /// Reads `key`'s header and value; `None` if the slot was never written or its
    /// checksum fails (a torn write that never became durable as a whole).
    pub fn read(&self, key: u64) -> Result<Option<(Stamp, Vec<u8>)>, RpcError> {
        Ok(match self.load(key)? {
            SlotState::Written(stamp, value) => Some((stamp, value)),
            SlotState::Empty | SlotState::Torn => None,
        })
    }

    /// Whether `key`'s object was written but does not read back (its header is there, its
    /// length or checksum fails): a crash caught a Put's write-back of it half-way.
    pub fn torn(&self, key: u64) -> bool {
        matches!(self.load(key), Ok(SlotState::Torn))
    }

    /// What `key`'s slot holds, read once: [`read`](Self::read) and
    /// [`torn`](Self::torn) in one look (recovery's settle asks both of one object).
    pub fn load(&self, key: u64) -> Result<SlotState, RpcError> {
        let at = self.layout.slot(key)?;
        let mut h = [0u8; 20];
        self.v.load(Space::Pm, at, &mut h);
        if h.iter().all(|&b| b == 0) {
            return Ok(SlotState::Empty);
        }
        let conn = u32::from_le_bytes(h[0..4].try_into().unwrap());
        let len = u32::from_le_bytes(h[4..8].try_into().unwrap()) as u64;
        let seq = u64::from_le_bytes(h[8..16].try_into().unwrap());
        let crc = u32::from_le_bytes(h[16..20].try_into().unwrap());
        if seq == 0 || len > self.layout.max_value {
            return Ok(SlotState::Torn);
        }
        let mut value = vec![0u8; len as usize];
        self.v.load(Space::Pm, at + OBJECT_HEADER, &mut value);
        if remora::checksum::crc32c_append(remora::checksum::crc32c(&h[0..16]), &value) != crc {
            return Ok(SlotState::Torn);
        }
        Ok(SlotState::Written(Stamp { conn, seq }, value))
    }

    /// Executes request `seq` of connection `conn` and makes its effect durable (stores,
    /// then `clwb`+`sfence` of the slot) before returning. A Put already executed (the
    /// object carries this stamp or a later one of the same connection) is skipped. A
    /// request the store cannot hold (a key outside it, a value larger than a slot, a Scan
    /// past [`with_max_scan`](Self::with_max_scan)) is refused: the reply says why and
    /// nothing changes.
    pub async fn apply(&mut self, conn: u32, seq: u64, op: &Op) -> Reply {
        self.apply_checked(conn, seq, op, true).await
    }

    /// [`apply`](Self::apply) without the idempotency check: a Put is executed even when
    /// the object already carries its stamp. Only for checkers' negative controls
    /// ("recovery that ignores the idempotency stamp" must be caught).
    pub async fn apply_ignoring_stamp(&mut self, conn: u32, seq: u64, op: &Op) -> Reply {
        self.apply_checked(conn, seq, op, false).await
    }

    async fn apply_checked(&mut self, conn: u32, seq: u64, op: &Op, check_stamp: bool) -> Reply {
        // `KvLayout::slot` is the one check of a key: outside the store, it is refused.
        let outside = Reply::refused(seq, ReplyStatus::KeyOutsideStore);
        match op {
            Op::Get { key } => match self.read(*key) {
                Ok(object) => Reply::ok(seq, object.map(|(_, v)| v).unwrap_or_default()),
                Err(_) => outside,
            },
            Op::Scan { count, .. } if self.max_scan.is_some_and(|m| *count > m) => {
                Reply::refused(seq, ReplyStatus::ScanTooLarge)
            }
            Op::Scan { key, count } => {
                let mut value = Vec::new();
                for k in *key..key.saturating_add(*count as u64).min(self.layout.objects) {
                    if let Ok(Some((_, v))) = self.read(k) {
                        value.extend_from_slice(&v);
                    }
                }
                Reply::ok(seq, value)
            }
            Op::Put { key, value } => {
                let Ok(at) = self.layout.slot(*key) else {
                    return outside;
                };
                if value.len() as u64 > self.layout.max_value {
                    return Reply::refused(seq, ReplyStatus::ValueTooLarge);
                }
                if let Some((s, _)) = self.read(*key).ok().flatten().filter(|_| check_stamp) {
                    if s.conn == conn && s.seq >= seq {
                        if s.seq == seq {
                            // An execution whose effect became durable but which a crash
                            // cut short before it was counted (e.g. during the persist
                            // wait under MHP): its stamp proves it ran once.
                            if let Some(log) = &self.executions {
                                let new = !log.borrow().contains_key(&(conn, seq));
                                if new {
                                    log.borrow_mut().insert((conn, seq), 1);
                                    self.counted(conn, seq);
                                }
                            }
                        }
                        return Reply::ok(seq, vec![]);
                    }
                }
                let mut h = [0u8; 20];
                h[0..4].copy_from_slice(&conn.to_le_bytes());
                h[4..8].copy_from_slice(&(value.len() as u32).to_le_bytes());
                h[8..16].copy_from_slice(&seq.to_le_bytes());
                let crc =
                    remora::checksum::crc32c_append(remora::checksum::crc32c(&h[0..16]), value);
                h[16..20].copy_from_slice(&crc.to_le_bytes());
                self.v.store(Space::Pm, at + OBJECT_HEADER, value);
                self.v.store(Space::Pm, at, &h);
                self.v
                    .persist_local(at, OBJECT_HEADER + value.len() as u64)
                    .await;
                if let Some(log) = &self.executions {
                    *log.borrow_mut().entry((conn, seq)).or_default() += 1;
                    self.counted(conn, seq);
                }
                Reply::ok(seq, vec![])
            }
        }
    }
}
