//! Registered task handlers: the host's code behind `q:task="name"`.
//!
//! The pure core never calls a handler; it emits [`crate::Effect::RunTask`] and the shell
//! (the runtime, or the simulator) runs the handler and feeds the outcome back as an
//! [`Input`]. [`call_input`] is the one place that turns the end of a handler call into
//! an input — the handler's own outcome, a panic, the shell's time limit, a missing
//! registration — so every shell reports them alike and the failure's kind is typed once.
//! Nothing here reads the clock or does I/O itself.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use qflow_loader::model::Variables;

use crate::{Attempt, FailureKind, Input};

/// The structured code a panicking handler is reported with (E5).
pub const HANDLER_PANICKED: &str = "HANDLER_PANICKED";
/// The structured code for a `q:task` name no handler is registered under.
pub const HANDLER_MISSING: &str = "HANDLER_MISSING";
/// The structured code of an attempt that outran the shell's handler time limit (E5).
pub const HANDLER_TIMEOUT: &str = "HANDLER_TIMEOUT";

/// What a handler sees of the task it runs.
#[derive(Debug, Clone, Copy)]
pub struct TaskContext<'a> {
    pub instance_id: &'a str,
    /// The BPMN id of the task node.
    pub node: &'a str,
    /// The `q:task` name the handler is registered under.
    pub handler: &'a str,
    /// The attempt this call is.
    pub attempt: Attempt,
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

/// How one handler call ended, as the shell saw it: the handler's own outcome, or a way
/// of ending the shell observed around it.
#[derive(Debug, Clone, PartialEq)]
pub enum CallEnded {
    /// The handler returned.
    Returned(TaskOutcome),
    /// The handler panicked; the message is the panic's, when it had one.
    Panicked(Option<String>),
    /// The shell's handler time limit ran out first.
    TimedOut { limit_ms: u64 },
    /// No handler is registered under the task's `q:task` name.
    Missing,
}

/// The one mapping from a handler call's end to the input the core expects back for
/// that attempt (the simulator, the runtime and every host go through it). A failure's
/// kind is typed here, once; the core never reads the code to find it.
pub fn call_input(ctx: &TaskContext<'_>, ended: CallEnded) -> Input {
    let node = ctx.node.to_owned();
    let attempt = ctx.attempt;
    let failed = |kind, code: &str, message| Input::TaskFailed {
        node: node.clone(),
        attempt,
        kind,
        code: code.to_owned(),
        message,
    };
    match ended {
        CallEnded::Returned(TaskOutcome::Ok(outputs)) => Input::TaskCompleted {
            node,
            attempt,
            outputs,
        },
        CallEnded::Returned(TaskOutcome::Fail { code, message }) => Input::TaskFailed {
            node,
            attempt,
            kind: FailureKind::Failed,
            code,
            message,
        },
        CallEnded::Returned(TaskOutcome::BpmnError { code, message }) => Input::TaskBpmnError {
            node,
            attempt,
            code,
            message,
        },
        CallEnded::Panicked(message) => failed(
            FailureKind::Panicked,
            HANDLER_PANICKED,
            match message {
                Some(m) => format!("handler panicked: {m}"),
                None => "handler panicked".to_owned(),
            },
        ),
        CallEnded::TimedOut { limit_ms } => failed(
            FailureKind::TimedOut,
            HANDLER_TIMEOUT,
            format!("handler ran longer than {limit_ms} ms"),
        ),
        CallEnded::Missing => failed(
            FailureKind::Failed,
            HANDLER_MISSING,
            format!("no handler is registered for q:task `{}`", ctx.handler),
        ),
    }
}

/// Runs `handler` and turns whatever it does — including a panic — into the input the
/// core expects back for this attempt.
pub fn run_handler(handler: &dyn TaskHandler, ctx: &TaskContext<'_>) -> Input {
    let ended = match catch_unwind(AssertUnwindSafe(|| handler.call(ctx))) {
        Ok(outcome) => CallEnded::Returned(outcome),
        Err(payload) => CallEnded::Panicked(panic_message(payload.as_ref())),
    };
    call_input(ctx, ended)
}

/// The text of a panic payload, when it is one.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    if let Some(s) = payload.downcast_ref::<&str>() {
        Some((*s).to_owned())
    } else {
        payload.downcast_ref::<String>().cloned()
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
            None => call_input(ctx, CallEnded::Missing),
        }
    }
}

impl std::fmt::Debug for Handlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.by_name.keys()).finish()
    }
}
