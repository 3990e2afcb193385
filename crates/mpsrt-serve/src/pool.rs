//! The server-wide executor pool: a bounded set of OS threads shared by every model instance.
//!
//! Execution blocks (GPU or CPU work), so it never runs on tokio workers. Before this pool each
//! instance owned a thread, so a config with a huge `instance_group count` could exhaust the
//! host's threads (issue 18). Now instances are plain objects parked in their model's queue
//! state; a pool thread takes a model that has both queued work and an idle instance, forms the
//! batch exactly as a dedicated executor would (see `scheduler::take_job`), runs it and parks the
//! instance again. At most `--executor-threads` batches execute at once over the whole server;
//! threads are started lazily (never more than the registered instances) and exit when no model
//! is registered, so short-lived servers in tests do not leak them.
//!
//! Lock order: the pool's mutex, then a model's state mutex — never the reverse. Whoever adds
//! work or frees an instance takes the pool mutex before notifying, so a thread that scanned the
//! models and is about to wait cannot miss it.

use crate::scheduler::{run_batch, take_job, Shared, Take};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::Instant;

struct Inner {
    /// Models with instances; a closed model stays until its queue is drained.
    models: Vec<Arc<Shared>>,
    /// Instances over the registered models (threads beyond this would only idle).
    instances: usize,
    threads: usize,
    /// Round-robin start so one busy model cannot starve the others.
    next: usize,
}

impl Inner {
    /// Unregisters the model at `i` and its instances from the count.
    fn remove(&mut self, i: usize) -> Arc<Shared> {
        let m = self.models.swap_remove(i);
        self.instances = self.instances.saturating_sub(m.instance_count);
        m
    }
}

/// A bounded pool of executor threads shared by all models of a server.
pub struct ExecPool {
    inner: Mutex<Inner>,
    cv: Condvar,
    max_threads: usize,
}

impl ExecPool {
    /// A pool that runs at most `max_threads` batches at once (at least 1).
    pub fn new(max_threads: usize) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner { models: Vec::new(), instances: 0, threads: 0, next: 0 }),
            cv: Condvar::new(),
            max_threads: max_threads.max(1),
        })
    }

    /// The most batches that execute at once.
    pub fn max_threads(&self) -> usize {
        self.max_threads
    }

    /// Threads running now (for tests and diagnostics).
    pub fn threads(&self) -> usize {
        self.inner.lock().threads
    }

    /// Adds a model's queue; starts threads up to `min(max_threads, instances)`.
    pub(crate) fn register(self: &Arc<Self>, model: Arc<Shared>, instances: usize) {
        let mut g = self.inner.lock();
        g.models.push(model);
        g.instances += instances;
        let want = self.max_threads.min(g.instances);
        while g.threads < want {
            let pool = self.clone();
            let spawned = std::thread::Builder::new()
                .name("mpsrt-exec".into())
                .spawn(move || pool.thread_main());
            match spawned {
                Ok(_) => g.threads += 1,
                Err(e) => {
                    // Fewer threads only means less parallelism; one is enough to make progress.
                    tracing::warn!("cannot start another executor thread: {e}");
                    if g.threads == 0 {
                        tracing::error!("no executor thread could be started");
                    }
                    break;
                }
            }
        }
        drop(g);
        self.cv.notify_all();
    }

    /// Removes a model (its queue drained, its instances already taken out).
    pub(crate) fn deregister(&self, model: &Arc<Shared>) {
        let mut g = self.inner.lock();
        if let Some(i) = g.models.iter().position(|m| Arc::ptr_eq(m, model)) {
            g.remove(i);
        }
        drop(g);
        self.cv.notify_all();
    }

    /// Wakes the threads after new work or a freed instance.
    pub(crate) fn notify(&self) {
        let _g = self.inner.lock();
        self.cv.notify_all();
    }

    fn thread_main(self: Arc<Self>) {
        let mut g = self.inner.lock();
        loop {
            if g.models.is_empty() {
                g.threads -= 1;
                return;
            }
            let now = Instant::now();
            let mut wake: Option<Instant> = None;
            let mut job = None;
            let mut finished = Vec::new();
            let n = g.models.len();
            for k in 0..n {
                let i = (g.next + k) % n;
                let m = &g.models[i];
                let mut st = m.state.lock();
                match take_job(m, &mut st, now) {
                    Take::Job(slot, batch) => {
                        job = Some((i, m.clone(), slot, batch));
                        break;
                    }
                    Take::WaitUntil(d) => wake = Some(wake.map_or(d, |w: Instant| w.min(d))),
                    Take::Nothing => {}
                    Take::Finished => finished.push(i),
                }
            }
            // A model dropped without `shutdown` leaves once drained; its instances go with it.
            // (Removing shifts indices, so only when no job was taken this round.)
            if job.is_some() {
                finished.clear();
            }
            for i in finished.into_iter().rev() {
                g.remove(i).state.lock().idle.clear();
            }
            match job {
                Some((i, m, (mut instance, stats), batch)) => {
                    g.next = i + 1;
                    drop(g);
                    // run_batch already turns a panicking model into an error reply; this guard
                    // only keeps the instance and the busy count right should anything else panic.
                    let run = std::panic::AssertUnwindSafe(|| {
                        run_batch(&m, instance.as_mut(), &stats, batch)
                    });
                    if std::panic::catch_unwind(run).is_err() {
                        tracing::error!(model = %m.model, "executor panicked outside the model");
                    }
                    {
                        let mut st = m.state.lock();
                        st.busy -= 1;
                        st.idle.push_back((instance, stats));
                    }
                    m.done.notify_all();
                    g = self.inner.lock();
                    // The freed instance may serve work another thread saw and could not take.
                    self.cv.notify_all();
                }
                None => match wake {
                    Some(d) => {
                        self.cv.wait_until(&mut g, d);
                    }
                    None => self.cv.wait(&mut g),
                },
            }
        }
    }
}
