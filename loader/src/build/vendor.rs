//! Vendor dialects (L8): Camunda 7 and Zeebe extension elements and attributes, refused
//! where they would change behaviour, ignored (with a warning, or silently for tooling
//! metadata) where they would not; `zeebe:taskDefinition` read as a pull task; the
//! extensions allowed on anything that is not a task. `zeebe:ioMapping` and
//! `camunda:inputOutput` are handed to [`super::io`].

use crate::diag::Diagnostic;
use crate::model::*;
use crate::xml::{Element, Ns};

use super::extensions::Extensions;
use super::ProcessBuilder;

impl<'a, 'd> ProcessBuilder<'a, 'd> {
    /// Vendor ways of running work on a task that is not a serviceTask, a business rule
    /// task or a send task (which run them, `tasks::worker_send_kind`): refused.
    pub(super) fn vendor_runner_on_non_service(&mut self, el: &Element, ext: &Extensions) {
        let mut found: Vec<(String, Pos)> = ["class", "delegateExpression", "expression", "type"]
            .iter()
            .filter_map(|a| {
                el.attr_ns(Ns::Camunda, a)
                    .map(|x| (format!("camunda:{a}"), x.pos))
            })
            .collect();
        if let Some((_, pos)) = &ext.zeebe_job {
            found.push(("zeebe:taskDefinition".to_string(), *pos));
        }
        for (what, pos) in found {
            self.help(
                "Q401",
                pos,
                format!("{what} on <{}> is not supported", el.local),
                "make it a serviceTask with q:task, q:channel or q:topic",
            );
        }
    }
}

pub(super) fn camunda_child(pb: &mut ProcessBuilder<'_, '_>, c: &Element) {
    vendor_child(pb, c, "camunda", CAMUNDA_REFUSED);
}

fn zeebe_child(pb: &mut ProcessBuilder<'_, '_>, c: &Element) {
    vendor_child(pb, c, "zeebe", ZEEBE_REFUSED);
}

/// A vendor extension element: refused with a pointer to the qflow way when it would
/// change behaviour (`refused` lists those with their help), ignored with a warning when
/// it would not, silently dropped when it is pure tooling metadata.
fn vendor_child(
    pb: &mut ProcessBuilder<'_, '_>,
    c: &Element,
    prefix: &str,
    refused: &[(&str, &str)],
) {
    if refuse_vendor_child(pb, c, prefix, refused) {
        return;
    }
    if !VENDOR_SILENT.contains(&c.local.as_str()) {
        pb.diags.push(Diagnostic::warning(
            "Q902",
            c.pos,
            format!("{prefix}:{} is ignored", c.local),
        ));
    }
}

/// Refuses `c` (Q401, with the table's help) when `refused` lists it; says whether it did.
fn refuse_vendor_child(
    pb: &mut ProcessBuilder<'_, '_>,
    c: &Element,
    prefix: &str,
    refused: &[(&str, &str)],
) -> bool {
    let Some((_, help)) = refused.iter().find(|r| r.0 == c.local) else {
        return false;
    };
    pb.help(
        "Q401",
        c.pos,
        format!("{prefix}:{} is not supported", c.local),
        help,
    );
    true
}

/// Extensions on anything that is not a task (events, gateways, sub-processes, flows,
/// the process): `q:` has nothing to say there, and vendor behaviour is refused or
/// ignored exactly as on tasks.
pub(super) fn check_other_extensions(pb: &mut ProcessBuilder<'_, '_>, el: &Element) {
    for a in el.attrs.iter().filter(|a| a.ns == Ns::Q) {
        pb.help(
            "Q307",
            a.pos,
            format!("q:{} is not supported on <{}>", a.local, el.local),
            "q:task, q:channel and q:topic belong on a serviceTask",
        );
    }
    let Some(x) = el.child(Ns::Bpmn, "extensionElements") else {
        return;
    };
    for c in &x.children {
        match c.ns {
            Ns::Q => pb.help(
                "Q307",
                c.pos,
                format!("q:{} is not supported on <{}>", c.local, el.local),
                "q:retry, q:timeout, q:input and q:output belong in a task's extensionElements",
            ),
            Ns::Camunda | Ns::Zeebe if matches!(c.local.as_str(), "inputOutput" | "ioMapping") => {
                pb.event_io(el, c)
            }
            // Read with the conditional event definition (`events::conditional`).
            Ns::Zeebe
                if c.local == "conditionalFilter"
                    && el.child(Ns::Bpmn, "conditionalEventDefinition").is_some() => {}
            // Read with the ad-hoc sub-process (`tasks::ad_hoc_sub_process`).
            Ns::Zeebe if el.local == "adHocSubProcess" && c.local == "adHoc" => {}
            Ns::Zeebe if el.local == "adHocSubProcess" && c.local == "taskDefinition" => pb.help(
                "Q135",
                c.pos,
                "an ad-hoc sub-process run by a job worker (zeebe:taskDefinition, Camunda 8.8) \
                 is not supported",
                "remove zeebe:taskDefinition: qflow runs the BPMN implementation, where \
                 zeebe:adHoc activeElementsCollection and the completionCondition decide",
            ),
            Ns::Camunda => camunda_child(pb, c),
            Ns::Zeebe => zeebe_child(pb, c),
            _ => {}
        }
    }
}

/// Camunda 7 extensions that carry behaviour qflow would silently drop.
const CAMUNDA_REFUSED: &[(&str, &str)] = &[
    (
        "executionListener",
        "listeners run code qflow does not have; remove it",
    ),
    (
        "taskListener",
        "listeners run code qflow does not have; remove it",
    ),
    ("connector", "use q:channel for outbound calls"),
    ("field", "field injection configures Java code; remove it"),
    (
        "in",
        "map a call activity's variables with q:input and q:output (or camunda:inputOutput); remove it",
    ),
    (
        "out",
        "map a call activity's variables with q:input and q:output (or camunda:inputOutput); remove it",
    ),
    ("script", "qflow runs no scripts"),
    (
        "failedJobRetryTimeCycle",
        "use <q:retry> on a task a handler runs; a pull worker reports its own retries",
    ),
    (
        "errorEventDefinition",
        "map errors with BPMN error boundaries",
    ),
];

/// Zeebe extensions that carry behaviour qflow would silently drop.
const ZEEBE_REFUSED: &[(&str, &str)] = &[
    (
        "executionListeners",
        "listeners run code qflow does not have; remove them",
    ),
    (
        "taskListeners",
        "listeners run code qflow does not have; remove them",
    ),
    ("calledDecision", "qflow does not evaluate DMN"),
    (
        "loopCharacteristics",
        "zeebe:loopCharacteristics belongs in the extensionElements of multiInstanceLoopCharacteristics",
    ),
];

/// Vendor extensions with no effect on execution here; ignored without a word.
const VENDOR_SILENT: &[&str] = &[
    "properties",
    "property",
    "formData",
    "formField",
    "formDefinition",
    "userTask",
    "assignmentDefinition",
    "taskSchedule",
    "priorityDefinition",
    "versionTag",
    "calledElement",
    "taskDefinition",
    "potentialStarter",
];

impl Extensions {
    pub(super) fn read_zeebe(&mut self, pb: &mut ProcessBuilder<'_, '_>, c: &Element) {
        if refuse_vendor_child(pb, c, "zeebe", ZEEBE_REFUSED) {
            return;
        }
        if c.local == "script" {
            return self.read_script(pb, c, true);
        }
        if c.local == "taskHeaders" {
            return self.read_task_headers(pb, c);
        }
        if c.local == "ioMapping" {
            let io = pb.read_zeebe_io(c);
            return self.set_vendor_io(pb, io);
        }
        if c.local == "taskDefinition" {
            self.zeebe_attempted = true;
            let topic = c.value("type").map(str::trim).unwrap_or_default();
            if topic.is_empty() || topic.starts_with('=') {
                pb.help(
                    "Q401",
                    c.pos,
                    "zeebe:taskDefinition needs a literal type",
                    "write type=\"<job type>\"",
                );
                return;
            }
            let retries = match c.attr("retries") {
                None => None,
                Some(a) => match a.value.trim().parse::<u32>() {
                    Ok(n) => Some(n),
                    Err(_) => {
                        pb.help(
                            "Q401",
                            a.pos,
                            format!("zeebe retries `{}` is not a whole number", a.value),
                            "write a literal count, e.g. retries=\"3\"",
                        );
                        return;
                    }
                },
            };
            self.zeebe_job = Some((
                TaskKind::Pull {
                    topic: topic.to_string(),
                    retries,
                },
                c.pos,
            ));
        }
    }
}
