//! Handlers as the runtime runs them: asynchronous, with a time limit, a panic turned
//! into a failed attempt.
//!
//! The core's [`qflow_core::TaskHandler`] is synchronous; a host with I/O-bound task code
//! registers an [`AsyncTaskHandler`] instead so the lane is never blocked while the task
//! waits. Synchronous handlers are wrapped as futures that are ready at once: they run
//! inline on the lane, which is the fast path for CPU-only task code and the reason they
//! must not block.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use qflow_loader::model::Variables;

use qflow_core::handler::{Handlers, TaskContext, TaskOutcome, HANDLER_MISSING, HANDLER_PANICKED};
use qflow_core::Input;

/// The structured code of an attempt that outran the handler time limit (E5).
pub const HANDLER_TIMEOUT: &str = "HANDLER_TIMEOUT";

/// Everything a handler gets, owned, so the call can outlive the lane's borrow.
#[derive(Debug, Clone)]
pub struct TaskCall {
    pub instance_id: String,
    pub node: String,
    pub handler: String,
    pub attempt: u32,
    pub inputs: Variables,
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
    Sync(Arc<dyn qflow_core::TaskHandler>),
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
    pub fn with_sync(
        mut self,
        name: impl Into<String>,
        h: impl qflow_core::TaskHandler + 'static,
    ) -> Self {
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

    /// Runs the handler for `call` under `limit`, turning every way it can end into the
    /// input the core expects back for that attempt.
    pub(crate) fn run(&self, call: TaskCall, limit: Duration) -> BoxFuture<'static, Input> {
        let Some(entry) = self.by_name.get(&call.handler).cloned() else {
            let message = format!("no handler is registered for q:task `{}`", call.handler);
            return futures::future::ready(failed(&call, HANDLER_MISSING, message)).boxed();
        };
        match &*entry {
            Entry::Sync(h) => {
                let ctx = TaskContext {
                    instance_id: &call.instance_id,
                    node: &call.node,
                    handler: &call.handler,
                    attempt: call.attempt,
                    inputs: &call.inputs,
                };
                let input = qflow_core::run_handler(h.as_ref(), &ctx);
                futures::future::ready(input).boxed()
            }
            Entry::Async(h) => {
                let fut = AssertUnwindSafe(h.call(call.clone())).catch_unwind();
                async move {
                    match tokio::time::timeout(limit, fut).await {
                        Ok(Ok(outcome)) => outcome_input(&call, outcome),
                        Ok(Err(_panic)) => {
                            failed(&call, HANDLER_PANICKED, "handler panicked".into())
                        }
                        Err(_elapsed) => failed(
                            &call,
                            HANDLER_TIMEOUT,
                            format!("handler ran longer than {} ms", limit.as_millis()),
                        ),
                    }
                }
                .boxed()
            }
        }
    }
}

fn outcome_input(call: &TaskCall, outcome: TaskOutcome) -> Input {
    let node = call.node.clone();
    let attempt = call.attempt;
    match outcome {
        TaskOutcome::Ok(outputs) => Input::TaskCompleted {
            node,
            attempt,
            outputs,
        },
        TaskOutcome::Fail { code, message } => Input::TaskFailed {
            node,
            attempt,
            code,
            message,
        },
        TaskOutcome::BpmnError { code, message } => Input::TaskBpmnError {
            node,
            attempt,
            code,
            message,
        },
    }
}

fn failed(call: &TaskCall, code: &str, message: String) -> Input {
    Input::TaskFailed {
        node: call.node.clone(),
        attempt: call.attempt,
        code: code.to_owned(),
        message,
    }
}
