//! Handlers as the runtime runs them: asynchronous, with a time limit, a panic turned
//! into a failed attempt.
//!
//! The core's [`TaskHandler`] is synchronous; a host with I/O-bound task code
//! registers an [`AsyncTaskHandler`] instead so the lane is never blocked while the task
//! waits. Synchronous handlers run inline on the lane when it starts them, and their
//! outcome comes back at once (`HandlerRun::Ended`, no future): the fast path for
//! CPU-only task code, and the reason they must not block.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::future::{self, BoxFuture, Either};
use futures::FutureExt;
use qflow_core::handler::{call_input, panic_message, CallEnded, Handlers, TaskContext};
use qflow_core::{Attempt, Input, TaskHandler, TaskOutcome};
use qflow_loader::model::Variables;

use crate::clock::Clock;

/// Everything a handler gets, owned, so the call can outlive the lane's borrow.
#[derive(Debug, Clone)]
pub struct TaskCall {
    pub instance_id: String,
    pub node: String,
    pub handler: String,
    pub attempt: Attempt,
    pub inputs: Variables,
}

impl TaskCall {
    fn context(&self) -> TaskContext<'_> {
        TaskContext {
            instance_id: &self.instance_id,
            node: &self.node,
            handler: &self.handler,
            attempt: self.attempt,
            inputs: &self.inputs,
        }
    }
}

/// Host task code that may wait on I/O.
pub trait AsyncTaskHandler: Send + Sync {
    fn call(&self, call: TaskCall) -> BoxFuture<'static, TaskOutcome>;
}

impl<F, Fut> AsyncTaskHandler for F
where
    F: Fn(TaskCall) -> Fut + Send + Sync,
    Fut: std::future::Future<Output = TaskOutcome> + Send + 'static,
{
    fn call(&self, call: TaskCall) -> BoxFuture<'static, TaskOutcome> {
        self(call).boxed()
    }
}

enum Entry {
    Sync(Arc<dyn TaskHandler>),
    Async(Arc<dyn AsyncTaskHandler>),
}

/// Handlers by `q:task` name, synchronous or not.
#[derive(Default, Clone)]
pub struct AsyncHandlers {
    by_name: BTreeMap<String, Arc<Entry>>,
}

impl From<Handlers> for AsyncHandlers {
    fn from(h: Handlers) -> Self {
        let mut out = AsyncHandlers::default();
        for name in h.names() {
            if let Some(handler) = h.get(name) {
                out.by_name
                    .insert(name.to_owned(), Arc::new(Entry::Sync(handler.clone())));
            }
        }
        out
    }
}

impl AsyncHandlers {
    pub fn new() -> AsyncHandlers {
        AsyncHandlers::default()
    }

    /// Registers a synchronous handler: it runs inline on the lane and must not block.
    pub fn with_sync(mut self, name: impl Into<String>, h: impl TaskHandler + 'static) -> Self {
        self.by_name
            .insert(name.into(), Arc::new(Entry::Sync(Arc::new(h))));
        self
    }

    /// Registers an asynchronous handler.
    pub fn with_async(
        mut self,
        name: impl Into<String>,
        h: impl AsyncTaskHandler + 'static,
    ) -> Self {
        self.by_name
            .insert(name.into(), Arc::new(Entry::Async(Arc::new(h))));
        self
    }

    /// Whether a handler is registered under `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// Runs the handler for `call`; an asynchronous one gets until `started_ms +
    /// limit_ms` on `clock`. Every way the call can end becomes, through the core's one
    /// mapping ([`call_input`]), the input the core expects back for that attempt. A
    /// synchronous handler (or none) has ended when this returns: its input comes back as
    /// it is, with no future to box and poll.
    pub(crate) fn run(
        &self,
        call: TaskCall,
        clock: &dyn Clock,
        started_ms: i64,
        limit_ms: u64,
    ) -> HandlerRun {
        let Some(entry) = self.by_name.get(&call.handler) else {
            return HandlerRun::Ended(call_input(&call.context(), CallEnded::Missing));
        };
        match &**entry {
            Entry::Sync(h) => {
                HandlerRun::Ended(qflow_core::run_handler(h.as_ref(), &call.context()))
            }
            Entry::Async(h) => {
                let fut = AssertUnwindSafe(h.call(call.clone())).catch_unwind();
                let deadline =
                    started_ms.saturating_add(i64::try_from(limit_ms).unwrap_or(i64::MAX));
                let expired = clock.sleep_until(deadline);
                let running = async move {
                    let ended = match future::select(fut, expired).await {
                        Either::Left((Ok(outcome), _)) => CallEnded::Returned(outcome),
                        Either::Left((Err(panic), _)) => {
                            CallEnded::Panicked(panic_message(panic.as_ref()))
                        }
                        Either::Right(((), _)) => CallEnded::TimedOut { limit_ms },
                    };
                    call_input(&call.context(), ended)
                }
                .boxed();
                HandlerRun::Running(running)
            }
        }
    }
}

/// A handler call as [`AsyncHandlers::run`] leaves it.
pub(crate) enum HandlerRun {
    /// It has ended: the input for the core.
    Ended(Input),
    /// It runs on: its input once it ends.
    Running(BoxFuture<'static, Input>),
}
