//! Registered task handlers: the host's code behind `q:task="name"`.
//!
//! The pure core never calls a handler; it emits [`crate::Effect::RunTask`] and the shell
//! (the runtime, or the simulator) runs the handler and feeds the outcome back as an
//! [`Input`]. [`run_handler`] is the one place that turns a handler call into an input,
//! so a panicking handler becomes `TaskFailed { code: "HANDLER_PANICKED" }` everywhere,
//! never a crash of the lane. Nothing here reads the clock or does I/O itself.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use qflow_loader::model::Variables;

use crate::Input;

/// The structured code a panicking handler is reported with (E5).
pub const HANDLER_PANICKED: &str = "HANDLER_PANICKED";
/// The structured code for a `q:task` name no handler is registered under.
pub const HANDLER_MISSING: &str = "HANDLER_MISSING";

/// What a handler sees of the task it runs.
#[derive(Debug, Clone, Copy)]
pub struct TaskContext<'a> {
    pub instance_id: &'a str,
    /// The BPMN id of the task node.
    pub node: &'a str,
    /// The `q:task` name the handler is registered under.
    pub handler: &'a str,
    /// The attempt this call is, 1-based.
    pub attempt: u32,
    /// The task's input mappings evaluated over the instance variables (all instance
    /// variables when the task has no input mappings).
    pub inputs: &'a Variables,
}

impl TaskContext<'_> {
    /// A key naming this attempt, for counterparts that deduplicate: the same for a
    /// re-adopted attempt (a crash re-runs it), different for every retry (a retry is a
    /// genuinely new request). Derived, not stored: `<instance>/<node>/<attempt>`.
    pub fn idempotency_key(&self) -> String {
        format!("{}/{}/{}", self.instance_id, self.node, self.attempt)
    }
}

/// What a handler returns. A failure or a BPMN error is an outcome, not a Rust error:
/// the core decides between retry park, boundary and FAILED.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskOutcome {
    /// The task's result; output mappings see it as `result`.
    Ok(Variables),
    /// A technical failure with a structured code; spends retry budget.
    Fail { code: String, message: String },
    /// A modelled business error; routes to an error boundary and never spends budget.
    BpmnError { code: String, message: String },
}

/// The host's code for one `q:task` name. Synchronous on purpose: the shell decides
/// where it runs and for how long.
pub trait TaskHandler: Send + Sync {
    fn call(&self, ctx: &TaskContext<'_>) -> TaskOutcome;
}

impl<F> TaskHandler for F
where
    F: Fn(&TaskContext<'_>) -> TaskOutcome + Send + Sync,
{
    fn call(&self, ctx: &TaskContext<'_>) -> TaskOutcome {
        self(ctx)
    }
}

/// Runs `handler` and turns whatever it does — including a panic — into the input the
/// core expects back for this attempt.
pub fn run_handler(handler: &dyn TaskHandler, ctx: &TaskContext<'_>) -> Input {
    let node = ctx.node.to_owned();
    let attempt = ctx.attempt;
    match catch_unwind(AssertUnwindSafe(|| handler.call(ctx))) {
        Ok(TaskOutcome::Ok(outputs)) => Input::TaskCompleted {
            node,
            attempt,
            outputs,
        },
        Ok(TaskOutcome::Fail { code, message }) => Input::TaskFailed {
            node,
            attempt,
            code,
            message,
        },
        Ok(TaskOutcome::BpmnError { code, message }) => Input::TaskBpmnError {
            node,
            attempt,
            code,
            message,
        },
        Err(payload) => Input::TaskFailed {
            node,
            attempt,
            code: HANDLER_PANICKED.to_owned(),
            message: panic_message(payload.as_ref()),
        },
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        format!("handler panicked: {s}")
    } else if let Some(s) = payload.downcast_ref::<String>() {
        format!("handler panicked: {s}")
    } else {
        "handler panicked".to_owned()
    }
}

/// Handlers by `q:task` name. Name-ordered so that listing it is deterministic.
#[derive(Clone, Default)]
pub struct Handlers {
    by_name: BTreeMap<String, Arc<dyn TaskHandler>>,
}

impl Handlers {
    pub fn new() -> Handlers {
        Handlers::default()
    }

    /// Registers `handler` under `name`, replacing any earlier one.
    pub fn register(&mut self, name: impl Into<String>, handler: Arc<dyn TaskHandler>) {
        self.by_name.insert(name.into(), handler);
    }

    /// Builder form of [`Handlers::register`].
    pub fn with(mut self, name: impl Into<String>, handler: impl TaskHandler + 'static) -> Self {
        self.register(name, Arc::new(handler));
        self
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn TaskHandler>> {
        self.by_name.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    /// Runs the handler registered for `ctx.handler`; a missing registration is a
    /// failed attempt with code [`HANDLER_MISSING`], not a crash.
    pub fn run(&self, ctx: &TaskContext<'_>) -> Input {
        match self.get(ctx.handler) {
            Some(h) => run_handler(h.as_ref(), ctx),
            None => Input::TaskFailed {
                node: ctx.node.to_owned(),
                attempt: ctx.attempt,
                code: HANDLER_MISSING.to_owned(),
                message: format!("no handler is registered for q:task `{}`", ctx.handler),
            },
        }
    }
}

impl std::fmt::Debug for Handlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.by_name.keys()).finish()
    }
}
