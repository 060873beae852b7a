//! A single-threaded executor for simulated tasks. Wakers only put a task id on the
//! ready queue; tasks run when the simulator says so, in wake order, so runs are
//! deterministic.

use remora_model::verbs::NodeId;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};

type BoxFuture = Pin<Box<dyn Future<Output = ()>>>;

struct TaskWaker {
    id: usize,
    generation: u64,
    queued: AtomicBool,
    ready: Arc<Mutex<VecDeque<(usize, u64)>>>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::Relaxed) {
            self.ready
                .lock()
                .expect("ready queue")
                .push_back((self.id, self.generation));
        }
    }
}

struct Task {
    fut: Option<BoxFuture>,
    owner: Option<NodeId>,
    generation: u64,
    waker: Arc<TaskWaker>,
}

#[derive(Default)]
pub(crate) struct Executor {
    tasks: RefCell<Vec<Option<Task>>>,
    free: RefCell<Vec<usize>>,
    ready: Arc<Mutex<VecDeque<(usize, u64)>>>,
    generation: RefCell<u64>,
}

impl Executor {
    pub(crate) fn spawn(&self, owner: Option<NodeId>, fut: BoxFuture) {
        let generation = {
            let mut g = self.generation.borrow_mut();
            *g += 1;
            *g
        };
        let id = self.free.borrow_mut().pop().unwrap_or_else(|| {
            let mut t = self.tasks.borrow_mut();
            t.push(None);
            t.len() - 1
        });
        let waker = Arc::new(TaskWaker {
            id,
            generation,
            queued: AtomicBool::new(false),
            ready: self.ready.clone(),
        });
        self.tasks.borrow_mut()[id] = Some(Task {
            fut: Some(fut),
            owner,
            generation,
            waker: waker.clone(),
        });
        waker.wake_by_ref();
    }

    /// Polls every runnable task until none is runnable.
    pub(crate) fn run_ready(&self) {
        loop {
            let next = self.ready.lock().expect("ready queue").pop_front();
            let Some((id, generation)) = next else { return };
            let (mut fut, waker) = {
                let mut tasks = self.tasks.borrow_mut();
                let Some(task) = tasks[id].as_mut().filter(|t| t.generation == generation) else {
                    continue;
                };
                task.waker.queued.store(false, Ordering::Relaxed);
                (
                    task.fut.take().expect("task polled re-entrantly"),
                    task.waker.clone(),
                )
            };
            let w = Waker::from(waker);
            let done = fut.as_mut().poll(&mut Context::from_waker(&w)).is_ready();
            let mut tasks = self.tasks.borrow_mut();
            match tasks
                .get_mut(id)
                .and_then(|t| t.as_mut())
                .filter(|t| t.generation == generation)
            {
                Some(task) if !done => task.fut = Some(fut),
                Some(_) => {
                    tasks[id] = None;
                    self.free.borrow_mut().push(id);
                    drop(tasks);
                    drop(fut);
                }
                None => {
                    drop(tasks);
                    drop(fut); // cancelled while running (its node crashed)
                }
            }
        }
    }

    /// Drops every task (the simulation is gone).
    pub(crate) fn cancel_all(&self) {
        let dead: Vec<Task> = {
            let mut tasks = self.tasks.borrow_mut();
            self.free.borrow_mut().clear();
            tasks.drain(..).flatten().collect()
        };
        drop(dead); // futures dropped outside the borrow: their destructors may use the sim
    }

    /// Drops every task owned by `node` (the node lost power).
    pub(crate) fn cancel_owned_by(&self, node: NodeId) {
        let dead: Vec<Task> = {
            let mut tasks = self.tasks.borrow_mut();
            let mut dead = Vec::new();
            for (i, slot) in tasks.iter_mut().enumerate() {
                if slot.as_ref().is_some_and(|t| t.owner == Some(node)) {
                    dead.push(slot.take().unwrap());
                    self.free.borrow_mut().push(i);
                }
            }
            dead
        };
        drop(dead); // futures dropped outside the borrow: their destructors may use the sim
    }
}
