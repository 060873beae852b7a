//! Per-request accounting of server CPU work, for the latency breakdown of seed 003 §5.6
//! (Figure 20: "software overhead at the sender side, network RTTs (hardware), and software
//! overhead at the receiver side (including RPC processing cost and data persisting
//! cost)").
//!
//! A server given a [`WorkLog`] records each stretch of CPU work it does for a request
//! (noticing and dispatching it, the injected processing, the store access with its copy
//! and persist, the receiver CPU's persist of an RFlush design) as a [`WorkSpan`] tagged
//! with the request's connection and sequence number. The benchmark then charges to an
//! RPC the part of its latency during which the server worked on a request the RPC waited
//! for ([`WorkLog::covered`]). Without a log nothing is recorded and no clock is read.

use remora_model::time::Instant;
use remora_verbs::Verbs;
use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;

/// One stretch of server CPU work for one request.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct WorkSpan {
    /// The request's connection.
    pub conn: u32,
    /// Its sequence number on the connection (a baseline's: its cell's).
    pub seq: u64,
    /// When the work started.
    pub start: Instant,
    /// When it ended.
    pub end: Instant,
}

/// Server work spans, shared by the server and the benchmark (clones share the log).
#[derive(Clone, Debug, Default)]
pub struct WorkLog(Rc<RefCell<Vec<WorkSpan>>>);

impl WorkLog {
    /// Records `start..end` of work for request `seq` of connection `conn`.
    pub fn record(&self, conn: u32, seq: u64, start: Instant, end: Instant) {
        if end > start {
            self.0.borrow_mut().push(WorkSpan {
                conn,
                seq,
                start,
                end,
            });
        }
    }

    /// Nanoseconds of `t0..t1` covered by the spans `keep` selects (their union, so
    /// concurrent work counts once); then forgets every span that ended by `t1`, which
    /// no later interval starting at or after `t1` can overlap (one sender's RPCs follow
    /// each other).
    pub fn covered(&self, t0: Instant, t1: Instant, keep: impl Fn(&WorkSpan) -> bool) -> u64 {
        let mut spans = self.0.borrow_mut();
        let mut iv: Vec<(u64, u64)> = spans
            .iter()
            .filter(|s| keep(s) && s.end > t0 && s.start < t1)
            .map(|s| (s.start.max(t0).as_nanos(), s.end.min(t1).as_nanos()))
            .collect();
        spans.retain(|s| s.end > t1);
        iv.sort_unstable();
        let mut total = 0;
        let mut cur: Option<(u64, u64)> = None;
        for (a, b) in iv {
            match &mut cur {
                Some((_, e)) if a <= *e => *e = (*e).max(b),
                _ => {
                    if let Some((s, e)) = cur {
                        total += e - s;
                    }
                    cur = Some((a, b));
                }
            }
        }
        if let Some((s, e)) = cur {
            total += e - s;
        }
        total
    }

    /// Spans recorded and not yet forgotten.
    pub fn len(&self) -> usize {
        self.0.borrow().len()
    }

    /// True when no span is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Runs `work` on `v`, recording it in `log` (if any) as work for `seq` of `conn`.
pub async fn timed<V: Verbs, T>(
    log: Option<&WorkLog>,
    v: &V,
    conn: u32,
    seq: u64,
    work: impl Future<Output = T>,
) -> T {
    match log {
        None => work.await,
        Some(log) => {
            let start = v.now();
            let out = work.await;
            log.record(conn, seq, start, v.now());
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    #[test]
    fn covered_is_the_clipped_union_and_forgets_old_spans() {
        let log = WorkLog::default();
        log.record(1, 1, t(0), t(50));
        log.record(1, 2, t(100), t(200));
        log.record(1, 2, t(150), t(250));
        log.record(1, 3, t(260), t(400));
        log.record(2, 2, t(100), t(300));
        // 100..250 of connection 1 inside 80..300; 260..300 of seq 3 excluded.
        assert_eq!(
            log.covered(t(80), t(300), |s| s.conn == 1 && s.seq <= 2),
            150
        );
        // Spans that ended by 300 are gone; seq 3 (ends at 400) is kept.
        assert_eq!(log.len(), 1);
        assert_eq!(log.covered(t(300), t(500), |_| true), 100);
    }
}
