//! The durable-RPC server: dispatcher, processor, recovery (see the module above).

use super::*;

/// What recovery did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The processed watermark found in PM.
    pub processed_before: u64,
    /// Committed entries executed from the log.
    pub reexecuted: u64,
    /// The watermark after recovery: the last committed entry.
    pub processed: u64,
    /// An entry whose operator is durable but whose data is not (the data-before-operator
    /// invariant broke); it was not executed.
    pub torn: Option<String>,
    /// Operators cleared past the recovered end of the log that committed entries never
    /// acknowledged (older laps' operators there are cleared too, and not counted).
    pub truncated: u64,
}

/// Server counters.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Entries processed.
    pub processed: u64,
    /// Entries persisted by the responder's CPU.
    pub cpu_persisted: u64,
    /// Times a reply carried the slow-down bit.
    pub slow_downs: u64,
    /// Receive completions that did not name a parsable entry.
    pub bad_entries: u64,
    /// Native RFlush work requests posted (one per ring run of arrived entries).
    pub rflushes: u64,
}

/// The server side of one durable-RPC connection.
pub struct DurableServer<V: Verbs + Clone + 'static> {
    v: V,
    opts: DurableOptions,
    config: ServerConfig,
    plan: FlushPlan,
    layout: LogLayout,
    /// Every RNIC object of the connection, freed together when [`serve`](Self::serve)
    /// returns.
    owned: Owned,
    log_mr: MrInfo,
    scratch: MrInfo,
    kv: KvStore<V>,
    qp: QpNum,
    rcq: CqId,
    scq: CqId,
    processed: u64,
    processed_before: u64,
    /// Entries [`settle`](Self::settle) advanced the watermark over.
    settled: u64,
    recovered: Vec<Reply>,
    stats: Rc<Cell<ServerStats>>,
    workers: Option<WorkerPool>,
    store_lock: Option<Rc<StoreLock>>,
    work_log: Option<WorkLog>,
}

/// The DRAM a [`DurableServer`] allocates (its flush READ's scratch buffer), so a server
/// of many connections can give each its own fixed piece instead of new memory per
/// connection.
pub const SERVER_DRAM_BYTES: u64 = 64;

impl<V: Verbs + Clone + 'static> DurableServer<V> {
    /// Allocates (in a fixed order, so a restarted server finds them at the same
    /// addresses) the redo log and the object store in PM, formats the log if PM holds
    /// none, and creates the queue pair. Fails on a corrupt header or one of another
    /// connection or layout.
    pub fn create(
        v: V,
        opts: &DurableOptions,
        executions: Option<ExecutionLog>,
    ) -> Result<Self, RpcError> {
        Self::create_in(v, opts, executions, None)
    }

    /// [`create`](Self::create) over an object store that already exists at `kv` (the
    /// benchmark's: one store, preloaded, shared by every connection); only the log is
    /// allocated.
    pub fn create_in(
        v: V,
        opts: &DurableOptions,
        executions: Option<ExecutionLog>,
        kv: Option<KvLayout>,
    ) -> Result<Self, RpcError> {
        let config = v.config();
        let plan = opts.plan(&config)?;
        let mut owned = Owned::default();
        // Everything made on the RNIC goes into `owned`: a setup that fails half-way (a
        // refused verb, a redo log in PM that belongs to another connection) frees it.
        let (layout, log_mr, kv, scratch, rcq, scq, qp, processed) =
            made_or_freed(&v, &mut owned, |o| {
                o.pd(&v)?;
                let probe = opts.log_layout(0)?;
                let base = v.alloc(Space::Pm, probe.bytes(), 4096);
                let layout = opts.log_layout(base)?;
                // The client's region is the entries only: the header and the watermark
                // are the server's, and a client that wrote them could make the log
                // unrecoverable for every later start.
                let log_mr = o.mr(
                    &v,
                    Space::Pm,
                    layout.entries_addr(),
                    layout.entries_bytes(),
                    Access::ALL,
                )?;
                let kv_layout = kv.unwrap_or_else(|| {
                    let l = KvLayout {
                        base: 0,
                        objects: opts.objects,
                        max_value: opts.max_value as u64,
                    };
                    KvLayout {
                        base: v.alloc(Space::Pm, l.bytes(), 4096),
                        ..l
                    }
                });
                // The server bounds a Scan itself: its reply must fit the client's
                // receive buffers (`DurableOptions::recv_bytes`), and a client writing its
                // log directly can ask for any count.
                let mut kv = KvStore::new(v.clone(), kv_layout).with_max_scan(opts.max_scan);
                if let Some(log) = executions {
                    kv = kv.with_execution_log(log);
                }
                let scratch_addr = v.alloc(Space::Dram, SERVER_DRAM_BYTES, 64);
                let scratch = o.mr(
                    &v,
                    Space::Dram,
                    scratch_addr,
                    SERVER_DRAM_BYTES,
                    Access::ALL,
                )?;
                let rq = opts.capacity as usize + 8;
                let rcq = o.cq(&v, rq + 1)?;
                let scq = o.cq(&v, 4 * opts.capacity as usize + 64)?;
                let qp = o.qp(
                    &v,
                    scq,
                    rcq,
                    QpAttr {
                        sq_depth: 4 * opts.capacity as usize + 64,
                        rq_depth: rq,
                        ..QpAttr::default()
                    },
                )?;
                let want = LogHeader {
                    conn: opts.conn,
                    capacity: layout.capacity,
                    entry_bytes: layout.entry_bytes,
                    commit: Commit::of(&plan),
                };
                let mut hb = [0u8; HEADER_BYTES];
                v.load(Space::Pm, base, &mut hb);
                let processed = if hb.iter().all(|&b| b == 0) {
                    // Fresh PM: format. The header is durable before any client connects.
                    // (The owner key, on the watermark's line, reads zero already.)
                    v.store(Space::Pm, base, &want.emit());
                    v.store(Space::Pm, layout.watermark_addr(), &0u64.to_le_bytes());
                    0
                } else {
                    let h = LogHeader::parse(&hb)?;
                    if h.commit != want.commit {
                        return Err(RpcError::Malformed(format!(
                            "the redo log in PM commits its entries by {:?}, this \
                             connection would by {:?} (another Flush form or DDIO setting \
                             than the log was written with): recovery would cut off \
                             acknowledged entries, so the log is left as it is",
                            h.commit, want.commit
                        )));
                    }
                    if h != want {
                        return Err(RpcError::Malformed(format!(
                            "redo log in PM is {h:?}, this connection needs {want:?}"
                        )));
                    }
                    let mut w = [0u8; 8];
                    v.load(Space::Pm, layout.watermark_addr(), &mut w);
                    let w = u64::from_le_bytes(w);
                    // Far beyond any run's sequence numbers is damage (and `w + 1`, the
                    // next entry, must not wrap).
                    if w > 1 << 62 {
                        return Err(RpcError::Malformed(format!(
                            "redo log watermark {w} out of range"
                        )));
                    }
                    w
                };
                Ok::<_, RpcError>((layout, log_mr, kv, scratch, rcq, scq, qp, processed))
            })?;
        Ok(DurableServer {
            v,
            owned,
            opts: opts.clone(),
            config,
            plan,
            layout,
            log_mr,
            scratch,
            kv,
            qp,
            rcq,
            scq,
            processed,
            processed_before: processed,
            settled: 0,
            recovered: Vec::new(),
            stats: Rc::new(Cell::new(ServerStats::default())),
            workers: None,
            store_lock: None,
            work_log: None,
        })
    }

    /// Records the CPU work done for each request in `log` (seed 003 §5.6, Figure 20):
    /// the receiver CPU's persist of an RFlush design, the injected processing, and the
    /// store access with its copy and persist.
    pub fn set_work_log(&mut self, log: WorkLog) {
        self.work_log = Some(log);
    }

    /// Executes requests on `pool` (shared with the server's other connections) instead
    /// of a pool of its own of [`ServerCosts::workers`] threads.
    pub fn set_workers(&mut self, pool: WorkerPool) {
        self.workers = Some(pool);
    }

    /// Shares `lock` with the other connections of the same store (see [`StoreLock`]).
    pub fn set_store_lock(&mut self, lock: Rc<StoreLock>) {
        self.store_lock = Some(lock);
    }

    /// Frees what [`create`](Self::create) made on the RNIC without serving (a
    /// connection whose handshake failed after its QP was connected); the log in PM stays.
    pub fn close(self) -> Result<(), VerbsError> {
        self.owned.free(&self.v)
    }

    /// The queue pair to connect to the client's.
    pub fn qp(&self) -> QpNum {
        self.qp
    }
    /// Calls `hook` whenever the store's execution log counts an execution (see
    /// [`crate::kv::ExecutionHook`]); only with an execution log.
    pub fn set_execution_hook(&mut self, hook: crate::kv::ExecutionHook) {
        self.kv.set_execution_hook(hook);
    }
    /// Where the object store lives.
    pub fn kv_layout(&self) -> KvLayout {
        self.kv.layout()
    }
    /// The plan the server runs.
    pub fn plan(&self) -> FlushPlan {
        self.plan
    }
    /// Counters, shared with the running server.
    pub fn stats(&self) -> Rc<Cell<ServerStats>> {
        self.stats.clone()
    }

    /// Whether recovery executed requests whose replies wait for the log's client.
    pub fn holds_recovered_replies(&self) -> bool {
        !self.recovered.is_empty()
    }

    /// Takes the replies of the requests recovery executed, which [`serve`](Self::serve)
    /// would send first: to keep them for the log's client when this connection is freed
    /// before serving (a broken handshake), or to drop them when the log goes to a new
    /// client (they are the previous client's).
    pub fn take_recovered(&mut self) -> Vec<Reply> {
        std::mem::take(&mut self.recovered)
    }

    /// Gives back replies [`take_recovered`](Self::take_recovered) took from an earlier
    /// server of the same log; they go before this one's own, in sequence order.
    pub fn restore_recovered(&mut self, earlier: Vec<Reply>) {
        if !earlier.is_empty() {
            let mine = std::mem::replace(&mut self.recovered, earlier);
            self.recovered.extend(mine);
        }
    }

    /// The key of the client the log belongs to, 0 for none
    /// ([`crate::redolog::OWNER_KEY_OFFSET`]).
    pub fn owner_key(&self) -> u64 {
        let mut w = [0u8; 8];
        self.v.load(Space::Pm, self.layout.owner_key_addr(), &mut w);
        u64::from_le_bytes(w)
    }

    /// Gives the log to a new client, whose key is `key`, and makes that durable before
    /// returning: after a server crash too, only that client can claim the log.
    pub async fn set_owner_key(&self, key: u64) {
        let at = self.layout.owner_key_addr();
        self.v.store(Space::Pm, at, &key.to_le_bytes());
        self.v.persist_local(at, 8).await;
    }

    /// What a client needs to connect.
    pub fn conn_info(&self) -> ConnInfo {
        ConnInfo {
            config: self.config,
            layout: self.layout,
            log_rkey: self.log_mr.rkey,
            processed: self.processed,
            processed_before_recovery: self.processed_before,
        }
    }

    /// The first step of recovering connections that share a store, run on every one of
    /// them before [`recover`](Self::recover) runs on any: if the entry after the
    /// watermark is a Put whose object already carries its stamp, the Put was executed and
    /// only its watermark is missing, so the watermark advances over it (and the execution
    /// is counted, should the crash have cut that short) without executing it again. Under
    /// the [`StoreLock`] that Put was the last store update before the crash; were another
    /// connection's recovery to run first, it could overwrite the object with a later
    /// logged Put of its own, and this connection's recovery would then find the stamp gone
    /// and execute the Put a second time, over the later one. Returns true if it settled
    /// an entry; its reply goes to the reconnecting client and [`recover`](Self::recover)
    /// counts it as re-executed.
    pub async fn settle(&mut self) -> Result<bool, RpcError> {
        if self.opts.fault == Some(Fault::IgnoreStampOnRecovery) {
            return Ok(false);
        }
        let seq = self.processed + 1;
        let frames = self.plan.frame_commits();
        let EntryState::Committed(r) =
            read_entry_with(&self.v, &self.layout, self.opts.conn, seq, frames)
        else {
            return Ok(false);
        };
        let Op::Put { key, .. } = &r.op else {
            return Ok(false);
        };
        let lock = self.store_lock.clone();
        let guard = lock_store(&lock).await;
        // Under the lock, nothing changes the object between this look and the apply, which
        // then skips the Put (and counts it if it was not counted).
        match self.kv.load(*key) {
            Ok(SlotState::Written(st, _)) if st.conn == self.opts.conn && st.seq == seq => {}
            // A torn object (written, its checksum failing): the crash caught a Put's
            // write-back of it, this one's or another log's next Put of the key. Either
            // way no Put past any watermark is acknowledged as executed, so this one runs
            // now and repairs the object: another log's recovery must never read it torn
            // (a Get would answer "no value", which the key never held since it was
            // first written). Should the torn Put be another log's, its own recovery
            // still runs it, after this one.
            Ok(SlotState::Torn) => {}
            _ => return Ok(false),
        }
        let reply = self.kv.apply(self.opts.conn, seq, &r.op).await;
        self.advance_watermark(seq).await;
        drop(guard);
        self.recovered.push(reply);
        self.settled += 1;
        Ok(true)
    }

    /// Executes, in order, every committed entry past the processed watermark (seed 003
    /// §4.2: "the RPC can be re-executed with the operation log, without re-sending the
    /// data from the client"), keeps their replies for the reconnecting client, and
    /// truncates the log at the first uncommitted entry. Run it after a restart, before
    /// [`serve`](Self::serve).
    pub async fn recover(&mut self) -> Result<RecoveryReport, RpcError> {
        let mut report = RecoveryReport {
            processed_before: self.processed_before,
            reexecuted: self.settled,
            ..RecoveryReport::default()
        };
        let frames = self.plan.frame_commits();
        loop {
            let seq = self.processed + 1;
            match read_entry_with(&self.v, &self.layout, self.opts.conn, seq, frames) {
                EntryState::Committed(r) => {
                    let lock = self.store_lock.clone();
                    let guard = lock_store(&lock).await;
                    let reply = if self.opts.fault == Some(Fault::IgnoreStampOnRecovery) {
                        self.kv
                            .apply_ignoring_stamp(self.opts.conn, seq, &r.op)
                            .await
                    } else {
                        self.kv.apply(self.opts.conn, seq, &r.op).await
                    };
                    self.advance_watermark(seq).await;
                    drop(guard);
                    self.recovered.push(reply);
                    report.reexecuted += 1;
                }
                EntryState::Uncommitted => break,
                EntryState::Torn(why) => {
                    report.torn = Some(why);
                    break;
                }
            }
        }
        // Operators past the end may be committed out of order (a batch's operators
        // persist in any order); none was acknowledged, so clear them before the client
        // re-sends those sequence numbers.
        // Every slot, the one of `processed` too: it is also the slot of
        // `processed + capacity`, which a client may have written.
        for seq in self.processed + 1..=self.processed + self.layout.capacity as u64 {
            let at = self.layout.entry_addr(seq);
            let mut w = [0u8; 8];
            self.v.load(Space::Pm, at, &mut w);
            let w = u64::from_le_bytes(w);
            let mut cut = false;
            if w != 0 {
                self.v.store(Space::Pm, at, &[0u8; 8]);
                self.v.persist_local(at, 8).await;
                // An older lap's operator (an entry processed long ago) is cleared too,
                // but only one that commits `seq` was cut off by the crash.
                cut = Operator::from_word(w).is_some_and(|o| o.seq_lo == seq as u16);
            }
            // With the operator word gone (or never there), a self-committing frame past
            // the end (never acknowledged: an RFlush notification covers every earlier
            // entry) would commit the entry by itself: clear its magic.
            if frames
                && matches!(
                    read_entry_with(&self.v, &self.layout, self.opts.conn, seq, true),
                    EntryState::Committed(_)
                )
            {
                let d = self.layout.data_addr(seq);
                self.v.store(Space::Pm, d, &[0u8; 8]);
                self.v.persist_local(d, 8).await;
                cut = true;
            }
            report.truncated += cut as u64;
        }
        report.processed = self.processed;
        Ok(report)
    }

    async fn advance_watermark(&mut self, seq: u64) {
        let at = self.layout.watermark_addr();
        self.v.store(Space::Pm, at, &seq.to_le_bytes());
        self.v.persist_local(at, 8).await;
        self.processed = seq;
    }

    /// Posts receives and runs the dispatcher and processor threads until the connection
    /// fails, and returns why (an error completion on the queue pair, a verb refused).
    /// First sends the replies of entries recovery executed. When either thread stops,
    /// the other is stopped too, but only after a Put inside its store critical section
    /// (object written, watermark not yet durable) has finished it: so a connection torn
    /// down mid-Put never frees the [`StoreLock`] between the two. Entries already logged
    /// but not processed stay in the redo log, where [`recover`](Self::recover) executes
    /// them on the next start (or reconnection). Dropping the returned future is a crash,
    /// not a teardown.
    pub async fn serve(self) -> RpcError {
        self.serve_keeping().await.0
    }

    /// [`serve`](Self::serve), and returns too the replies of requests recovery executed
    /// that the client's RNIC never acknowledged (the connection ended first): they are
    /// still the client's, for its next connection
    /// ([`restore_recovered`](Self::restore_recovered)).
    pub async fn serve_keeping(mut self) -> (RpcError, Vec<Reply>) {
        let mut owned = std::mem::take(&mut self.owned);
        let core = Rc::new(Core {
            v: self.v.clone(),
            opts: self.opts.clone(),
            plan: self.plan,
            layout: self.layout,
            log_lkey: self.log_mr.lkey,
            scratch: self.scratch,
            qp: self.qp,
            processed: Cell::new(self.processed),
            arrived: Cell::new(self.processed),
            durable: Cell::new(self.processed),
            notify: Notify::default(),
            turn: Notify::default(),
            stats: self.stats.clone(),
            kv: Cell::new(None),
            store_lock: self.store_lock.clone(),
            work_log: self.work_log.clone(),
            stopping: Cell::new(false),
            in_store: Cell::new(false),
            undelivered: RefCell::new(BTreeSet::new()),
        });
        let started = core.post_initial_receives().and_then(|()| {
            for (i, r) in self.recovered.iter().enumerate() {
                let msg = ServerMsg::Reply(r_frame(self.opts.conn, r));
                core.send_tagged(msg, RECOVERED_REPLY | i as u64)?;
            }
            Ok(())
        });
        if let Err(e) = started {
            // The queue pair failed before the connection could start (its client went
            // away at once): no recovered reply is known delivered, and the connection's
            // objects are freed all the same.
            let why = freed_after(owned.free(&core.v), e.into());
            return (why, std::mem::take(&mut self.recovered));
        }
        let (rcq, scq) = (self.rcq, self.scq);
        core.kv.set(Some(self.kv));
        let pool = self
            .workers
            .unwrap_or_else(|| WorkerPool::new(self.opts.costs.workers));
        let p = core.clone();
        let mut dispatch = pin!(core.clone().dispatch(rcq, scq));
        let mut process = pin!(async move { p.process(pool).await });
        let (why, process_done) = poll_fn(|cx| {
            if let Poll::Ready(x) = dispatch.as_mut().poll(cx) {
                return Poll::Ready((x, false));
            }
            process.as_mut().poll(cx).map(|x| (x, true))
        })
        .await;
        // Teardown waits for a Put inside its store critical section: dropped between its
        // object and its watermark, it would free the store lock with the Put executed but
        // not recorded; another connection could then overwrite the object, and recovering
        // this log would find the stamp gone and run the Put again over the later one.
        // Entries not yet in the store stay in the log for recovery.
        core.stopping.set(true);
        if !process_done {
            poll_fn(|cx| {
                if !core.in_store.get() {
                    return Poll::Ready(());
                }
                match process.as_mut().poll(cx) {
                    Poll::Ready(_) => Poll::Ready(()),
                    Poll::Pending if core.in_store.get() => Poll::Pending,
                    Poll::Pending => Poll::Ready(()),
                }
            })
            .await;
        }
        // The queue pair goes first: destroying it flushes the SENDs still unacknowledged
        // onto the send CQ, whatever ended the connection (a failed queue pair, or the
        // client's protocol violation while its QP still worked). The recovered replies
        // whose SENDs failed (their completions, unsignaled ones included, are on the
        // send CQ) go back to the caller before the CQ is freed.
        let qps_freed = owned.free_qps(&core.v);
        // A flush completes after the RNIC's processing time: wait for the first, within a
        // bound (flushes of a QP that failed earlier are there already; a connection with
        // no SEND outstanding waits out the bound, once, at its end).
        remora_verbs::wait_cq_or(&core.v, scq, FLUSHED_WITHIN).await;
        let mut sent = Vec::new();
        while core.v.poll_cq(scq, 64, &mut sent) > 0 {
            core.note_failed_sends(&sent);
            sent.clear();
        }
        let undelivered: Vec<Reply> = {
            let lost = core.undelivered.borrow();
            (self.recovered.into_iter().enumerate())
                .filter(|(i, _)| lost.contains(&(*i as u64)))
                .map(|(_, r)| r)
                .collect()
        };
        // The connection is over: free its queue pair, CQs, regions and protection domain,
        // so a server serving connection after connection does not accumulate them. The
        // PM (log, store) and what it holds stay for the next connection's recovery.
        let freed = owned.free(&core.v);
        (freed_after(qps_freed.and(freed), why), undelivered)
    }
}

/// Why a connection ended, `why`, and then how freeing its RNIC objects went (`freed`).
fn freed_after(freed: Result<(), remora_verbs::VerbsError>, why: RpcError) -> RpcError {
    match freed {
        Ok(()) => why,
        Err(e) => RpcError::Connection(format!(
            "{why}; then freeing the connection's RNIC objects failed: {e}"
        )),
    }
}

/// Tag of a recovered reply's SEND work request id (the low bits: its index).
const RECOVERED_REPLY: u64 = 1 << 63;

/// How long a connection's teardown waits for the send CQ after destroying its queue pair,
/// for the completions of the SENDs it flushed: far beyond an RNIC's processing time.
const FLUSHED_WITHIN: Duration = Duration::from_micros(50);

fn r_frame(conn: u32, r: &Reply) -> ReplyFrame {
    ReplyFrame {
        conn,
        reply: r.clone(),
    }
}

/// Reads and judges `seq`'s entry as the server's CPU sees it.
pub fn read_entry<V: Verbs>(v: &V, layout: &LogLayout, conn: u32, seq: u64) -> EntryState {
    read_entry_with(v, layout, conn, seq, false)
}

/// As [`read_entry`]; with `frames` (a native-RFlush log, [`FlushPlan::frame_commits`]) an
/// entry without an operator is committed when its data area holds an intact frame
/// (magic, CRC-32C) of `conn` and `seq`, and uncommitted otherwise.
pub fn read_entry_with<V: Verbs>(
    v: &V,
    layout: &LogLayout,
    conn: u32,
    seq: u64,
    frames: bool,
) -> EntryState {
    let mut w = [0u8; 8];
    v.load(Space::Pm, layout.entry_addr(seq), &mut w);
    let word = u64::from_le_bytes(w);
    let Some(op) = Operator::from_word(word) else {
        if frames {
            let mut data = vec![0u8; layout.max_frame() as usize];
            v.load(Space::Pm, layout.data_addr(seq), &mut data);
            return match Request::parse(&data) {
                Ok((r, _)) if r.conn == conn && r.seq == seq => EntryState::Committed(r),
                _ => EntryState::Uncommitted,
            };
        }
        return EntryState::Uncommitted;
    };
    let len = (op.frame_len as u64).min(layout.max_frame()) as usize;
    let mut data = vec![0u8; len];
    v.load(Space::Pm, layout.data_addr(seq), &mut data);
    judge_entry(conn, seq, word, &data)
}

/// The sequence number of the request in `seq`'s slot when it is a later lap of that slot
/// (`seq + k × capacity`, an intact frame of `conn`): entries are written in order into a
/// slot whose earlier lap is processed, so it was written before `seq` was processed.
fn later_lap<V: Verbs>(v: &V, layout: &LogLayout, conn: u32, seq: u64) -> Option<u64> {
    // The header first (what a poll costs); the whole frame only when it names a later lap.
    let at = layout.data_addr(seq);
    let mut h = [0u8; REQUEST_HEADER];
    v.load(Space::Pm, at, &mut h);
    let head = RequestHead::parse(&h).ok()?;
    let named = head.seq;
    if head.conn != conn
        || named <= seq
        || layout.slot(named) != layout.slot(seq)
        || head.frame_len as u64 > layout.max_frame()
    {
        return None;
    }
    let mut frame = vec![0u8; head.frame_len];
    v.load(Space::Pm, at, &mut frame);
    match Request::parse(&frame) {
        Ok((r, _)) if r.conn == conn && r.seq == named => Some(named),
        _ => None,
    }
}

struct Core<V: Verbs> {
    v: V,
    opts: DurableOptions,
    plan: FlushPlan,
    layout: LogLayout,
    log_lkey: u32,
    scratch: MrInfo,
    qp: QpNum,
    processed: Cell<u64>,
    arrived: Cell<u64>,
    durable: Cell<u64>,
    notify: Notify,
    /// Wakes executions waiting for their turn to apply (in sequence order).
    turn: Notify,
    stats: Rc<Cell<ServerStats>>,
    /// The store, taken by the execution whose turn it is.
    kv: Cell<Option<KvStore<V>>>,
    /// Shared with the other connections of the store, if any.
    store_lock: Option<Rc<StoreLock>>,
    /// Records CPU work per request (Figure 20's breakdown), if set.
    work_log: Option<WorkLog>,
    /// The connection is being torn down: no execution enters the store any more.
    stopping: Cell<bool>,
    /// An execution is between taking the store lock and releasing it (its object may be
    /// written, its watermark not yet durable): teardown waits for it.
    in_store: Cell<bool>,
    /// Indexes (in `recovered`) of recovered replies whose SEND failed: the client's RNIC
    /// never acknowledged them.
    undelivered: RefCell<BTreeSet<u64>>,
}

/// Marks [`Core::in_store`] while alive.
struct InStore<'a>(&'a Cell<bool>);

impl<'a> InStore<'a> {
    fn enter(c: &'a Cell<bool>) -> Self {
        c.set(true);
        InStore(c)
    }
}

impl Drop for InStore<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl<V: Verbs> Core<V> {
    fn bump(&self, f: impl FnOnce(&mut ServerStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    fn post_receive_for(&self, seq: u64) -> Result<(), VerbsError> {
        let sge = match self.plan.carrier {
            // A SEND lands in the data area of the entry it will be.
            Family::Send => Sge {
                addr: self.layout.data_addr(seq),
                len: self.layout.max_frame() as u32,
                lkey: self.log_lkey,
            },
            // WRITE_WITH_IMM doorbells carry no data.
            Family::Write => Sge {
                addr: self.scratch.addr,
                len: 8,
                lkey: self.scratch.lkey,
            },
        };
        self.v.post_recv(self.qp, RecvWr { wr_id: seq, sge })
    }

    fn post_initial_receives(&self) -> Result<(), VerbsError> {
        let first = self.processed.get() + 1;
        let n = match self.plan.carrier {
            Family::Send => self.layout.capacity as u64,
            Family::Write => self.layout.capacity as u64 + 8,
        };
        for seq in first..first + n {
            self.post_receive_for(seq)?;
        }
        Ok(())
    }

    fn notice(&self) -> Notice {
        // On a real-time runtime the processor may execute an entry whose doorbell the
        // dispatcher has not taken yet, so `processed` can pass `arrived`.
        let backlog = self
            .arrived
            .get()
            .max(self.durable.get())
            .saturating_sub(self.processed.get());
        let backlog = u32::try_from(backlog).unwrap_or(u32::MAX);
        Notice {
            slow: backlog > self.opts.costs.backlog_threshold,
            backlog,
        }
    }

    fn send(&self, msg: ServerMsg) -> Result<(), VerbsError> {
        self.send_tagged(msg, 0)
    }

    /// [`send`](Self::send) with work request id `wr_id`, which a failed SEND's completion
    /// carries.
    fn send_tagged(&self, msg: ServerMsg, wr_id: u64) -> Result<(), VerbsError> {
        let notice = self.notice();
        if notice.slow {
            self.bump(|s| s.slow_downs += 1);
        }
        self.v.post_send(
            self.qp,
            SendWr::new(
                wr_id,
                Opcode::SendWithImm(notice.to_imm()),
                Payload::inline(msg.to_bytes()),
                None,
            )
            .signaled(false),
        )
    }

    /// Native RFlush (seed 003 §4.1.2): the RNIC persists the entries `from..=to` (one
    /// work request per ring run) and notifies the client with the run's last sequence
    /// number as immediate. No `clwb`, no operator: the frames commit themselves (under
    /// DMP+DDIO [`cpu_persist`](Self::cpu_persist) ran first).
    fn rflush(&self, from: u64, to: u64) -> Result<(), VerbsError> {
        let mut a = from;
        while a <= to {
            let mut b = a;
            // A run ends at the ring's end, and before its length would pass an SGE's
            // u32 (one entry always fits: `LogLayout::new` bounds `entry_bytes`).
            let entry = self.layout.entry_bytes as u64;
            while b < to && self.layout.slot(b + 1) != 0 && (b + 2 - a) * entry <= u32::MAX as u64 {
                b += 1;
            }
            let start = self.layout.entry_addr(a);
            let len = self.layout.entry_addr(b) + entry - start;
            let range = Sge {
                addr: start,
                len: u32::try_from(len).expect("a run fits an SGE"),
                lkey: self.log_lkey,
            };
            self.v
                .post_send(self.qp, SendWr::rflush(0, range, b as u32).signaled(false))?;
            self.bump(|s| s.rflushes += 1);
            a = b + 1;
        }
        Ok(())
    }

    /// Emulated RFlush, and the §4.4.2 step under DMP+DDIO: the responder's CPU writes
    /// back the entry's data (`clwb`+`sfence`), then writes and persists the operator.
    async fn cpu_persist(&self, seq: u64) -> bool {
        let mut h = [0u8; REQUEST_HEADER];
        self.v.load(Space::Pm, self.layout.data_addr(seq), &mut h);
        let head = RequestHead::parse(&h).ok().filter(|head| {
            (1..=3).contains(&head.code) && head.frame_len as u64 <= self.layout.max_frame()
        });
        let Some(RequestHead {
            code,
            frame_len: len,
            ..
        }) = head
        else {
            self.bump(|s| s.bad_entries += 1);
            return false;
        };
        let len = len as u64;
        // The whole frame, checksum included, must be this connection's request `seq`
        // before its operator makes it committed: a corrupt entry acknowledged as durable
        // would stop recovery there, and with it every entry acknowledged after it.
        let mut frame = vec![0u8; len as usize];
        self.v
            .load(Space::Pm, self.layout.data_addr(seq), &mut frame);
        match Request::parse(&frame) {
            Ok((r, used))
                if used == frame.len()
                    && r.conn == self.opts.conn
                    && r.seq == seq
                    && crate::redolog::op_code(&r.op) == code => {}
            _ => {
                self.bump(|s| s.bad_entries += 1);
                return false;
            }
        }
        // The LLC write-back that DDIO makes necessary, before the operator (§4.2, §4.4.2).
        self.v.persist_local(self.layout.data_addr(seq), len).await;
        let op = Operator {
            code,
            seq_lo: seq as u16,
            frame_len: len as u32,
        };
        let at = self.layout.entry_addr(seq);
        self.v.store(Space::Pm, at, &op.to_word().to_le_bytes());
        self.v.persist_local(at, 8).await;
        self.bump(|s| s.cpu_persisted += 1);
        true
    }

    /// Why the queue pair failed, from the receive completion that told: a flush error
    /// there only follows the error that failed the QP, and when a send failed (a response
    /// or NAK the RNIC refused) that error is on the send CQ, which holds nothing else
    /// (the server's sends are unsignaled).
    fn failure(&self, wc: &WorkCompletion, scq: CqId) -> RpcError {
        if wc.status == WcStatus::WrFlushErr {
            let mut sent = Vec::new();
            self.v.poll_cq(scq, 64, &mut sent);
            self.note_failed_sends(&sent);
            if let Some(cause) = sent.iter().find(|c| c.status != WcStatus::WrFlushErr) {
                return wc_error(cause);
            }
        }
        wc_error(wc)
    }

    /// Records which recovered replies' SENDs failed, from send completions (the only
    /// ones a server's unsignaled SENDs make).
    fn note_failed_sends(&self, sent: &[WorkCompletion]) {
        let mut lost = self.undelivered.borrow_mut();
        for wc in sent {
            if wc.status != WcStatus::Success && wc.wr_id & RECOVERED_REPLY != 0 {
                lost.insert(wc.wr_id & !RECOVERED_REPLY);
            }
        }
    }

    /// The dispatcher thread; returns why it stopped.
    async fn dispatch(self: Rc<Self>, rcq: CqId, scq: CqId) -> RpcError {
        loop {
            let wc = next_completion(&self.v, rcq).await;
            if wc.status != WcStatus::Success {
                return self.failure(&wc, scq);
            }
            let seq = match self.plan.carrier {
                Family::Send => wc.wr_id,
                // Only a WRITE_WITH_IMM is a doorbell (a SEND with an immediate is not).
                Family::Write if wc.opcode != WcOpcode::RecvRdmaWithImm => {
                    return RpcError::Malformed(format!(
                        "doorbell: a {:?} completion (a SEND), not a WRITE_WITH_IMM",
                        wc.opcode
                    ));
                }
                // The immediate is the sequence number itself, never wrapped: the client
                // refuses requests past 2^32 - 1 on a WRITE design (`doorbell_imm`).
                Family::Write => wc.imm.unwrap_or(0) as u64,
            };
            // A doorbell names an entry within the ring ahead of what is processed: one
            // beyond would have the server persist (and wait for) entries that cannot
            // exist, up to 2^32 of them.
            let window = self.processed.get() + self.layout.capacity as u64;
            if seq > window {
                return RpcError::Malformed(format!(
                    "doorbell for sequence {seq}, beyond the log's window (up to {window})"
                ));
            }
            let again = match self.plan.carrier {
                Family::Send => wc.wr_id + self.layout.capacity as u64,
                Family::Write => wc.wr_id,
            };
            if let Err(e) = self.post_receive_for(again) {
                return e.into();
            }
            if seq == 0 {
                self.bump(|s| s.bad_entries += 1);
                continue;
            }
            if self.plan.server_acknowledges() && seq > self.durable.get() {
                let from = self.durable.get() + 1;
                let mut ok = true;
                if self.plan.frame_commits() {
                    // The RNIC's RFlush acknowledges every entry it covers, and each
                    // frame is its own commit record: a corrupt one acknowledged as
                    // durable would stop recovery there, and with it every entry
                    // acknowledged after it. The CPU checks the frames before it posts
                    // (those the processor has executed already are durable in the store
                    // and the watermark, and their slots may hold a newer lap).
                    for s in from.max(self.processed.get() + 1)..=seq {
                        let entry = read_entry_with(&self.v, &self.layout, self.opts.conn, s, true);
                        if !matches!(entry, EntryState::Committed(_)) {
                            self.bump(|st| st.bad_entries += 1);
                            return RpcError::Malformed(format!(
                                "entry {s}: not a well-formed request of connection {}",
                                self.opts.conn
                            ));
                        }
                    }
                }
                if self.plan.responder_cpu {
                    for s in from..=seq {
                        let log = self.work_log.as_ref();
                        ok &= timed(log, &self.v, self.opts.conn, s, self.cpu_persist(s)).await;
                        if !ok {
                            // Never acknowledged, and the connection stops: the client
                            // wrote something that is not its request `s`.
                            return RpcError::Malformed(format!(
                                "entry {s}: not a well-formed request of connection {}",
                                self.opts.conn
                            ));
                        }
                    }
                }
                if ok {
                    self.durable.set(seq);
                    let sent = if self.plan.receiver_rflush {
                        self.rflush(from, seq)
                    } else {
                        self.send(ServerMsg::Durable { upto: seq })
                    };
                    if let Err(e) = sent {
                        return e.into();
                    }
                }
            }
            self.arrived.set(self.arrived.get().max(seq));
            self.notify.notify();
        }
    }

    /// The processor: takes committed entries in FIFO order and executes each on a
    /// worker of `pool` (seed 003 §4.2: "a thread is created to handle the RPC
    /// requests"). The injected processing of several entries may overlap when the pool
    /// has several workers; their effects (store access, watermark, reply) happen in
    /// sequence order ("processed in a FIFO order"). Returns why it stopped.
    async fn process(&self, pool: WorkerPool) -> RpcError {
        // Fast polls of an arrived entry before the thread backs off. The operator comes by
        // RDMA, which no completion announces, so the thread keeps polling while the entry
        // is there, however long the sender takes: a thread that stopped and waited for the
        // next arrival hung the connection whenever the sender's operator came later than
        // the fast polls lasted (on the real-time runtime a poll is a yield, and a sender
        // descheduled for tens of milliseconds outlasted 20,000 of them). After the fast
        // polls the interval doubles up to POLL_BACKOFF_MAX. After POLL_GIVE_UP of polling
        // one entry (its sender is gone: every client's reply time-out is far shorter) the
        // thread waits for the next arrival, so a simulation whose client died mid-request
        // still comes to rest.
        const MAX_POLLS: u32 = 20_000;
        const POLL_BACKOFF_MAX: Duration = Duration::from_millis(1);
        const POLL_GIVE_UP: Duration = Duration::from_millis(60_000);
        let tasks: Tasks<'_, RpcError> = Tasks::default();
        let driver = async {
            let mut polls = 0u32;
            let mut polling_since = Instant::ZERO;
            let frames = self.plan.frame_commits();
            let mut next = self.processed.get() + 1;
            loop {
                let seen = self.notify.generation.get();
                let giving_up =
                    polls > 0 && self.v.now().saturating_since(polling_since) >= POLL_GIVE_UP;
                let state = read_entry_with(&self.v, &self.layout, self.opts.conn, next, frames);
                // A later lap in the slot is a protocol violation no wait repairs (the client
                // overwrote an entry the server has not processed, seed 003 §4.2): the
                // connection ends now, once every earlier entry is processed, as for a torn
                // one, instead of polling the slot for POLL_GIVE_UP.
                if !matches!(state, EntryState::Committed(_)) {
                    if let Some(later) = later_lap(&self.v, &self.layout, self.opts.conn, next) {
                        loop {
                            let seen = self.turn.generation.get();
                            if self.processed.get() + 1 == next {
                                break;
                            }
                            self.turn.wait(seen).await;
                        }
                        return RpcError::Malformed(format!(
                            "entry {next}: its slot holds request {later}, a later lap of the \
                             ring: the client wrote it before entry {next} was processed"
                        ));
                    }
                }
                match state {
                    EntryState::Committed(r) => {
                        polls = 0;
                        let worker = pool.acquire().await;
                        tasks.start(self.execute(next, r, worker));
                        next += 1;
                    }
                    // Still torn when the polling gives up: its data is not the request
                    // its operator commits, and never will be (the client wrote the
                    // operator over something else). The connection ends with the reason,
                    // once every earlier entry is processed (none is left mid-store),
                    // instead of waiting forever with every later entry stuck behind it.
                    EntryState::Torn(why) if giving_up && self.processed.get() + 1 == next => {
                        return RpcError::Malformed(format!("entry {next}: {why}"));
                    }
                    // Not committed yet (or, live, an operator visible before its data).
                    _ if self.arrived.get() >= next
                        && (polls == 0
                            || self.v.now().saturating_since(polling_since) < POLL_GIVE_UP) =>
                    {
                        if polls == 0 {
                            polling_since = self.v.now();
                        }
                        polls = polls.saturating_add(1);
                        let wait = match polls.checked_sub(MAX_POLLS) {
                            None | Some(0) => self.opts.poll_interval,
                            Some(k) => {
                                let base = self.opts.poll_interval.as_nanos().max(1);
                                let ns = base.saturating_mul(1u64 << k.min(32));
                                Duration::from_nanos(ns.min(POLL_BACKOFF_MAX.as_nanos()))
                            }
                        };
                        self.v.compute(wait).await;
                    }
                    _ => {
                        polls = 0;
                        self.notify.wait(seen).await;
                    }
                }
            }
        };
        match tasks.run(driver).await {
            Ok(never) => never,
            Err(e) => e,
        }
    }

    /// Executes entry `seq` holding `worker`: the injected processing, then, once every
    /// earlier entry is processed, the store access, the server CPU's per-message work,
    /// the durable watermark and the reply.
    async fn execute(&self, seq: u64, r: Request, worker: Worker) -> Result<(), RpcError> {
        let _worker = worker;
        let log = self.work_log.as_ref();
        if self.opts.costs.processing > Duration::ZERO {
            let processing = self.v.compute(self.opts.costs.processing);
            timed(log, &self.v, self.opts.conn, seq, processing).await;
        }
        loop {
            let seen = self.turn.generation.get();
            if self.processed.get() + 1 == seq {
                break;
            }
            self.turn.wait(seen).await;
        }
        let guard = lock_store(&self.store_lock).await;
        if self.stopping.get() {
            // Torn down while this entry waited: it stays in the log for recovery.
            return Err(RpcError::Connection("the connection is closing".into()));
        }
        let in_store = InStore::enter(&self.in_store);
        let start = self.v.now();
        let mut kv = self
            .kv
            .take()
            .expect("the store is free on an entry's turn");
        // A refused request (a key outside the store, a value over a slot) is answered
        // with its refusal; it changed nothing, and its entry is processed like any other.
        let reply = kv.apply(self.opts.conn, seq, &r.op).await;
        self.kv.set(Some(kv));
        // The per-message CPU work the baselines' servers also pay: handling the request,
        // copying the object from the log to its slot (or a read's objects into the
        // reply).
        let cpu = self.opts.cpu;
        let copied = match &r.op {
            Op::Put { value, .. } => value.len(),
            _ => reply.value.len(),
        };
        self.v.compute(cpu.handle + cpu.copy(copied as u64)).await;
        let at = self.layout.watermark_addr();
        self.v.store(Space::Pm, at, &seq.to_le_bytes());
        self.v.persist_local(at, 8).await;
        if let Some(log) = log {
            log.record(self.opts.conn, seq, start, self.v.now());
        }
        drop(guard);
        drop(in_store);
        self.processed.set(seq);
        self.bump(|s| s.processed += 1);
        self.turn.notify();
        self.send(ServerMsg::Reply(r_frame(self.opts.conn, &reply)))?;
        Ok(())
    }
}
