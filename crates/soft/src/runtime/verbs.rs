//! [`remora_verbs::Verbs`] for [`RtNode`]: each verb runs on the RNIC at the wall
//! clock's time and kicks the driver; waiting for a completion and CPU work are where
//! tasks give the driver its turns.

use super::{wall, Inner, RtNode, JUMP, SLEEP_MIN};
use remora_model::hierarchy::Space;
use remora_model::rnic::{MrInfo, QpAttr};
use remora_model::time::{Duration, Instant};
use remora_model::verbs::*;
use remora_model::ServerConfig;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// Waits until a CQ holds a completion; the driver wakes it after the step that put one
/// there.
struct WaitCq {
    inner: Rc<Inner>,
    cq: CqId,
    id: u64,
}

impl Future for WaitCq {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = self.inner.st.borrow_mut();
        if st.rnic.cq_len(self.cq) > 0 {
            st.cq_waiters.retain(|(id, _, _)| *id != self.id);
            return Poll::Ready(());
        }
        match st.cq_waiters.iter_mut().find(|(id, _, _)| *id == self.id) {
            Some((_, _, w)) => w.clone_from(cx.waker()),
            None => {
                st.cq_waiters.push((self.id, self.cq, cx.waker().clone()));
                // A task went (back) to waiting: one fewer that may still answer.
                st.unsettled = st.unsettled.saturating_sub(1);
            }
        }
        Poll::Pending
    }
}

impl Drop for WaitCq {
    fn drop(&mut self) {
        if let Ok(mut st) = self.inner.st.try_borrow_mut() {
            st.cq_waiters.retain(|(id, _, _)| *id != self.id);
        }
    }
}

impl remora_verbs::Verbs for RtNode {
    fn node(&self) -> NodeId {
        self.inner.st.borrow().rnic.id()
    }
    fn now(&self) -> Instant {
        let mut st = self.inner.st.borrow_mut();
        self.inner.now(&mut st)
    }
    fn config(&self) -> ServerConfig {
        self.inner.st.borrow().rnic.config()
    }
    fn alloc(&self, space: Space, len: u64, align: u64) -> u64 {
        self.with(|r, _| r.alloc(space, len, align))
    }
    fn alloc_pd(&self) -> Result<PdId, VerbsError> {
        self.with(|r, _| Ok(r.alloc_pd()))
    }
    fn reg_mr(
        &self,
        pd: PdId,
        space: Space,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<MrInfo, VerbsError> {
        self.with(|r, _| r.reg_mr(pd, space, addr, len, access))
    }
    fn create_cq(&self, depth: usize) -> Result<CqId, VerbsError> {
        self.with(|r, _| r.create_cq(depth))
    }
    fn create_qp(
        &self,
        pd: PdId,
        send_cq: CqId,
        recv_cq: CqId,
        attr: QpAttr,
    ) -> Result<QpNum, VerbsError> {
        self.with(|r, _| r.create_qp(pd, send_cq, recv_cq, attr))
    }
    fn dereg_mr(&self, mr: &MrInfo) -> Result<(), VerbsError> {
        self.with_quiet(|r, _| r.dereg_mr(mr.lkey))
    }
    fn dealloc_pd(&self, pd: PdId) -> Result<(), VerbsError> {
        self.with_quiet(|r, _| r.dealloc_pd(pd))
    }
    fn destroy_qp(&self, qp: QpNum) -> Result<(), VerbsError> {
        self.with(|r, now| r.destroy_qp(now, qp))
    }
    fn destroy_cq(&self, cq: CqId) -> Result<(), VerbsError> {
        self.with_quiet(|r, _| r.destroy_cq(cq))
    }
    fn post_send(&self, qp: QpNum, wr: SendWr) -> Result<(), VerbsError> {
        // Posting only queues the request (`now` dates its trace event); the driver's step
        // reads the clock before the RNIC acts on the doorbell. So no clock read per post:
        // the model's clock as of the loop's last edge.
        let r = {
            let mut st = self.inner.st.borrow_mut();
            let now = st.model_now;
            let r = st.rnic.post_send(now, qp, wr);
            // Only a coalescing round reads it (a stream's posts skip the lookup).
            if st.coalescing {
                if let Some(conn) = st.rnic.qp_peer(qp).and_then(|p| st.peers.get(&p)) {
                    conn.posted.set(true);
                }
            }
            r
        };
        self.inner.kick();
        r
    }
    fn post_recv(&self, qp: QpNum, wr: RecvWr) -> Result<(), VerbsError> {
        // Queuing a receive gives the RNIC nothing to send or time, and reads no clock
        // (as `post_send`: the model's clock as of the last step).
        let mut st = self.inner.st.borrow_mut();
        let now = st.model_now;
        st.rnic.post_recv(now, qp, wr)
    }
    fn poll_cq(&self, cq: CqId, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        self.inner.st.borrow_mut().rnic.poll_cq(cq, max, out)
    }
    fn poll_one(&self, cq: CqId) -> Option<WorkCompletion> {
        self.inner.st.borrow_mut().rnic.poll_one(cq)
    }
    fn wait_cq(&self, cq: CqId) -> impl Future<Output = ()> {
        let id = {
            let mut st = self.inner.st.borrow_mut();
            st.next_waiter += 1;
            st.next_waiter
        };
        WaitCq {
            inner: self.inner.clone(),
            cq,
            id,
        }
    }
    fn load(&self, space: Space, addr: u64, buf: &mut [u8]) {
        // A load only reads (it may move the hierarchy's clock, which makes the driver's
        // next deadline later, never earlier).
        self.with_quiet(|r, now| r.cpu_load(now, space, addr, buf))
    }
    fn store(&self, space: Space, addr: u64, data: &[u8]) {
        self.with(|r, now| r.cpu_store(now, space, addr, data))
    }
    async fn persist_local(&self, addr: u64, len: u64) {
        let w = wall();
        let (now, done) = {
            let mut st = self.inner.st.borrow_mut();
            let now = self.inner.now_at(&mut st, w);
            let issue = st.rnic.hierarchy().clwb(now, addr, len);
            (now, st.rnic.hierarchy().sfence(now + issue))
        };
        // A long fence (a slow data path) takes its time on the wall clock too.
        if done > now + JUMP {
            remora_exec::time::sleep(std::time::Duration::from_nanos((done - now).as_nanos()))
                .await;
        }
        {
            let mut st = self.inner.st.borrow_mut();
            // The fence completes in model time; the lines are in the pool file on return.
            st.model_now = st.model_now.max(done);
            let t = st.model_now;
            st.rnic.handle_timeout(t);
            super::sync_or_abort(&mut st.rnic);
        }
        self.inner.kick();
        // A fence long enough to sleep yielded already; a short one is this reading's work.
        self.cpu_yield_at(w).await;
    }

    async fn compute(&self, d: Duration) {
        if d == Duration::ZERO {
            // An explicit yield point (e.g. an application that posted a batch and wants
            // the RNIC to send it while it prepares the next).
            remora_exec::yield_local().await;
        } else if d < SLEEP_MIN {
            self.cpu_yield().await;
        } else {
            remora_exec::time::sleep(std::time::Duration::from_nanos(d.as_nanos())).await;
        }
    }
    async fn memcpy(&self, dst: (Space, u64), src: (Space, u64), len: u64) {
        let mut scratch = remora_model::bytes::Scratch::new();
        let buf = scratch.get(len as usize);
        // One piece of CPU work: the load, the store and the slice's check share a
        // reading of the clock.
        let w = wall();
        self.with_at(w, |r, now| {
            r.cpu_load(now, src.0, src.1, buf);
            r.cpu_store(now, dst.0, dst.1, buf)
        });
        self.cpu_yield_at(w).await;
    }
}
