//! The log itself: layout, record format, appends, garbage collection and recovery.
//!
//! Region layout (in the server's PM region, seed 000 §4.1):
//!
//! | offset | what |
//! |---|---|
//! | 0 | tail pointer: number of records appended (compound appends write it as `b`) |
//! | 8 | head as published to the client: records below it were garbage-collected (written by the server) |
//! | 16 | durable head, the one recovery trusts: persisted before the head at 8 is published |
//! | 64 + 64·(i mod capacity) | record `i` |
//!
//! A record is `seq (u64) | payload | crc32c (u32)` with `seq = i + 1`, so zeroed or stale
//! (wrapped-around) memory never passes for record `i`: singleton appends rely on this,
//! the server finds the tail as the first record whose checksum or sequence fails.

use remora::{Client, PersistError, Update};
use remora_model::time::Duration;
use remora_verbs::{Space, Verbs};

/// Offset of the tail pointer.
pub const TAIL_OFF: u64 = 0;
/// Offset of the GC head.
pub const HEAD_OFF: u64 = 8;
/// Offset of the durable GC head: the head recovery trusts. The collector persists it
/// before it publishes the head at [`HEAD_OFF`], which the client reads and may reuse slots
/// below at once: a head the client can see must already be durable.
pub const HEAD_DURABLE_OFF: u64 = 16;
/// What [`LogClient::append`] fails with while the ring is full (see [`is_log_full`]).
pub const LOG_FULL: &str = "log full: the server is not collecting";

/// Whether `e` is [`LogClient::append`]'s "ring full" (wait for the collector and retry),
/// not a failure of the connection.
pub fn is_log_full(e: &PersistError) -> bool {
    matches!(e, PersistError::Protocol(m) if *m == LOG_FULL)
}

/// Offset of the first record slot.
pub const RECORDS_OFF: u64 = 64;

/// Shape of a log.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LogShape {
    /// Bytes per record (seed 000 §4: 64).
    pub record_bytes: u64,
    /// Record slots in the ring.
    pub capacity: u64,
    /// How often the server garbage-collects.
    pub gc_interval: Duration,
    /// How long the collector is descheduled after each store, before the persist that
    /// follows it (0 by default): a thread can be preempted there, and what the collector
    /// publishes must not rely on the two running back to back (the crash checks of the
    /// ring's reuse run with a pause).
    pub gc_pause: Duration,
}

impl Default for LogShape {
    fn default() -> Self {
        LogShape {
            record_bytes: 64,
            capacity: 4096,
            gc_interval: Duration::from_micros(50),
            gc_pause: Duration::ZERO,
        }
    }
}

impl LogShape {
    /// Bytes of PM the log needs.
    pub fn region_len(&self) -> u64 {
        RECORDS_OFF + self.capacity * self.record_bytes
    }
    /// Offset of record `i`.
    pub fn slot(&self, i: u64) -> u64 {
        RECORDS_OFF + (i % self.capacity) * self.record_bytes
    }
}

/// The bytes of record `i` (deterministic, so a checker can recompute them).
pub fn record(i: u64, len: u64) -> Vec<u8> {
    let mut r = vec![0u8; len as usize];
    record_into(i, &mut r);
    r
}

/// [`record`] into `r` (its length is the record's), without allocating.
pub fn record_into(i: u64, r: &mut [u8]) {
    let len = r.len();
    assert!(
        len >= 16,
        "a record holds at least its sequence number and checksum"
    );
    r[..8].copy_from_slice(&(i + 1).to_le_bytes());
    let body = len - 4;
    for (k, b) in r[8..body].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(k as u8);
    }
    let crc = remora::checksum::crc32c(&r[..body]);
    r[body..].copy_from_slice(&crc.to_le_bytes());
}

/// True when `bytes` are an intact record `i`.
pub fn is_record(bytes: &[u8], i: u64) -> bool {
    let body = bytes.len() - 4;
    bytes.len() >= 16
        && bytes[..8] == (i + 1).to_le_bytes()
        && remora::checksum::crc32c(&bytes[..body]).to_le_bytes() == bytes[body..]
}

/// Appends records through the library.
pub struct LogClient<V: Verbs> {
    client: Client<V>,
    shape: LogShape,
    update: Update,
    next: u64,
    head: u64,
    /// The record being appended (reused: appends are the benchmark's hot loop).
    rec: Vec<u8>,
}

impl<V: Verbs> LogClient<V> {
    /// A log client over a connected library client, appending with `update`s.
    pub fn new(client: Client<V>, shape: LogShape, update: Update) -> Self {
        LogClient {
            client,
            shape,
            update,
            next: 0,
            head: 0,
            rec: vec![0; shape.record_bytes as usize],
        }
    }

    /// A log client that continues a log whose next record is `next` (after recovery).
    pub fn resume(
        client: Client<V>,
        shape: LogShape,
        update: Update,
        next: u64,
        head: u64,
    ) -> Self {
        LogClient {
            client,
            shape,
            update,
            next,
            head,
            rec: vec![0; shape.record_bytes as usize],
        }
    }

    /// The library client.
    pub fn client(&mut self) -> &mut Client<V> {
        &mut self.client
    }

    /// Index of the next record.
    pub fn next_index(&self) -> u64 {
        self.next
    }

    /// Appends the next record; returns its index once it is persistent.
    pub async fn append(&mut self) -> Result<u64, PersistError> {
        let i = self.next;
        if i - self.head >= self.shape.capacity {
            // The ring looks full: learn how far the server has collected.
            let h = self.client.read(HEAD_OFF, 8).await?;
            self.head = u64::from_le_bytes(h[..8].try_into().expect("8 bytes"));
            if i - self.head >= self.shape.capacity {
                return Err(PersistError::Protocol(LOG_FULL));
            }
        }
        record_into(i, &mut self.rec);
        let slot = self.shape.slot(i);
        match self.update {
            Update::Singleton => self.client.persist(slot, &self.rec).await?,
            Update::Compound => {
                self.client
                    .persist_ordered((slot, &self.rec), (TAIL_OFF, &(i + 1).to_le_bytes()))
                    .await?
            }
        }
        self.next = i + 1;
        Ok(i)
    }
}

/// Reads a whole log region through the library (RDMA READs of up to 4 KiB), for
/// recovering or checking a log from the client side.
pub async fn read_region<V: Verbs>(
    client: &mut Client<V>,
    shape: &LogShape,
) -> Result<Vec<u8>, PersistError> {
    read_records(client, shape, shape.capacity).await
}

/// Like [`read_region`], but only the header and the first `records` record slots (the
/// rest of the returned image is zero).
pub async fn read_records<V: Verbs>(
    client: &mut Client<V>,
    shape: &LogShape,
    records: u64,
) -> Result<Vec<u8>, PersistError> {
    let len = RECORDS_OFF + records.min(shape.capacity) * shape.record_bytes;
    let mut out = Vec::with_capacity(len as usize);
    while (out.len() as u64) < len {
        let n = (len - out.len() as u64).min(4096) as u32;
        out.extend(client.read(out.len() as u64, n).await?);
    }
    out.resize(shape.region_len() as usize, 0);
    Ok(out)
}

/// What the server finds in its PM after a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// First record not collected.
    pub head: u64,
    /// One past the last record of the log.
    pub tail: u64,
    /// The tail pointer as stored (compound logs).
    pub tail_pointer: u64,
}

/// Recovers a log from the server's memory through `read(offset, len)`: singleton logs
/// scan from the head to the first record that fails; compound logs trust the tail
/// pointer (the checker verifies that trust was deserved).
pub fn recover(read: impl Fn(u64, u64) -> Vec<u8>, shape: &LogShape, update: Update) -> Recovered {
    recover_into(
        |off, buf: &mut [u8]| buf.copy_from_slice(&read(off, buf.len() as u64)),
        shape,
        update,
    )
}

/// [`recover`] reading through `read(offset, buf)` into one reused buffer.
pub fn recover_into(
    mut read: impl FnMut(u64, &mut [u8]),
    shape: &LogShape,
    update: Update,
) -> Recovered {
    let mut word = |off| {
        let mut b = [0u8; 8];
        read(off, &mut b);
        u64::from_le_bytes(b)
    };
    let head = word(HEAD_DURABLE_OFF);
    let tail_pointer = word(TAIL_OFF);
    let tail = match update {
        Update::Compound => tail_pointer,
        Update::Singleton => {
            let mut scratch = remora_model::bytes::Scratch::new();
            let record = scratch.get(shape.record_bytes as usize);
            let end = head.saturating_add(shape.capacity);
            first_not_record(&mut read, shape, record, head, end)
        }
    };
    Recovered {
        head,
        tail,
        tail_pointer,
    }
}

/// The first index in `from..end` whose slot does not hold that record (`end` if all do):
/// a singleton log's tail, scanned from `from`. `read(offset, buf)` reads the region;
/// `record` is the scratch a slot is read into.
fn first_not_record(
    read: &mut impl FnMut(u64, &mut [u8]),
    shape: &LogShape,
    record: &mut [u8],
    from: u64,
    end: u64,
) -> u64 {
    let mut t = from;
    while t < end && {
        read(shape.slot(t), record);
        is_record(record, t)
    } {
        t += 1;
    }
    t
}

/// The server's garbage collector: every `gc_interval` it takes the records between the
/// head and the tail as applied, and persists the new head. It runs on the server's CPU,
/// beside the responder. Runs until `running()` turns false or the node dies.
pub async fn collect_garbage<V: Verbs>(
    v: V,
    region_addr: u64,
    shape: LogShape,
    update: Update,
    running: impl Fn() -> bool,
) {
    // Durable first, then visible to the client (a store is visible at once, and durable
    // only after its clwb+sfence).
    collect(
        v,
        region_addr,
        shape,
        update,
        running,
        [HEAD_DURABLE_OFF, HEAD_OFF],
    )
    .await
}

/// [`collect_garbage`] with its two stores in the wrong order: the client can see (and
/// reuse the slots below) a head that a crash then takes back. Only for the crash
/// checker's negative control, which must be caught.
pub async fn collect_garbage_head_visible_first<V: Verbs>(
    v: V,
    region_addr: u64,
    shape: LogShape,
    update: Update,
    running: impl Fn() -> bool,
) {
    collect(
        v,
        region_addr,
        shape,
        update,
        running,
        [HEAD_OFF, HEAD_DURABLE_OFF],
    )
    .await
}

/// Records the collector checks before it lets the server's other work run (a region, and
/// so a ring, may be gigabytes; the server has one thread).
pub const GC_SCAN_CHUNK: u64 = 1024;

/// The collector, storing and persisting the new head at the two offsets in `order`.
async fn collect<V: Verbs>(
    v: V,
    region_addr: u64,
    shape: LogShape,
    update: Update,
    running: impl Fn() -> bool,
    order: [u64; 2],
) {
    let mut read = |off: u64, buf: &mut [u8]| v.load(Space::Pm, region_addr + off, buf);
    let word = |off: u64| {
        let mut b = [0u8; 8];
        v.load(Space::Pm, region_addr + off, &mut b);
        u64::from_le_bytes(b)
    };
    // The head is the server's: read once (what a restart left durable), then the one this
    // collector published. The client can write the header as any of its region, and a
    // head it sets back must not make every tick scan the ring again.
    let mut head = None;
    let mut scratch = remora_model::bytes::Scratch::new();
    let record = scratch.get(shape.record_bytes as usize);
    while running() {
        v.compute(shape.gc_interval).await;
        let h = *head.get_or_insert_with(|| word(HEAD_DURABLE_OFF));
        let tail = match update {
            Update::Compound => word(TAIL_OFF),
            Update::Singleton => {
                // A chunk at a time, the server's other work let run after each whole one.
                let end = h.saturating_add(shape.capacity);
                let mut t = h;
                loop {
                    let stop = end.min(t.saturating_add(GC_SCAN_CHUNK));
                    t = first_not_record(&mut read, &shape, record, t, stop);
                    if t < stop {
                        break t;
                    }
                    v.compute(Duration::ZERO).await;
                    if t == end {
                        break t;
                    }
                }
            }
        };
        if tail > h {
            for off in order {
                v.store(Space::Pm, region_addr + off, &tail.to_le_bytes());
                if shape.gc_pause > Duration::ZERO {
                    v.compute(shape.gc_pause).await;
                }
                v.persist_local(region_addr + off, 8).await;
            }
            head = Some(tail);
        }
    }
}
