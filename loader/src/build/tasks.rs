//! Activities: task kinds (registered, channel, pull, user, send, receive,
//! pass-through) with the retry and timeout that apply to them, sub-processes and call
//! activities.

use crate::expr::Expression;
use crate::model::*;
use crate::xml::{Element, Ns};

use super::extensions::Extensions;
use super::ProcessBuilder;

impl<'a, 'd> ProcessBuilder<'a, 'd> {
    pub(super) fn task(&mut self, el: &'a Element, idx: NodeIdx) -> Option<NodeKind> {
        let mut ext = Extensions::read(self, el);
        let mut kind = match el.local.as_str() {
            "serviceTask" => self.service_kind(el, &mut ext)?,
            "scriptTask" => self.script_kind(el, &mut ext)?,
            "businessRuleTask" => self.business_rule_kind(el, &mut ext)?,
            "sendTask" if vendor_worker(el, &ext) => self.worker_send_kind(el, &mut ext)?,
            "endEvent" | "intermediateThrowEvent" => self.worker_message_event(el, &mut ext)?,
            other => {
                for a in ["task", "channel", "topic"] {
                    if let Some(attr) = el.attr_ns(Ns::Q, a) {
                        self.help(
                            "Q307",
                            attr.pos,
                            format!("q:{a} is only allowed on a serviceTask, not on <{other}>"),
                            "change the element to a serviceTask, or remove the attribute",
                        );
                    }
                }
                self.vendor_runner_on_non_service(el, &ext);
                match other {
                    "userTask" => TaskKind::User {
                        assignment: Box::new(self.assignment(el)),
                    },
                    // A send task that names neither its message nor a worker: Camunda 7
                    // refuses it ("one of the attributes class, delegateExpression, type,
                    // or expression is mandatory on sendTask"), Zeebe too (it needs a
                    // job type), and qflow would have nothing to send.
                    "sendTask" if el.attr("messageRef").is_none() => {
                        self.help(
                            "Q114",
                            el.pos,
                            "the sendTask says neither which message it sends nor who sends it",
                            "name the message (messageRef=\"…\"; qflow publishes it through its outbox) or a worker that sends it (<zeebe:taskDefinition type=\"…\"/> or camunda:type=\"external\" camunda:topic=\"…\")",
                        );
                        return None;
                    }
                    "sendTask" => TaskKind::Send {
                        message: Some(self.message_ref(el)?),
                    },
                    "receiveTask" => TaskKind::Receive {
                        message: match el.attr("messageRef") {
                            Some(_) => Some(self.message_ref(el)?),
                            None => None,
                        },
                    },
                    "callActivity" => self.call_kind(el)?,
                    _ => TaskKind::PassThrough,
                }
            }
        };
        if let (Some((_, _, pos)), false) = (&ext.script, matches!(kind, TaskKind::Script { .. })) {
            self.help(
                "Q307",
                *pos,
                format!(
                    "a script is only allowed on a scriptTask, not on <{}>",
                    el.local
                ),
                "move the script to a scriptTask",
            );
        }
        if !ext.call_ins.is_empty() || !ext.call_outs.is_empty() {
            match &mut kind {
                TaskKind::Call(spec) => self.call_variables(spec, &mut ext),
                _ => {
                    let pos = ext
                        .call_ins
                        .iter()
                        .chain(&ext.call_outs)
                        .find_map(|v| v.pos())
                        .unwrap_or(el.pos);
                    self.help(
                        "Q401",
                        pos,
                        format!("camunda:in / camunda:out on a <{}> is not supported", el.local),
                        "they map a call activity's variables; map a task's with camunda:inputOutput",
                    );
                }
            }
        }
        let headers = self.task_headers(el, &kind, &mut ext);
        let retry = ext.retry.and_then(|(policy, pos)| {
            let allowed = match &kind {
                TaskKind::Registered { .. } | TaskKind::Channel { .. } | TaskKind::Call(_) => true,
                // A Java binding may be routed to a handler (`[delegates]`), where the
                // policy applies; while it runs as a pull task the worker's own retries
                // count, and the policy is inert (`qflow_core` retries registered tasks
                // only): a warning says so.
                TaskKind::Pull { .. } if ext.delegate.is_some() => {
                    self.diags.push(
                        crate::diag::Diagnostic::warning(
                            "Q906",
                            pos,
                            "q:retry on a Java-bound task applies only when [delegates] routes the binding to a handler; as a pull task the worker's retries count",
                        )
                        .with_help("keep it for the routed handler, or remove it"),
                    );
                    true
                }
                TaskKind::Pull { .. } => {
                    self.help(
                        "Q304",
                        pos,
                        "q:retry on a pull task is refused: the pull surface has its own retry budget and the two never overlap",
                        "remove q:retry; workers report failures with their own retries count",
                    );
                    false
                }
                other => {
                    self.help(
                        "Q307",
                        pos,
                        format!("q:retry is not supported on a {} task", kind_name(other)),
                        "q:retry applies to serviceTasks with q:task or q:channel, and to call activities",
                    );
                    false
                }
            };
            allowed.then(|| {
                self.meta.retry_pos.insert(idx, pos);
                self.meta.non_retryable.insert(idx, ext.codes.clone());
                policy
            })
        });
        let timeout = ext.timeout.and_then(|(d, pos)| match &kind {
            TaskKind::Registered { .. } | TaskKind::Channel { .. } | TaskKind::Call(_) => Some(d),
            TaskKind::Pull { .. } if ext.delegate.is_some() => {
                self.diags.push(
                    crate::diag::Diagnostic::warning(
                        "Q906",
                        pos,
                        "q:timeout on a Java-bound task applies only when [delegates] routes the binding to a handler; as a pull task the worker's lock bounds it",
                    )
                    .with_help("keep it for the routed handler, or remove it"),
                );
                Some(d)
            }
            other => {
                self.help(
                    "Q307",
                    pos,
                    format!("q:timeout is not supported on a {} task", kind_name(other)),
                    "use a timer boundary event to bound the wait",
                );
                None
            }
        });
        let respond = ext.respond.is_some_and(|pos| match &kind {
            TaskKind::PassThrough | TaskKind::Send { .. } | TaskKind::Script { .. } => {
                self.help(
                    "Q311",
                    pos,
                    format!(
                        "q:respond on a {} task: no token waits there, so a caller would \
                         never be answered at it",
                        kind_name(&kind)
                    ),
                    "mark the next task a token waits at (a service, user or receive task)",
                );
                false
            }
            _ => true,
        });
        if let (TaskKind::Call(_), Some(io)) = (&kind, &ext.vendor_io) {
            if io.style == MappingStyle::Camunda {
                // Camunda 7 passes a called instance only what `camunda:in` names; its
                // input parameters are locals the child never sees. Not one to one.
                self.help(
                    "Q401",
                    io.pos,
                    "camunda:inputOutput on a call activity is not supported",
                    "map the child's variables with q:input and q:output",
                );
                ext.vendor_io = None;
            }
        }
        match (&ext.delegate, ext.field_pos) {
            (Some(_), _) => {
                let fields = std::mem::take(&mut ext.fields);
                self.add_fields(&mut ext.vendor_io, fields, ext.q_mapping);
            }
            (None, Some(pos)) => self.help(
                "Q401",
                pos,
                "camunda:field is not supported here: a field injects a value into a Java delegate, and this task is not bound to one",
                "map the value with camunda:inputParameter (or q:input)",
            ),
            (None, None) => {}
        }
        let (inputs, outputs, mapping_style) = self.task_mappings(
            (ext.inputs, ext.outputs),
            ext.vendor_io.take(),
            ext.q_mapping,
        );
        Some(NodeKind::Task(Task {
            kind,
            retry,
            timeout,
            inputs,
            outputs,
            respond,
            mapping_style,
            headers,
            delegate: ext.delegate,
        }))
    }

    /// The headers a pull task's worker is given: the Java binding and Camunda's
    /// `resultVariable`, then `zeebe:taskHeaders` and `camunda:properties` as written,
    /// each key once (Q308 on a second). On any other kind
    /// `zeebe:taskHeaders` has no reader and is ignored with a warning, as before.
    fn task_headers(
        &mut self,
        el: &Element,
        kind: &TaskKind,
        ext: &mut Extensions,
    ) -> Vec<(String, String)> {
        if !matches!(kind, TaskKind::Pull { .. }) {
            if let Some(pos) = ext.task_headers_pos {
                self.diags.push(crate::diag::Diagnostic::warning(
                    "Q902",
                    pos,
                    "zeebe:taskHeaders is ignored",
                ));
            }
            return Vec::new();
        }
        let mut all = Vec::new();
        if let Some(d) = &ext.delegate {
            let (k, v) = d.header();
            all.push((k, v, d.pos));
            if let Some(a) = el.attr_ns(Ns::Camunda, "resultVariable") {
                all.push((
                    "resultVariable".to_owned(),
                    a.value.trim().to_owned(),
                    a.pos,
                ));
            }
        }
        for (key, value, pos) in std::mem::take(&mut ext.headers) {
            if key.is_empty() {
                self.diags.push(crate::diag::Diagnostic::warning(
                    "Q902",
                    pos,
                    "a camunda:property without a name is ignored",
                ));
                continue;
            }
            all.push((key, value, pos));
        }
        // A key given again: the last one is kept, as Camunda 7 builds its extension
        // properties into a map — except the binding and resultVariable (first in the
        // list), which describe the task and stay.
        let fixed = if ext.delegate.is_some() {
            1 + usize::from(el.attr_ns(Ns::Camunda, "resultVariable").is_some())
        } else {
            0
        };
        let mut headers: Vec<(String, String)> = Vec::with_capacity(all.len());
        // Key → place in `headers`: found by name, not by a scan per header.
        let mut at: std::collections::BTreeMap<String, usize> = Default::default();
        for (key, value, pos) in all {
            if let Some(&i) = at.get(&key) {
                let kept = if i < fixed {
                    "the Java binding's is kept"
                } else {
                    "the last one is kept"
                };
                self.diags.push(
                    crate::diag::Diagnostic::warning(
                        "Q902",
                        pos,
                        format!("the task header `{key}` is given again: {kept}"),
                    )
                    .with_help("give each header key once (the Java binding and resultVariable are headers too)"),
                );
                if i >= fixed {
                    headers[i].1 = value;
                }
                continue;
            }
            at.insert(key.clone(), headers.len());
            headers.push((key, value));
        }
        headers
    }

    /// A script task runs when its script is CEL (`q:script`, or `zeebe:script` in the
    /// FEEL subset); a script in any other language (`scriptFormat` with a `<script>` body
    /// or `camunda:resource`) is foreign code and refused.
    fn script_kind(&mut self, el: &'a Element, ext: &mut Extensions) -> Option<TaskKind> {
        let format = el.attr("scriptFormat").map(|a| a.value.trim());
        let body = el.child(Ns::Bpmn, "script");
        let resource = el.attr_ns(Ns::Camunda, "resource");
        if format.is_some() || body.is_some() || resource.is_some() {
            let what = format.map_or_else(|| "a script".to_owned(), |f| format!("a `{f}` script"));
            let at = body.map_or(el.pos, |b| b.pos);
            self.help(
                "Q103",
                at,
                format!("<scriptTask> with {what}: qflow runs no foreign code"),
                "write the script as a CEL expression: <extensionElements><q:script expression=\"…\" resultVariable=\"…\"/></extensionElements>, and remove scriptFormat and <script>; or make it a serviceTask with q:task",
            );
            return None;
        }
        match ext.script.take() {
            Some((expression, result, _)) => Some(TaskKind::Script { expression, result }),
            // Camunda 8 also runs a script task as a job (`zeebe:taskDefinition`): a pull
            // task, as on a service task.
            None if ext.zeebe_job.is_some() => ext.zeebe_job.take().map(|(kind, _)| kind),
            None => {
                if !ext.script_attempted && !ext.zeebe_attempted {
                    self.help(
                        "Q102",
                        el.pos,
                        "<scriptTask> has no script",
                        "add <extensionElements><q:script expression=\"<CEL>\" resultVariable=\"<variable>\"/></extensionElements>",
                    );
                }
                None
            }
        }
    }

    fn service_kind(&mut self, el: &'a Element, ext: &mut Extensions) -> Option<TaskKind> {
        let mut found: Vec<(TaskKind, Pos, &str)> = Vec::new();
        // Whether the author named a way to run at all (even a malformed one): if so,
        // that error is the one to show, not "does not say how it runs".
        let attempted = ["task", "channel", "topic"]
            .iter()
            .any(|a| el.attr_ns(Ns::Q, a).is_some())
            || el.attr_ns(Ns::Camunda, "type").is_some()
            || ext.zeebe_attempted;
        for (a, what) in [
            ("task", "q:task"),
            ("channel", "q:channel"),
            ("topic", "q:topic"),
        ] {
            if let Some(attr) = el.attr_ns(Ns::Q, a) {
                let v = attr.value.trim();
                if v.is_empty() {
                    self.help(
                        "Q102",
                        attr.pos,
                        format!("{what} is empty"),
                        "give the task a name",
                    );
                    continue;
                }
                let name = v.to_string();
                let kind = match a {
                    "task" => TaskKind::Registered { name },
                    "channel" => TaskKind::Channel { name },
                    _ => TaskKind::Pull {
                        topic: name,
                        retries: None,
                    },
                };
                found.push((kind, attr.pos, what));
            }
        }
        let cam_type = el.attr_ns(Ns::Camunda, "type");
        match cam_type.map(|a| a.value.trim()) {
            Some("external") => match el.attr_ns(Ns::Camunda, "topic") {
                Some(t) if !t.value.trim().is_empty() => found.push((
                    TaskKind::Pull {
                        topic: t.value.trim().to_string(),
                        retries: None,
                    },
                    t.pos,
                    "camunda:topic",
                )),
                _ => self.help(
                    "Q102",
                    el.pos,
                    "a camunda:type=\"external\" task has no camunda:topic",
                    "add camunda:topic=\"…\"",
                ),
            },
            Some(other) => self.help(
                "Q401",
                cam_type.map_or(el.pos, |a| a.pos),
                format!("camunda:type=\"{other}\" is not supported"),
                "use q:task, q:channel or q:topic",
            ),
            None => {}
        }
        if let Some((kind, pos)) = ext.zeebe_job.clone() {
            found.push((kind, pos, "zeebe:taskDefinition"));
        }
        if let Some(java) = self.settle_dialects(el, &mut found) {
            return self.delegate_kind(el, java.0, java.1, ext);
        }
        match found.len() {
            1 => {
                let (kind, pos, what) = found.remove(0);
                if let Some(a) = super::java_binding(el) {
                    self.diags.push(
                        crate::diag::Diagnostic::note(
                            "Q908",
                            a.1.pos,
                            format!(
                                "camunda:{} `{}` is not used: {what} says how the task runs",
                                a.0,
                                a.1.value.trim()
                            ),
                        )
                        .with_help("remove one of the two, so the model says one thing"),
                    );
                }
                if let TaskKind::Pull { topic, .. } = &kind {
                    let n = topic.chars().count();
                    if n > PULL_TOPIC_CHARS_MAX {
                        self.help(
                            "Q401",
                            pos,
                            format!("the {what} is {n} characters long; workers fetch topics of at most {PULL_TOPIC_CHARS_MAX}"),
                            "use a shorter topic",
                        );
                        return None;
                    }
                }
                Some(kind)
            }
            0 if attempted => None,
            0 => {
                match super::java_binding(el) {
                    Some((a, x)) => return self.delegate_kind(el, a, x.pos, ext),
                    None => self.help(
                        "Q114",
                        el.pos,
                        format!("the {} does not say how it runs", el.local),
                        "say it one of three ways: q:task=\"<handler name>\" (a registered handler), q:channel=\"<channel>\" (a request through the outbox), or q:topic=\"<topic>\" (external workers; also camunda:type=\"external\" camunda:topic=\"…\" or <zeebe:taskDefinition type=\"…\"/>)",
                    ),
                }
                None
            }
            _ => {
                let names: Vec<&str> = found.iter().map(|f| f.2).collect();
                let both_engines =
                    names.contains(&"zeebe:taskDefinition") && names.contains(&"camunda:topic");
                self.help(
                    "Q115",
                    found[1].1,
                    format!(
                        "the {} names more than one way to run: {}",
                        el.local,
                        names.join(", ")
                    ),
                    if both_engines {
                        "keep one, or say which engine the file is for on <definitions>: modeler:executionPlatform=\"Camunda Cloud\" (the Zeebe binding runs) or \"Camunda Platform\" (the Camunda 7 one)"
                    } else {
                        "keep exactly one of q:task, q:channel, q:topic"
                    },
                );
                None
            }
        }
    }

    /// A task kept for both engines — a Zeebe `zeebe:taskDefinition` beside a Camunda 7
    /// external task or Java binding, and no `q:` way — runs the binding of the engine
    /// the file was drawn for (`modeler:executionPlatform`, [`super::Platform`]), as that
    /// engine would (each ignores the other's namespace); the other binding is named in
    /// a note (Q908) and dropped from `found`. Returns the Java binding (attribute name
    /// and position) when that is what runs. Without the attribute nothing changes: two
    /// ways are refused (Q115), and a Java binding beside Zeebe's yields to it.
    fn settle_dialects(
        &mut self,
        el: &Element,
        found: &mut Vec<(TaskKind, Pos, &str)>,
    ) -> Option<(&'static str, Pos)> {
        let platform = self.ctx.platform?;
        if found.iter().any(|f| f.2.starts_with("q:")) {
            return None;
        }
        let zeebe = found.iter().position(|f| f.2 == "zeebe:taskDefinition")?;
        let external = found.iter().position(|f| f.2 == "camunda:topic");
        let java = super::java_binding(el).map(|(a, x)| (a, x.pos));
        let topic = |k: &TaskKind| match k {
            TaskKind::Pull { topic, .. } => topic.clone(),
            _ => String::new(),
        };
        let (unused, pos, runs) = match platform {
            super::Platform::Camunda8 => {
                let (kind, pos, _) = found.remove(external?);
                let unused = format!("camunda:topic `{}`", topic(&kind));
                (unused, pos, "zeebe:taskDefinition".to_owned())
            }
            super::Platform::Camunda7 => {
                let runs = match (external, java) {
                    (Some(_), _) => "camunda:topic".to_owned(),
                    (None, Some((a, _))) => format!("camunda:{a}"),
                    (None, None) => return None,
                };
                let (kind, pos, _) = found.remove(zeebe);
                (
                    format!("zeebe:taskDefinition `{}`", topic(&kind)),
                    pos,
                    runs,
                )
            }
        };
        self.diags.push(
            crate::diag::Diagnostic::note(
                "Q908",
                pos,
                format!(
                    "{unused} is not used: the file was drawn for {} ({}), so {runs} says how the {} runs",
                    match platform {
                        super::Platform::Camunda7 => "Camunda 7",
                        super::Platform::Camunda8 => "Camunda 8",
                    },
                    platform.attribute(),
                    el.local
                ),
            )
            .with_help("nothing to do while the file names its engine; remove the unused binding to say one thing"),
        );
        match (platform, external) {
            (super::Platform::Camunda7, None) => java,
            _ => None,
        }
    }

    /// Camunda 7's `camunda:in` / `camunda:out` on a call activity, as `q:` mappings with
    /// Camunda's meaning: the child starts with only what the `in`s name (`variables="all"`:
    /// every variable), and only what the `out`s name comes back (`variables="all"`: every
    /// child variable; no `out`: nothing, as Camunda 7 passes nothing by default). A call
    /// with `out`s and no `in` (Camunda starts the child with nothing, qflow cannot), `all`
    /// beside mapped entries of its kind, and an `out` by `sourceExpression` (evaluated over
    /// the child in Camunda) are refused (Q401), as are these beside other mappings.
    fn call_variables(&mut self, spec: &mut CallSpec, ext: &mut Extensions) {
        use super::extensions::CallVariable;
        let first = ext
            .call_ins
            .iter()
            .chain(&ext.call_outs)
            .find_map(|v| v.pos())
            .unwrap_or_default();
        if ext.q_mapping.is_some() || ext.vendor_io.is_some() {
            self.help(
                "Q401",
                first,
                "camunda:in / camunda:out beside q:input / q:output or a vendor mapping element",
                "keep to one way of mapping the call's variables",
            );
            return;
        }
        if ext
            .call_ins
            .iter()
            .chain(&ext.call_outs)
            .any(|v| matches!(v, CallVariable::Refused))
        {
            return;
        }
        let split = |list: &[CallVariable]| -> (Option<Pos>, Vec<(Mapping, bool, Pos)>) {
            let all = list.iter().find_map(|v| match v {
                CallVariable::All(p) => Some(*p),
                _ => None,
            });
            let mapped = list
                .iter()
                .filter_map(|v| match v {
                    CallVariable::Mapped {
                        target,
                        source,
                        expression,
                        pos,
                    } => Some((
                        Mapping {
                            target: target.clone(),
                            source: source.clone(),
                        },
                        *expression,
                        *pos,
                    )),
                    _ => None,
                })
                .collect();
            (all, mapped)
        };
        let (all_in, ins) = split(&ext.call_ins);
        let (all_out, outs) = split(&ext.call_outs);
        for (all, mapped, kind) in [(all_in, &ins, "in"), (all_out, &outs, "out")] {
            if let (Some(_), Some((_, _, pos))) = (all, mapped.first()) {
                self.help(
                    "Q401",
                    *pos,
                    format!("camunda:{kind} variables=\"all\" beside a mapped camunda:{kind} is not supported"),
                    "pass every variable (variables=\"all\") or only the mapped ones",
                );
                return;
            }
        }
        if all_in.is_none() && ins.is_empty() {
            self.help(
                "Q401",
                first,
                "a call activity with camunda:out and no camunda:in: Camunda 7 starts the child with no variables, which qflow does not",
                "add a camunda:in for what the child needs, or camunda:in variables=\"all\"",
            );
            return;
        }
        if let Some((_, _, pos)) = outs.iter().find(|(_, expression, _)| *expression) {
            self.help(
                "Q401",
                *pos,
                "camunda:out sourceExpression is not supported: Camunda 7 evaluates it over the child's variables",
                "copy the child's variable by name: camunda:out source=\"…\" target=\"…\"",
            );
            return;
        }
        ext.inputs = ins.into_iter().map(|(m, _, _)| m).collect();
        ext.outputs = outs.into_iter().map(|(m, _, _)| m).collect();
        spec.merge_child_variables = all_out.is_some();
    }

    /// A send task with a vendor worker binding (`zeebe:taskDefinition`,
    /// `camunda:type="external"`, a Java binding): both vendors run it exactly as a service
    /// task — the worker does the sending — and use no `messageRef` (Zeebe's send task is a
    /// job worker task; Camunda 7 parses it as service-task-like). So does qflow; a
    /// `messageRef` beside the binding is named in a note. Without a binding a send task
    /// publishes its message through qflow's outbox.
    fn worker_send_kind(&mut self, el: &'a Element, ext: &mut Extensions) -> Option<TaskKind> {
        if let Some(m) = el.attr("messageRef") {
            self.diags.push(
                crate::diag::Diagnostic::note(
                    "Q908",
                    m.pos,
                    format!(
                        "messageRef `{}` is not used: a worker does this send task's work, as Zeebe and Camunda 7 run it",
                        m.value.trim()
                    ),
                )
                .with_help("to have qflow publish the message itself, remove the worker binding"),
            );
        }
        self.service_kind(el, ext)
    }

    /// A message end or intermediate throw event run by a worker
    /// (`super::worker_message_definition`): both vendors run it as a service task — Zeebe
    /// as a job of the event's `zeebe:taskDefinition`, Camunda 7 by the implementation on
    /// its `<messageEventDefinition>` — and publish no message of their own; qflow makes
    /// it the same pull task (a `messageRef` on it is named in a note, Q908). An end
    /// event's token ends once the worker completes it.
    fn worker_message_event(&mut self, el: &'a Element, ext: &mut Extensions) -> Option<TaskKind> {
        let d = super::worker_message_definition(el)?;
        // The vendor's binding says who runs it; a `q:` binding on the event itself
        // would be a second one, and nothing of qflow's belongs there (Q307, as on
        // any other event).
        let mut refused = false;
        for a in el.attrs.iter().filter(|a| a.ns == Ns::Q) {
            refused = true;
            self.help(
                "Q307",
                a.pos,
                format!(
                    "q:{} is not supported on <{}>: a worker runs it by its vendor binding",
                    a.local, el.local
                ),
                "remove it; to run the event's work on a qflow handler, route the binding \
                 (a Camunda 7 Java binding: [delegates] in qflow.toml) or use a serviceTask",
            );
        }
        if refused {
            return None;
        }
        if let Some(m) = d.attr("messageRef") {
            self.diags.push(
                crate::diag::Diagnostic::note(
                    "Q908",
                    m.pos,
                    format!(
                        "messageRef `{}` is not used: a worker does this message event's work, as Zeebe and Camunda 7 run it",
                        m.value.trim()
                    ),
                )
                .with_help("to have qflow publish the message itself, remove the worker binding"),
            );
        }
        // What Camunda 7 reads from the definition beside its implementation (field
        // injections, a result variable, a connector): not read here, so refused rather
        // than dropped.
        if !self.definition_extensions_refused(d) {
            return None;
        }
        // Camunda 7 refuses output parameters on an end event, run by a worker or not.
        if let Some(io) = &ext.vendor_io {
            if el.local == "endEvent" && io.style == MappingStyle::Camunda && !io.outputs.is_empty()
            {
                self.help(
                    "Q401",
                    io.pos,
                    "camunda:outputParameter on an <endEvent> is not supported (Camunda 7 refuses it there too)",
                    "map the worker's result in its own variables, or end after a send task",
                );
                return None;
            }
        }
        // Camunda 7 writes the implementation on the event definition; Zeebe's task
        // definition is in the event's own extensionElements (read into `ext`).
        self.service_kind(d, ext)
    }

    /// Whether `d`, a message event's `<messageEventDefinition>`, carries nothing Camunda 7
    /// would read there beside an implementation — `camunda:resultVariable`, or anything
    /// in its own `extensionElements` (field injections, a connector): each is refused
    /// (Q401) where it is written, and `false` is returned.
    pub(super) fn definition_extensions_refused(&mut self, d: &Element) -> bool {
        let mut clean = true;
        if let Some(a) = d.attr_ns(Ns::Camunda, "resultVariable") {
            self.help(
                "Q401",
                a.pos,
                "camunda:resultVariable on a <messageEventDefinition> is not supported",
                "map the worker's result with the event's camunda:inputOutput, or use a send task",
            );
            clean = false;
        }
        if let Some(x) = d.child(Ns::Bpmn, "extensionElements") {
            for c in x.children.iter().filter(|c| c.ns != Ns::Other) {
                self.help(
                    "Q401",
                    c.pos,
                    format!(
                        "<{}> inside a <messageEventDefinition> is not supported",
                        c.local
                    ),
                    "field injections and connectors belong to a service or send task; use one",
                );
                clean = false;
            }
        }
        clean
    }

    /// A business rule task runs where its rule is somebody else's work: as a job
    /// (`zeebe:taskDefinition`, Camunda 8's way to implement one by a worker), an
    /// external task, a Java binding or a `q:` way to run — then it is a service task in
    /// all but name, as both vendors run it. A DMN decision (`camunda:decisionRef`,
    /// `zeebe:calledDecision`) is refused: qflow evaluates no DMN.
    fn business_rule_kind(&mut self, el: &'a Element, ext: &mut Extensions) -> Option<TaskKind> {
        if let Some(a) = el.attr_ns(Ns::Camunda, "decisionRef") {
            self.help(
                "Q103",
                a.pos,
                "a <businessRuleTask> calling a DMN decision (camunda:decisionRef) is not supported: qflow evaluates no DMN",
                "have a worker evaluate the rule: camunda:type=\"external\" camunda:topic=\"…\" or <zeebe:taskDefinition type=\"…\"/>",
            );
            return None;
        }
        let runs = ["task", "channel", "topic"]
            .iter()
            .any(|a| el.attr_ns(Ns::Q, a).is_some())
            || vendor_worker(el, ext);
        if !runs {
            // `zeebe:calledDecision` is refused where it is read (Q401).
            let decision = el
                .child(Ns::Bpmn, "extensionElements")
                .is_some_and(|x| x.child(Ns::Zeebe, "calledDecision").is_some());
            if !decision {
                self.help(
                    "Q103",
                    el.pos,
                    "the <businessRuleTask> does not say who evaluates its rule",
                    "have a worker evaluate it: <zeebe:taskDefinition type=\"…\"/>, camunda:type=\"external\" camunda:topic=\"…\", or q:topic=\"…\"",
                );
            }
            return None;
        }
        self.service_kind(el, ext)
    }

    /// A service task bound to Java code (`camunda:class`, `camunda:delegateExpression`,
    /// `camunda:expression`): qflow runs no Java, so it is a pull task whose topic is
    /// derived from the binding (`model::delegate_topic`, the rule of Camunda's 7-to-8
    /// converter), with the binding kept on the task for its worker and for routes. A
    /// binding no topic can be derived from is refused (Q114) with the reason.
    fn delegate_kind(
        &mut self,
        el: &Element,
        attr: &str,
        pos: Pos,
        ext: &mut Extensions,
    ) -> Option<TaskKind> {
        let kind = match attr {
            "class" => DelegateKind::Class,
            "delegateExpression" => DelegateKind::DelegateExpression,
            _ => DelegateKind::Expression,
        };
        let text = el
            .attr_ns(Ns::Camunda, attr)
            .map(|a| a.value.trim().to_owned())?;
        let others: Vec<&str> = super::JAVA_BINDINGS
            .into_iter()
            .filter(|a| *a != attr && el.attr_ns(Ns::Camunda, a).is_some())
            .collect();
        if !others.is_empty() {
            self.help(
                "Q115",
                pos,
                format!(
                    "the {} binds camunda:{attr} and camunda:{}",
                    el.local,
                    others.join(", camunda:")
                ),
                "keep one Java binding",
            );
            return None;
        }
        let derived = delegate_topic(kind, &text).and_then(|t| {
            if t.chars().count() > PULL_TOPIC_CHARS_MAX {
                Err(format!(
                    "the topic it gives is {} characters long; workers fetch topics of at most {PULL_TOPIC_CHARS_MAX}",
                    t.chars().count()
                ))
            } else {
                Ok(t)
            }
        });
        match derived {
            Ok(topic) => {
                self.diags.push(
                    crate::diag::Diagnostic::note(
                        "Q950",
                        pos,
                        format!("camunda:{attr} `{text}` runs as pull topic `{topic}`"),
                    )
                    .with_help("serve the topic with an external-task worker, or route the binding in qflow.toml [delegates] (docs/vendor-mappings.md)"),
                );
                match self.delegate_topics.get(&topic) {
                    Some(first) if *first != text => {
                        let message = format!(
                            "camunda:{attr} `{text}` and `{first}` both run as pull topic `{topic}`: one worker serves both"
                        );
                        self.diags.push(
                            crate::diag::Diagnostic::warning("Q907", pos, message).with_help(
                                "route one of them to another topic in qflow.toml [delegates], or tell them apart in the worker by the task's header",
                            ),
                        );
                    }
                    Some(_) => {}
                    None => {
                        self.delegate_topics.insert(topic.clone(), text.clone());
                    }
                }
                ext.delegate = Some(Box::new(Delegate {
                    kind,
                    text,
                    topic: topic.clone(),
                    pos,
                }));
                Some(TaskKind::Pull {
                    topic,
                    retries: None,
                })
            }
            Err(why) => {
                self.help(
                    "Q114",
                    pos,
                    format!("camunda:{attr} names Java code, and no topic can be derived from it: {why}"),
                    "add q:topic=\"<topic>\" for the worker that does this work, or q:task=\"<handler>\"",
                );
                None
            }
        }
    }

    /// An embedded sub-process, or an event sub-process (`triggeredByEvent="true"`):
    /// the same node kind, the latter listed apart so that its start event is read with
    /// its trigger and the graph rules know no flow may touch it.
    pub(super) fn sub_process(&mut self, el: &Element, idx: NodeIdx) -> Option<NodeKind> {
        if el.value("triggeredByEvent").map(str::trim) == Some("true") {
            self.meta.event_subs.insert(idx);
        }
        Some(NodeKind::SubProcess)
    }

    /// An ad-hoc sub-process (`adHocSubProcess`, BPMN 2.0.2 §10.3.4), read as Camunda 8
    /// runs its BPMN implementation (`docs/ad-hoc-sub-processes.md`): `zeebe:adHoc
    /// activeElementsCollection`, the `<completionCondition>` child and
    /// `cancelRemainingInstances` (default `true`). Refused (Q135): as an event
    /// sub-process, `ordering="Sequential"` (Zeebe ignores it and activates the elements
    /// at once; BPMN means one at a time), Zeebe's output collection and element (8.8),
    /// an active elements collection that is not a FEEL expression, and attributes
    /// neither qflow nor Zeebe know on `zeebe:adHoc`.
    pub(super) fn ad_hoc_sub_process(&mut self, el: &'a Element, idx: NodeIdx) -> Option<NodeKind> {
        let mut ok = true;
        if let Some(a) = el
            .attr("triggeredByEvent")
            .filter(|a| a.value.trim() == "true")
        {
            self.help(
                "Q135",
                a.pos,
                "an ad-hoc sub-process cannot be an event sub-process",
                "use a <subProcess triggeredByEvent=\"true\">",
            );
            ok = false;
        }
        if let Some(a) = el.attr("ordering") {
            match a.value.trim() {
                "Parallel" => {}
                "Sequential" => {
                    self.help(
                        "Q135",
                        a.pos,
                        "ordering=\"Sequential\" on an ad-hoc sub-process is not supported: \
                         BPMN runs its elements one at a time, and Zeebe ignores the attribute",
                        "remove it (or write ordering=\"Parallel\"): the activated elements run at once",
                    );
                    ok = false;
                }
                v => {
                    self.help(
                        "Q135",
                        a.pos,
                        format!("ordering `{v}` is neither Parallel nor Sequential"),
                        "remove it, or write ordering=\"Parallel\"",
                    );
                    ok = false;
                }
            }
        }
        let cancel_remaining = match el.attr("cancelRemainingInstances") {
            None => true,
            Some(a) => match a.value.trim() {
                "true" => true,
                "false" => false,
                v => {
                    self.help(
                        "Q135",
                        a.pos,
                        format!("cancelRemainingInstances `{v}` is neither true nor false"),
                        "write cancelRemainingInstances=\"false\" to wait for the active elements, or leave it out",
                    );
                    ok = false;
                    true
                }
            },
        };
        let active_elements = self.ad_hoc_collection(el, &mut ok);
        let completion = match el.child(Ns::Bpmn, "completionCondition") {
            None => None,
            Some(c) if c.text.trim().is_empty() => None,
            Some(c) => {
                let e = self.mi_dialect_expression(
                    c.text.trim(),
                    c.text_pos,
                    "completion condition",
                    false,
                );
                ok &= e.is_some();
                e
            }
        };
        if !ok {
            return None;
        }
        self.ad_hocs.insert(
            idx,
            AdHoc {
                active_elements,
                completion,
                cancel_remaining,
            },
        );
        Some(NodeKind::SubProcess)
    }

    /// `zeebe:adHoc activeElementsCollection="=…"`: a FEEL expression in the subset, or
    /// none (an empty attribute too: Zeebe activates nothing then).
    fn ad_hoc_collection(&mut self, el: &Element, ok: &mut bool) -> Option<Expression> {
        let z = el
            .child(Ns::Bpmn, "extensionElements")
            .and_then(|x| x.child(Ns::Zeebe, "adHoc"))?;
        let mut collection = None;
        for a in &z.attrs {
            match a.local.as_str() {
                "activeElementsCollection" => collection = Some(a),
                "outputCollection" | "outputElement" => {
                    self.help(
                        "Q135",
                        a.pos,
                        format!("zeebe:adHoc {} (Camunda 8.8) is not supported", a.local),
                        "collect the results with output mappings on the inner elements, or remove it",
                    );
                    *ok = false;
                }
                "implementationType" if a.value.trim() == "bpmn" => {}
                other => {
                    self.help(
                        "Q135",
                        a.pos,
                        format!("zeebe:adHoc {other} is not supported"),
                        "remove it; zeebe:adHoc takes activeElementsCollection",
                    );
                    *ok = false;
                }
            }
        }
        let a = collection?;
        let text = a.value.trim();
        if text.is_empty() {
            return None;
        }
        if !text.starts_with('=') {
            self.help(
                "Q135",
                a.pos,
                format!("activeElementsCollection `{text}` is not an expression (it does not start with `=`)"),
                "write it as a FEEL expression giving a list of element ids, e.g. activeElementsCollection=\"=toActivate\"",
            );
            *ok = false;
            return None;
        }
        let e = self.mi_dialect_expression(text, a.pos, "active elements collection", true);
        *ok &= e.is_some();
        e
    }

    /// What Zeebe refuses inside an ad-hoc sub-process (`AdHocSubProcessValidator`): a
    /// start or end event, and no element at all.
    pub(super) fn check_ad_hoc_inside(&mut self, el: &Element, idx: NodeIdx) {
        let id = self.nodes[idx.position()].id.clone();
        let mut elements = 0;
        for c in el.children.iter().filter(|c| c.ns == Ns::Bpmn) {
            match c.local.as_str() {
                "startEvent" | "endEvent" => self.help(
                    "Q135",
                    c.pos,
                    format!("ad-hoc sub-process `{id}` contains a <{}>", c.local),
                    "remove it: an ad-hoc sub-process activates its elements by its active elements collection, and a path ends at an element without outgoing flows",
                ),
                "sequenceFlow" | "association" | "completionCondition" => {}
                l if super::FLOW_NODES.contains(&l) => elements += 1,
                _ => {}
            }
        }
        if elements == 0 {
            self.help(
                "Q135",
                el.pos,
                format!("ad-hoc sub-process `{id}` has no element"),
                "add the activities it may activate",
            );
        }
    }

    /// A call activity: the called process (`calledElement`, or Zeebe's
    /// `zeebe:calledElement processId`) and its binding — the newest live deployment
    /// (`latest`, every vendor's default) or Camunda 7's `calledElementBinding="version"`
    /// with `calledElementVersion`; Zeebe's `propagateAllChildVariables="false"` keeps a
    /// child's variables out unless output mappings take them. What cannot be kept one
    /// to one is refused: a called element chosen by an expression, the `deployment` and
    /// `versionTag` bindings, and `propagateAllParentVariables="false"`
    /// (`docs/call-activities.md`).
    pub(super) fn call_kind(&mut self, el: &'a Element) -> Option<TaskKind> {
        let zeebe = el
            .child(Ns::Bpmn, "extensionElements")
            .and_then(|x| x.child(Ns::Zeebe, "calledElement"));
        let mut merge_child_variables = true;
        if let Some(z) = zeebe {
            for a in &z.attrs {
                let v = a.value.trim();
                if a.local == "propagateAllChildVariables" && v == "false" {
                    merge_child_variables = false;
                    continue;
                }
                let refusal = match a.local.as_str() {
                    "bindingType" if v != "latest" => Some((
                        format!("zeebe:calledElement bindingType=\"{v}\" is not supported"),
                        "leave bindingType out (latest), or pin a version with camunda:calledElementBinding=\"version\"",
                    )),
                    "propagateAllChildVariables" | "propagateAllParentVariables"
                        if v != "true" =>
                    {
                        Some((
                            format!("zeebe:calledElement {}=\"{v}\" is not supported", a.local),
                            "leave it out: the child gets the call activity's inputs and its variables come back through the output mappings",
                        ))
                    }
                    _ => None,
                };
                if let Some((message, help)) = refusal {
                    self.help("Q401", a.pos, message, help);
                    return None;
                }
            }
        }
        let called = el
            .attr("calledElement")
            .or_else(|| zeebe.and_then(|c| c.attr("processId")));
        let process = match called.map(|a| (a, a.value.trim())) {
            Some((a, v)) if v.starts_with('=') || v.starts_with("${") => {
                self.help(
                    "Q401",
                    a.pos,
                    "a called element chosen by an expression is not supported",
                    "name the called process directly",
                );
                return None;
            }
            Some((_, v)) if !v.is_empty() => v.to_string(),
            _ => {
                self.help(
                    "Q117",
                    el.pos,
                    "the callActivity has no calledElement",
                    "add calledElement=\"<process id>\"",
                );
                return None;
            }
        };
        let binding = el.attr_ns(Ns::Camunda, "calledElementBinding");
        let version_attr = el.attr_ns(Ns::Camunda, "calledElementVersion");
        let version = match binding.map(|a| (a, a.value.trim())) {
            None | Some((_, "latest")) => {
                if let Some(a) = version_attr {
                    self.help(
                        "Q117",
                        a.pos,
                        "camunda:calledElementVersion without calledElementBinding=\"version\"",
                        "add camunda:calledElementBinding=\"version\", or remove the version",
                    );
                    return None;
                }
                None
            }
            Some((_, "version")) => {
                match version_attr.map(|a| (a, a.value.trim().parse::<u32>())) {
                    Some((_, Ok(n))) if n >= 1 => Some(n),
                    Some((a, _)) => {
                        self.help(
                            "Q117",
                            a.pos,
                            format!(
                                "camunda:calledElementVersion=\"{}\" is not a version number",
                                a.value
                            ),
                            "write the called process's version, counting its deployments from 1",
                        );
                        return None;
                    }
                    None => {
                        self.help(
                            "Q117",
                            el.pos,
                            "calledElementBinding=\"version\" names no camunda:calledElementVersion",
                            "add camunda:calledElementVersion=\"<n>\"",
                        );
                        return None;
                    }
                }
            }
            Some((a, other)) => {
                self.help(
                    "Q401",
                    a.pos,
                    format!("camunda:calledElementBinding=\"{other}\" is not supported"),
                    "use latest (the default) or version with camunda:calledElementVersion",
                );
                return None;
            }
        };
        Some(TaskKind::Call(Box::new(CallSpec {
            process,
            version,
            merge_child_variables,
        })))
    }
}

/// A task kind as diagnostics name it.
fn kind_name(k: &TaskKind) -> &'static str {
    match k {
        TaskKind::Registered { .. } => "registered (q:task)",
        TaskKind::Channel { .. } => "channel-call (q:channel)",
        TaskKind::Pull { .. } => "pull (q:topic)",
        TaskKind::User { .. } => "user",
        TaskKind::PassThrough => "pass-through",
        TaskKind::Script { .. } => "script",
        TaskKind::Send { .. } => "send",
        TaskKind::Receive { .. } => "receive",
        TaskKind::Call(_) => "call activity",
    }
}

/// Whether `el` names a Camunda 7 or Zeebe way to have its work done by a worker or by
/// Java code (`camunda:type`, `camunda:class`, `camunda:delegateExpression`,
/// `camunda:expression`, `zeebe:taskDefinition`), even a malformed one.
fn vendor_worker(el: &Element, ext: &Extensions) -> bool {
    super::CAMUNDA_WORKER_ATTRS
        .iter()
        .any(|a| el.attr_ns(Ns::Camunda, a).is_some())
        || ext.zeebe_attempted
}
