//! The models a simulation draws from, the scripts of handler outcomes, and the oracle:
//! what end each instance must reach given its script.
//!
//! A script fixes the outcome of every attempt of every task of an instance, so a
//! handler's answer is a function of (instance, node, attempt): a re-adopted attempt
//! answers what the first run answered, and the end an instance must reach follows from
//! the script alone — except where the run legitimately decides (an attempt failed with
//! `READOPTION_LIMIT` after its replicas kept dying; a timer boundary that fired first;
//! the branch of a parallel split that failed first). There the oracle reads the attempt
//! history and checks that it is one the script allows.

use std::collections::BTreeMap;

use qflow_core::handler::{HANDLER_PANICKED, HANDLER_TIMEOUT};
use qflow_core::{codes, AttemptOutcome};
use qflow_store::{AttemptRecord, InstanceRecord, InstanceStatus};

use super::rng::Rng;

/// The code of a retryable scripted failure.
pub const FLAKY: &str = "FLAKY";
/// The code every retrying task lists in `nonRetryableCodes`.
pub const FATAL: &str = "FATAL";
/// The BPMN error the boundary model catches (and the retry model does not).
pub const REJECTED: &str = "REJECTED";
/// The payload of a scripted panic, which the harness's panic hook keeps quiet.
pub const SCRIPTED_PANIC: &str = "fault-sim: scripted panic";
/// The late boundary of the boundary model, in ms after the task is entered.
pub const LATE_MS: i64 = 600_000;

/// One retrying task: three attempts, an uncaught BPMN error fails the instance.
const RETRY: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="defs" targetNamespace="urn:qflow:fault-sim">
  <error id="errFatal" errorCode="FATAL"/>
  <process id="retry" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="a" q:task="a"><extensionElements><q:retry maxAttempts="3" initialInterval="PT1S" backoffMultiplier="2" jitter="none" nonRetryableCodes="FATAL"/></extensionElements></serviceTask>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="a"/>
    <sequenceFlow id="f1" sourceRef="a" targetRef="end"/>
  </process>
</definitions>"#;

/// A retrying task with an error boundary (to `c`), a late timer boundary spanning all
/// its attempts (to `d`), and a timer catch after it.
const BOUNDARY: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="defs" targetNamespace="urn:qflow:fault-sim">
  <error id="errFatal" errorCode="FATAL"/>
  <error id="errRejected" errorCode="REJECTED"/>
  <process id="boundary" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="b" q:task="b"><extensionElements><q:retry maxAttempts="4" initialInterval="PT2S" backoffMultiplier="2" jitter="none" nonRetryableCodes="FATAL"/></extensionElements></serviceTask>
    <boundaryEvent id="onRejected" attachedToRef="b"><errorEventDefinition errorRef="errRejected"/></boundaryEvent>
    <boundaryEvent id="late" attachedToRef="b" cancelActivity="true"><timerEventDefinition><timeDuration>PT10M</timeDuration></timerEventDefinition></boundaryEvent>
    <intermediateCatchEvent id="wait"><timerEventDefinition><timeDuration>PT5S</timeDuration></timerEventDefinition></intermediateCatchEvent>
    <serviceTask id="c" q:task="c"/>
    <serviceTask id="d" q:task="d"/>
    <endEvent id="done"/>
    <endEvent id="rejected"/>
    <endEvent id="tooLate"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="b"/>
    <sequenceFlow id="f1" sourceRef="b" targetRef="wait"/>
    <sequenceFlow id="f2" sourceRef="wait" targetRef="done"/>
    <sequenceFlow id="f3" sourceRef="onRejected" targetRef="c"/>
    <sequenceFlow id="f4" sourceRef="c" targetRef="rejected"/>
    <sequenceFlow id="f5" sourceRef="late" targetRef="d"/>
    <sequenceFlow id="f6" sourceRef="d" targetRef="tooLate"/>
  </process>
</definitions>"#;

/// Two retrying tasks on parallel branches, joined.
const PARALLEL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="defs" targetNamespace="urn:qflow:fault-sim">
  <error id="errFatal" errorCode="FATAL"/>
  <process id="parallel" isExecutable="true">
    <startEvent id="start"/>
    <parallelGateway id="fork"/>
    <serviceTask id="p1" q:task="p1"><extensionElements><q:retry maxAttempts="2" initialInterval="PT1S" jitter="none" nonRetryableCodes="FATAL"/></extensionElements></serviceTask>
    <serviceTask id="p2" q:task="p2"><extensionElements><q:retry maxAttempts="3" initialInterval="PT3S" jitter="none" nonRetryableCodes="FATAL"/></extensionElements></serviceTask>
    <parallelGateway id="join"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="fork"/>
    <sequenceFlow id="f1" sourceRef="fork" targetRef="p1"/>
    <sequenceFlow id="f2" sourceRef="fork" targetRef="p2"/>
    <sequenceFlow id="f3" sourceRef="p1" targetRef="join"/>
    <sequenceFlow id="f4" sourceRef="p2" targetRef="join"/>
    <sequenceFlow id="f5" sourceRef="join" targetRef="end"/>
  </process>
</definitions>"#;

/// Which model an instance runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ModelKind {
    Retry,
    Boundary,
    Parallel,
}

pub const MODELS: [ModelKind; 3] = [ModelKind::Retry, ModelKind::Boundary, ModelKind::Parallel];

/// A task of a model, as the oracle needs it.
#[derive(Debug, Clone, Copy)]
pub struct TaskSpec {
    pub node: &'static str,
    /// 1 for a task without a policy.
    pub max_attempts: u32,
    pub has_policy: bool,
    /// Whether a BPMN error may be scripted here.
    pub bpmn: bool,
}

impl ModelKind {
    pub fn xml(self) -> &'static str {
        match self {
            ModelKind::Retry => RETRY,
            ModelKind::Boundary => BOUNDARY,
            ModelKind::Parallel => PARALLEL,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Retry => "retry",
            ModelKind::Boundary => "boundary",
            ModelKind::Parallel => "parallel",
        }
    }

    pub fn tasks(self) -> &'static [TaskSpec] {
        const fn t(node: &'static str, max: u32, policy: bool, bpmn: bool) -> TaskSpec {
            TaskSpec {
                node,
                max_attempts: max,
                has_policy: policy,
                bpmn,
            }
        }
        const RETRY_TASKS: [TaskSpec; 1] = [t("a", 3, true, true)];
        const BOUNDARY_TASKS: [TaskSpec; 3] = [
            t("b", 4, true, true),
            t("c", 1, false, false),
            t("d", 1, false, false),
        ];
        const PARALLEL_TASKS: [TaskSpec; 2] = [t("p1", 2, true, false), t("p2", 3, true, false)];
        match self {
            ModelKind::Retry => &RETRY_TASKS,
            ModelKind::Boundary => &BOUNDARY_TASKS,
            ModelKind::Parallel => &PARALLEL_TASKS,
        }
    }
}

/// How one scripted attempt ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Ok,
    /// A retryable failure (`FLAKY`).
    Fail,
    /// A failure whose code is non-retryable (`FATAL`).
    Fatal,
    /// A BPMN error `REJECTED`.
    Bpmn,
    Panic,
    /// Never answers: the runtime's handler time limit (on the clock) ends it.
    Hang,
}

/// One attempt's scripted outcome, and how long (on the clock) the handler takes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scripted {
    pub ending: Ending,
    pub delay_ms: u64,
}

impl Scripted {
    pub const OK_AT_ONCE: Scripted = Scripted {
        ending: Ending::Ok,
        delay_ms: 0,
    };

    /// The `(outcome, code)` the attempt-history row of this attempt carries.
    fn row(self) -> (AttemptOutcome, Option<&'static str>) {
        match self.ending {
            Ending::Ok => (AttemptOutcome::Ok, None),
            Ending::Fail => (AttemptOutcome::Failed, Some(FLAKY)),
            Ending::Fatal => (AttemptOutcome::Failed, Some(FATAL)),
            Ending::Bpmn => (AttemptOutcome::BpmnError, Some(REJECTED)),
            Ending::Panic => (AttemptOutcome::Panicked, Some(HANDLER_PANICKED)),
            Ending::Hang => (AttemptOutcome::TimedOut, Some(HANDLER_TIMEOUT)),
        }
    }
}

/// Outcomes by node, one per attempt the task's budget allows.
pub type Script = BTreeMap<&'static str, Vec<Scripted>>;

/// Draws a script for `model`. Durations stay under the handler time limit (30 s), so
/// only `Hang` times out.
pub fn draw_script(model: ModelKind, rng: &mut Rng) -> Script {
    let mut script = Script::new();
    for task in model.tasks() {
        let attempts = (0..task.max_attempts)
            .map(|_| {
                let roll = rng.below(100);
                let ending = match roll {
                    0..=44 => Ending::Ok,
                    45..=69 => Ending::Fail,
                    70..=76 if task.has_policy => Ending::Fatal,
                    77..=83 => Ending::Panic,
                    84..=90 => Ending::Hang,
                    91..=99 if task.bpmn => Ending::Bpmn,
                    _ => Ending::Ok,
                };
                let delay_ms = if rng.chance(300) {
                    *rng.pick(&[10, 500, 3_000, 25_000])
                } else {
                    0
                };
                Scripted { ending, delay_ms }
            })
            .collect();
        script.insert(task.node, attempts);
    }
    script
}

/// How a task ended, as the script (with the history's `READOPTION_LIMIT` rows) says.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TaskEnd {
    Ok,
    Bpmn,
    Failed(String),
}

/// The end of `task` by its script, and how many attempts it takes. An attempt whose row
/// says `READOPTION_LIMIT` failed that way instead of as scripted (the ledger checked the
/// re-adoptions behind it).
fn scripted_end(task: &TaskSpec, script: &[Scripted], rows: &[&AttemptRecord]) -> (TaskEnd, usize) {
    for i in 0..task.max_attempts as usize {
        let readopted = rows
            .get(i)
            .is_some_and(|r| r.code.as_deref() == Some(codes::READOPTION_LIMIT));
        let code = if readopted {
            codes::READOPTION_LIMIT
        } else {
            match script.get(i).copied().unwrap_or(Scripted::OK_AT_ONCE).row() {
                (AttemptOutcome::Ok, _) => return (TaskEnd::Ok, i + 1),
                (AttemptOutcome::BpmnError, _) => return (TaskEnd::Bpmn, i + 1),
                (_, code) => code.unwrap_or_default(),
            }
        };
        let last = i + 1 == task.max_attempts as usize;
        if (task.has_policy && code == FATAL) || last {
            return (TaskEnd::Failed(code.to_owned()), i + 1);
        }
    }
    unreachable!("the loop returns at the last attempt")
}

/// Checks the history rows of one task against its script: attempt numbers dense from 1
/// in commit order, each row the scripted outcome of its attempt, never more attempts
/// than the budget. `whole`: the task ran to its scripted end; otherwise it was cut off
/// (a boundary, a failing sibling) and its rows are a prefix whose last row may say
/// `interrupted`.
fn check_task(
    task: &TaskSpec,
    script: &[Scripted],
    rows: &[&AttemptRecord],
    whole: bool,
) -> Result<TaskEnd, String> {
    let node = task.node;
    if rows.len() > task.max_attempts as usize {
        return Err(format!(
            "`{node}` spent {} attempts of a budget of {}",
            rows.len(),
            task.max_attempts
        ));
    }
    for (i, row) in rows.iter().enumerate() {
        if row.attempt.get() as usize != i + 1 {
            return Err(format!(
                "`{node}`: attempt numbers in commit order are {:?}, not 1..n",
                rows.iter().map(|r| r.attempt.get()).collect::<Vec<_>>()
            ));
        }
    }
    let (end, n) = scripted_end(task, script, rows);
    for (i, row) in rows.iter().enumerate() {
        let got = (row.outcome, row.code.as_deref());
        let want = if row.code.as_deref() == Some(codes::READOPTION_LIMIT) {
            (AttemptOutcome::Failed, Some(codes::READOPTION_LIMIT))
        } else {
            script.get(i).copied().unwrap_or(Scripted::OK_AT_ONCE).row()
        };
        let cut_here = !whole && i + 1 == rows.len() && row.outcome == AttemptOutcome::Interrupted;
        if got != want && !cut_here {
            return Err(format!(
                "`{node}` attempt {}: history says {:?}, the script says {:?}",
                i + 1,
                got,
                want
            ));
        }
    }
    if whole && rows.len() != n {
        return Err(format!(
            "`{node}`: {} attempts in the history, the script ends after {n}",
            rows.len()
        ));
    }
    if !whole && rows.len() > n {
        return Err(format!(
            "`{node}`: {} attempts in the history, the script ends after {n}",
            rows.len()
        ));
    }
    Ok(end)
}

/// The instance's end: a status and, when FAILED, its code.
type End = (InstanceStatus, Option<String>);

fn end_of(task_end: &TaskEnd) -> End {
    match task_end {
        TaskEnd::Ok => (InstanceStatus::Completed, None),
        TaskEnd::Bpmn => (
            InstanceStatus::Failed,
            Some(codes::UNCAUGHT_BPMN_ERROR.to_owned()),
        ),
        TaskEnd::Failed(code) => (InstanceStatus::Failed, Some(code.clone())),
    }
}

/// Checks that `record` (and its history `rows`) is an end `script` allows for `model`.
pub fn check_instance(
    model: ModelKind,
    script: &Script,
    record: &InstanceRecord,
    rows: &[AttemptRecord],
) -> Result<(), String> {
    let by_node =
        |node: &str| -> Vec<&AttemptRecord> { rows.iter().filter(|r| r.node == node).collect() };
    let spec = |node: &str| -> TaskSpec {
        *model
            .tasks()
            .iter()
            .find(|t| t.node == node)
            .expect("a task of the model")
    };
    let script_of = |node: &str| script.get(node).map_or(&[][..], Vec::as_slice);
    let check =
        |node: &str, whole: bool| check_task(&spec(node), script_of(node), &by_node(node), whole);
    let got: End = (record.status, record.failure_code.clone());
    let expected: End = match model {
        ModelKind::Retry => end_of(&check("a", true)?),
        ModelKind::Boundary => {
            let late_rows = by_node("d");
            if !late_rows.is_empty() {
                // The late boundary fired while `b` was still running or parked: its
                // rows are a prefix of its script, and if they reach the script's end the
                // last attempt was the one interrupted.
                check("b", false)?;
                let b_rows = by_node("b");
                let (_, n) = scripted_end(&spec("b"), script_of("b"), &b_rows);
                if b_rows.len() == n
                    && b_rows.last().map(|r| r.outcome) != Some(AttemptOutcome::Interrupted)
                {
                    return Err("`b` ran to its scripted end, yet its late boundary fired".into());
                }
                if !by_node("c").is_empty() {
                    return Err("both the error path and the late path ran".into());
                }
                let entered = record.created_at_ms;
                if late_rows[0].started_at_ms < entered + LATE_MS {
                    return Err(format!(
                        "the late path ran {} ms after the start, before its boundary was due",
                        late_rows[0].started_at_ms - entered
                    ));
                }
                end_of(&check("d", true)?)
            } else {
                match check("b", true)? {
                    TaskEnd::Bpmn => end_of(&check("c", true)?),
                    other => {
                        if !by_node("c").is_empty() {
                            return Err("`c` ran without a BPMN error from `b`".into());
                        }
                        end_of(&other)
                    }
                }
            }
        }
        ModelKind::Parallel => {
            if got.0 == InstanceStatus::Completed {
                match (check("p1", true)?, check("p2", true)?) {
                    (TaskEnd::Ok, TaskEnd::Ok) => (InstanceStatus::Completed, None),
                    (e1, e2) => {
                        return Err(format!(
                            "completed, but the branches' scripts end {e1:?} and {e2:?}"
                        ))
                    }
                }
            } else {
                // The branch that failed ran to its end; the other was cut off.
                let mut reasons = Vec::new();
                let mut found = None;
                for (first, other) in [("p1", "p2"), ("p2", "p1")] {
                    match (check(first, true), check(other, false)) {
                        (Ok(e), Ok(_)) if e != TaskEnd::Ok && end_of(&e) == got => {
                            found = Some(end_of(&e));
                            break;
                        }
                        (a, b) => reasons.push(format!("{first} first: {a:?} / {b:?}")),
                    }
                }
                match found {
                    Some(end) => end,
                    None => {
                        return Err(format!(
                            "FAILED {:?} fits neither branch: {}",
                            got.1,
                            reasons.join("; ")
                        ))
                    }
                }
            }
        }
    };
    if got != expected {
        return Err(format!("ended {got:?}, the script says {expected:?}"));
    }
    Ok(())
}
