//! The trace recorder: a running fingerprint of every event (always on, for determinism
//! tests) and, when enabled, a timeline exportable as Chrome trace-event JSON, which
//! Perfetto (ui.perfetto.dev) and chrome://tracing open.

use remora_model::time::{Duration, Instant};
use remora_model::verbs::NodeId;
use serde::Serialize;
use std::collections::BTreeMap;

/// One recorded timeline item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// Start.
    pub at: Instant,
    /// Length; `None` for an instant event.
    pub dur: Option<Duration>,
    /// Node the item belongs to (a Chrome "process").
    pub node: NodeId,
    /// Lane within the node (a Chrome "thread"), e.g. `qp 0`, `wire→1`, `cpu`.
    pub lane: String,
    /// What happened.
    pub name: String,
}

/// A digest of `data` for the fingerprint: four independent lanes of 8-byte words (so a
/// packet's bytes cost a fraction of a cycle each), then the lanes and the length mixed.
/// Each step is a bijection of its word, so a run that changes one word of a packet
/// changes the digest.
pub fn digest(data: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    if data.is_empty() {
        return 0;
    }
    let mut h = [K, K.rotate_left(16), K.rotate_left(32), K.rotate_left(48)];
    let mut lanes = |c: &[u8]| {
        for (i, w) in c.chunks_exact(8).enumerate() {
            let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            h[i] = (h[i] ^ w).wrapping_mul(K);
        }
    };
    let mut chunks = data.chunks_exact(32);
    for c in &mut chunks {
        lanes(c);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut last = [0u8; 32];
        last[..rest.len()].copy_from_slice(rest);
        lanes(&last);
    }
    let mut out = data.len() as u64;
    for (i, l) in h.iter().enumerate() {
        out = (out ^ l.rotate_left(16 * i as u32)).wrapping_mul(K);
        out ^= out >> 29;
    }
    out
}

/// Fingerprint and optional timeline of a run.
#[derive(Debug)]
pub struct Trace {
    hash: u64,
    count: u64,
    record: bool,
    events: Vec<TraceEvent>,
    open_wrs: BTreeMap<(NodeId, u32, u64), Instant>,
}

impl Default for Trace {
    fn default() -> Self {
        Trace {
            hash: 0xcbf2_9ce4_8422_2325,
            count: 0,
            record: false,
            events: Vec::new(),
            open_wrs: BTreeMap::new(),
        }
    }
}

/// Summary counts of a recorded timeline.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceSummary {
    /// Events folded into the fingerprint.
    pub fingerprinted: u64,
    /// Recorded items by name, sorted.
    pub by_name: BTreeMap<String, u64>,
    /// Time of the last recorded item's end.
    pub end: Instant,
}

impl Trace {
    /// Starts or stops recording the timeline (the fingerprint is always kept).
    pub fn set_recording(&mut self, on: bool) {
        self.record = on;
    }
    /// Whether the timeline is recorded.
    pub fn recording(&self) -> bool {
        self.record
    }

    /// Folds a fact about the run into the fingerprint. Word-at-a-time multiply-xorshift:
    /// this runs for every event, so it must cost a few cycles, not a byte loop.
    pub fn fold(&mut self, words: &[u64]) {
        self.count += 1;
        for &w in words {
            self.hash = (self.hash ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            self.hash ^= self.hash >> 29;
        }
    }

    /// The run's fingerprint: equal seeds and programs give equal fingerprints.
    pub fn fingerprint(&self) -> u64 {
        self.hash
    }

    /// Records a span or instant.
    pub fn push(&mut self, ev: TraceEvent) {
        if self.record {
            self.events.push(ev);
        }
    }

    /// Notes that work request `wr_id` was posted on `qp` of `node` (for its latency span).
    pub fn wr_posted(&mut self, node: NodeId, qp: u32, wr_id: u64, at: Instant) {
        if self.record {
            self.open_wrs.insert((node, qp, wr_id), at);
        }
    }

    /// Notes a completion; records the span from posting if known.
    pub fn wr_completed(&mut self, node: NodeId, qp: u32, wr_id: u64, at: Instant) {
        if !self.record {
            return;
        }
        let (start, name) = match self.open_wrs.remove(&(node, qp, wr_id)) {
            Some(s) => (s, format!("wr {wr_id}")),
            None => (at, format!("recv {wr_id}")),
        };
        self.events.push(TraceEvent {
            at: start,
            dur: Some(at.saturating_since(start)),
            node,
            lane: format!("qp {qp}"),
            name,
        });
    }

    /// The recorded items.
    pub fn events(&self) -> &[TraceEvent] {
        &self.events
    }

    /// Counts by name.
    pub fn summary(&self) -> TraceSummary {
        let mut s = TraceSummary {
            fingerprinted: self.count,
            ..Default::default()
        };
        for e in &self.events {
            *s.by_name
                .entry(e.name.split(' ').next().unwrap_or("").to_string())
                .or_default() += 1;
            s.end = s.end.max(e.at + e.dur.unwrap_or(Duration::ZERO));
        }
        s
    }

    /// The timeline as Chrome trace-event JSON (`{"traceEvents": [...]}`), times in µs.
    pub fn to_chrome_json(&self, node_names: &BTreeMap<NodeId, String>) -> String {
        #[derive(Serialize)]
        struct Ev<'a> {
            name: &'a str,
            ph: &'static str,
            ts: f64,
            #[serde(skip_serializing_if = "Option::is_none")]
            dur: Option<f64>,
            pid: u32,
            tid: u32,
            #[serde(skip_serializing_if = "Option::is_none")]
            s: Option<&'static str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            args: Option<serde_json::Value>,
        }
        let us = |t: u64| t as f64 / 1_000.0;
        let mut lanes: BTreeMap<(NodeId, &str), u32> = BTreeMap::new();
        for e in &self.events {
            let n = lanes.len() as u32;
            lanes.entry((e.node, e.lane.as_str())).or_insert(n);
        }
        let mut out = Vec::new();
        for (node, name) in node_names {
            out.push(Ev {
                name: "process_name",
                ph: "M",
                ts: 0.0,
                dur: None,
                pid: *node,
                tid: 0,
                s: None,
                args: Some(serde_json::json!({ "name": name })),
            });
        }
        for ((node, lane), tid) in &lanes {
            out.push(Ev {
                name: "thread_name",
                ph: "M",
                ts: 0.0,
                dur: None,
                pid: *node,
                tid: *tid,
                s: None,
                args: Some(serde_json::json!({ "name": lane })),
            });
        }
        for e in &self.events {
            let tid = lanes[&(e.node, e.lane.as_str())];
            out.push(match e.dur {
                Some(d) => Ev {
                    name: &e.name,
                    ph: "X",
                    ts: us(e.at.as_nanos()),
                    dur: Some(us(d.as_nanos())),
                    pid: e.node,
                    tid,
                    s: None,
                    args: None,
                },
                None => Ev {
                    name: &e.name,
                    ph: "i",
                    ts: us(e.at.as_nanos()),
                    dur: None,
                    pid: e.node,
                    tid,
                    s: Some("t"),
                    args: None,
                },
            });
        }
        serde_json::to_string(&serde_json::json!({ "traceEvents": out, "displayTimeUnit": "ns" }))
            .expect("trace serializes")
    }
}
