//! Model-level tests of the loader: one refused model per rule (code and line:col), a
//! valid model per task kind, the design rules of SPEC L6, vendor dialects (L8) and the
//! classifier (L7).
//!
//! Every test goes through `refused(xml, code)` or `loads(xml)`. In a refused model, the
//! character `¶` marks where the diagnostic must point; the helper removes it before
//! loading and asserts that the model breaks exactly that one rule.

use qflow_loader::model::*;
use qflow_loader::{load_str, Diagnostic, Loaded, Severity};

const MARK: char = '¶';

const HEAD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="urn:qflow:bpmn:1"
    xmlns:camunda="http://camunda.org/schema/1.0/bpmn"
    xmlns:zeebe="http://camunda.org/schema/zeebe/1.0"
    xmlns:bpmndi="http://www.omg.org/spec/BPMN/20100524/DI"
    id="defs">"#;

/// A file with declarations (errors, messages) and one executable process `p`.
fn file(decls: &str, body: &str) -> String {
    format!("{HEAD}\n{decls}\n<process id=\"p\" isExecutable=\"true\">\n{body}\n</process>\n</definitions>\n")
}

fn process(body: &str) -> String {
    file("", body)
}

/// start → `middle` (which must accept flow `f1` in and send `f2` out) → end.
fn around(middle: &str) -> String {
    process(&format!(
        r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
{middle}
<sequenceFlow id="f2" sourceRef="t" targetRef="end"/>
<endEvent id="end"/>"#
    ))
}

/// Where the mark is (1-based line, column in characters), and the text without it.
fn locate(marked: &str) -> (Pos, String) {
    let mut pos = None;
    let (mut line, mut col) = (1u32, 1u32);
    let mut clean = String::with_capacity(marked.len());
    for c in marked.chars() {
        if c == MARK {
            assert!(pos.is_none(), "more than one mark");
            pos = Some(Pos { line, col });
            continue;
        }
        clean.push(c);
        if c == '\n' {
            line += 1;
            col = 1;
        } else {
            col += 1;
        }
    }
    (pos.expect("the model has no ¶ mark"), clean)
}

fn errors(d: &[Diagnostic]) -> Vec<String> {
    d.iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| format!("{} {}", d.code, d.pos))
        .collect()
}

/// Asserts that the model is refused with exactly one error: `code` at the mark.
fn refused(marked: &str, code: &str) -> Diagnostic {
    let (pos, xml) = locate(marked);
    let diags = match load_str(&xml) {
        Ok(_) => panic!("expected {code} at {pos}, but the model loaded:\n{xml}"),
        Err(d) => d,
    };
    assert_eq!(
        errors(&diags),
        vec![format!("{code} {pos}")],
        "all diagnostics: {diags:#?}"
    );
    let d = diags
        .into_iter()
        .find(|d| d.severity == Severity::Error)
        .expect("one error");
    assert!(!d.message.is_empty());
    assert!(
        d.help.is_some(),
        "{code} should say what to change: {}",
        d.message
    );
    d
}

fn loads(xml: &str) -> Loaded {
    match load_str(xml) {
        Ok(l) => l,
        Err(d) => panic!(
            "expected the model to load, got:\n{}",
            d.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

fn only(l: &Loaded) -> &Definition {
    assert_eq!(l.definitions.len(), 1);
    &l.definitions[0]
}

fn task<'a>(d: &'a Definition, id: &str) -> &'a Task {
    match &d
        .process
        .node(d.process.find(id).expect("node exists"))
        .kind
    {
        NodeKind::Task(t) => t,
        other => panic!("{id} is not a task: {other:?}"),
    }
}

// ---------------------------------------------------------------- XML level (Q00x)

#[test]
fn q001_mismatched_end_tag() {
    refused(&around(r#"<task id="t">¶</serviceTask>"#), "Q001");
}

#[test]
fn q001_undeclared_entity() {
    refused(
        &around(
            "<task id=\"t\" name=\"a\"/>\n<textAnnotation><text>¶&nope;</text></textAnnotation>",
        ),
        "Q001",
    );
}

#[test]
fn q002_doctype() {
    refused(
        "<?xml version=\"1.0\"?>\n¶<!DOCTYPE definitions [<!ENTITY x \"y\">]>\n<definitions/>",
        "Q002",
    );
}

#[test]
fn q006_not_bpmn() {
    refused("<?xml version=\"1.0\"?>\n¶<html><body/></html>", "Q006");
}

#[test]
fn q007_no_process() {
    let xml = format!(
        "¶{}\n</definitions>\n",
        &HEAD[HEAD.find("<definitions").unwrap()..]
    );
    refused(&xml, "Q007");
}

// ---------------------------------------------------------------- structure (Q1xx)

#[test]
fn q101_duplicate_id() {
    refused(&around(r#"<task id="t"/><task ¶id="start"/>"#), "Q101");
}

#[test]
fn q102_message_catch_without_message_ref() {
    refused(
        &around(
            r#"<intermediateCatchEvent id="t">¶<messageEventDefinition/></intermediateCatchEvent>"#,
        ),
        "Q102",
    );
}

#[test]
fn q103_script_task_in_a_foreign_language() {
    let d = refused(
        &around(
            r#"<scriptTask id="t" scriptFormat="groovy">¶<script>total = price * qty</script></scriptTask>"#,
        ),
        "Q103",
    );
    assert!(d.message.contains("`groovy` script"), "{}", d.message);
    assert!(d.help.unwrap().contains("q:script"));
    // A CEL script beside a foreign one is still refused: the <script> would be ignored.
    refused(
        &around(
            r#"¶<scriptTask id="t" scriptFormat="javascript"><extensionElements><q:script expression="1" resultVariable="x"/></extensionElements></scriptTask>"#,
        ),
        "Q103",
    );
    refused(
        &around(r#"¶<scriptTask id="t" camunda:resource="deployment://total.groovy"/>"#),
        "Q103",
    );
}

#[test]
fn q102_script_task_without_a_script() {
    refused(&around(r#"¶<scriptTask id="t"/>"#), "Q102");
    refused(
        &around(
            r#"<scriptTask id="t"><extensionElements>¶<q:script expression="1"/></extensionElements></scriptTask>"#,
        ),
        "Q102",
    );
    refused(
        &around(
            r#"<scriptTask id="t"><extensionElements>¶<q:script resultVariable="x"/></extensionElements></scriptTask>"#,
        ),
        "Q102",
    );
}

#[test]
fn script_task_refusals_name_the_field() {
    refused(
        &around(
            r#"<scriptTask id="t"><extensionElements><q:script expression="1" ¶resultVariable="a-b"/></extensionElements></scriptTask>"#,
        ),
        "Q208",
    );
    // A script on anything but a script task.
    refused(
        &around(
            r#"<userTask id="t"><extensionElements>¶<q:script expression="1" resultVariable="x"/></extensionElements></userTask>"#,
        ),
        "Q307",
    );
    // Retries and timeouts mean nothing for a script: it is an evaluation, not an attempt.
    refused(
        &around(
            r#"<scriptTask id="t"><extensionElements><q:script expression="1" resultVariable="x"/>¶<q:retry maxAttempts="3" initialInterval="PT1S"/></extensionElements></scriptTask>"#,
        ),
        "Q307",
    );
    refused(
        &around(
            r#"<scriptTask id="t"><extensionElements><q:script expression="1" resultVariable="x"/>¶<q:script expression="2" resultVariable="y"/></extensionElements></scriptTask>"#,
        ),
        "Q308",
    );
    // Zeebe's script is FEEL: `=` first, in the subset that maps onto CEL.
    refused(
        &around(
            r#"<scriptTask id="t"><extensionElements><zeebe:script ¶expression="total" resultVariable="x"/></extensionElements></scriptTask>"#,
        ),
        "Q203",
    );
}

#[test]
fn script_tasks_load_from_cel_and_from_zeebe_feel() {
    let l = loads(&around(
        r#"<scriptTask id="t"><extensionElements><q:script expression="price * qty" resultVariable="total"/></extensionElements></scriptTask>"#,
    ));
    match &task(only(&l), "t").kind {
        TaskKind::Script { expression, result } => {
            assert_eq!(expression.source(), "price * qty");
            assert_eq!(result, "total");
        }
        other => panic!("not a script task: {other:?}"),
    }
    let l = loads(&around(
        r#"<scriptTask id="t"><extensionElements><zeebe:script expression="=order.total" resultVariable="total"/></extensionElements></scriptTask>"#,
    ));
    assert!(matches!(
        &task(only(&l), "t").kind,
        TaskKind::Script { result, .. } if result == "total"
    ));
    // Camunda 8 can also run a script task as a job: then it is a pull task.
    let l = loads(&around(
        r#"<scriptTask id="t"><extensionElements><zeebe:taskDefinition type="scripts"/></extensionElements></scriptTask>"#,
    ));
    assert!(matches!(
        &task(only(&l), "t").kind,
        TaskKind::Pull { topic, .. } if topic == "scripts"
    ));
}

#[test]
fn q103_standard_loop() {
    refused(
        &around(r#"<userTask id="t">¶<standardLoopCharacteristics/></userTask>"#),
        "Q103",
    );
}

#[test]
fn q131_multi_instance_without_cardinality_or_collection() {
    refused(
        &around(r#"<userTask id="t">¶<multiInstanceLoopCharacteristics/></userTask>"#),
        "Q131",
    );
}

#[test]
fn q103_cancel_catch_event() {
    refused(
        &around(
            r#"<intermediateCatchEvent id="t">¶<cancelEventDefinition/></intermediateCatchEvent>"#,
        ),
        "Q103",
    );
}

#[test]
fn a_conditional_catch_event_loads() {
    let l = loads(&around(
        r#"<intermediateCatchEvent id="t"><conditionalEventDefinition camunda:variableEvents=""><condition>=ready</condition></conditionalEventDefinition></intermediateCatchEvent>"#,
    ));
    let d = only(&l);
    let NodeKind::IntermediateCatch(CatchTrigger::Conditional(c)) =
        &d.process.node(d.process.find("t").expect("t")).kind
    else {
        panic!("not a conditional catch")
    };
    // An empty list of variable events is no filter, as in Camunda 7.
    assert!(c.on_create && c.on_update && c.variables.is_empty());
}

#[test]
fn q103_conditional_start_event() {
    refused(
        &process(
            r#"<startEvent id="start">¶<conditionalEventDefinition/></startEvent>
<sequenceFlow id="f1" sourceRef="start" targetRef="end"/>
<endEvent id="end"/>"#,
        ),
        "Q103",
    );
}

const SIGNAL: &str = r#"<signal id="sig" name="price-changed"/>"#;

#[test]
fn q102_signal_event_without_a_signal_ref() {
    refused(
        &around(
            r#"<intermediateCatchEvent id="t">¶<signalEventDefinition/></intermediateCatchEvent>"#,
        ),
        "Q102",
    );
}

#[test]
fn q127_signal_ref_names_no_signal() {
    let body = r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
<intermediateThrowEvent id="t"><signalEventDefinition ¶signalRef="nope"/></intermediateThrowEvent>
<sequenceFlow id="f2" sourceRef="t" targetRef="end"/>
<endEvent id="end"/>"#;
    let d = refused(&file(SIGNAL, body), "Q127");
    assert!(d.message.contains("`nope`"), "{}", d.message);
}

#[test]
fn signal_events_load_in_every_position() {
    let body = r#"<startEvent id="start"/>
<startEvent id="by_signal"><signalEventDefinition signalRef="sig"/></startEvent>
<sequenceFlow id="f0" sourceRef="by_signal" targetRef="wait"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="throw"/>
<intermediateThrowEvent id="throw"><signalEventDefinition signalRef="sig"/></intermediateThrowEvent>
<sequenceFlow id="f2" sourceRef="throw" targetRef="wait"/>
<intermediateCatchEvent id="wait"><signalEventDefinition signalRef="sig"/></intermediateCatchEvent>
<sequenceFlow id="f3" sourceRef="wait" targetRef="work"/>
<userTask id="work"/>
<boundaryEvent id="stop" attachedToRef="work" cancelActivity="false"><signalEventDefinition signalRef="sig"/></boundaryEvent>
<sequenceFlow id="f4" sourceRef="work" targetRef="end"/>
<sequenceFlow id="f5" sourceRef="stop" targetRef="shout"/>
<endEvent id="shout"><signalEventDefinition signalRef="sig"/></endEvent>
<endEvent id="end"/>"#;
    let loaded = loads(&file(SIGNAL, body));
    let def = &loaded.definitions[0];
    let p = &def.process;
    let kind = |id: &str| &p.node(p.find(id).unwrap()).kind;
    let name = "price-changed".to_owned();
    assert!(
        matches!(kind("by_signal"), NodeKind::TriggeredStart(StartTrigger::Signal { name: n }) if *n == name)
    );
    assert!(
        matches!(kind("throw"), NodeKind::IntermediateThrow(ThrowTrigger::Signal { name: n }) if *n == name)
    );
    assert!(
        matches!(kind("wait"), NodeKind::IntermediateCatch(CatchTrigger::Signal { name: n }) if *n == name)
    );
    assert!(
        matches!(kind("stop"), NodeKind::Boundary(Boundary { interrupting: false, trigger: BoundaryTrigger::Signal { name: n }, .. }) if *n == name)
    );
    assert!(matches!(kind("shout"), NodeKind::EndEvent(EndKind::Signal { name: n }) if *n == name));
    assert!(def.waits_for_signals);
    assert_eq!(p.signal_start("price-changed"), p.find("by_signal"));
    assert_eq!(p.signal_start("other"), None);
}

#[test]
fn a_process_with_only_a_message_start_loads() {
    let body = r#"<startEvent id="start"><messageEventDefinition messageRef="m"/></startEvent>
<sequenceFlow id="f1" sourceRef="start" targetRef="end"/>
<endEvent id="end"/>"#;
    let loaded = loads(&file(r#"<message id="m" name="order-placed"/>"#, body));
    let p = &loaded.definitions[0].process;
    assert_eq!(p.message_start("order-placed"), p.find("start"));
    assert_eq!(p.start_events(None).count(), 0);
    assert!(!loaded.definitions[0].waits_for_signals);
}

#[test]
fn q103_triggered_start_inside_a_sub_process() {
    let body = r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="sub"/>
<subProcess id="sub">
  <startEvent id="s0"/>
  <startEvent id="s1">¶<signalEventDefinition signalRef="sig"/></startEvent>
  <sequenceFlow id="g1" sourceRef="s0" targetRef="e0"/>
  <sequenceFlow id="g2" sourceRef="s1" targetRef="e0"/>
  <endEvent id="e0"/>
</subProcess>
<sequenceFlow id="f2" sourceRef="sub" targetRef="end"/>
<endEvent id="end"/>"#;
    refused(&file(SIGNAL, body), "Q103");
}

#[test]
fn q207_a_timer_start_computed_from_variables() {
    let body = r#"<startEvent id="start">¶<timerEventDefinition><timeDuration>=wait</timeDuration></timerEventDefinition></startEvent>
<sequenceFlow id="f1" sourceRef="start" targetRef="end"/>
<endEvent id="end"/>"#;
    refused(&process(body), "Q207");
}

#[test]
fn q104_flow_to_missing_node() {
    refused(
        &process(
            r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="fork"/>
<parallelGateway id="fork"/>
<sequenceFlow id="f2" sourceRef="fork" targetRef="end"/>
<sequenceFlow id="f3" sourceRef="fork" ¶targetRef="nowhere"/>
<endEvent id="end"/>"#,
        ),
        "Q104",
    );
}

#[test]
fn q105_flow_leaves_its_sub_process() {
    refused(
        &around(
            r#"<subProcess id="t">
  <startEvent id="s2"/>
  <sequenceFlow id="g1" sourceRef="s2" targetRef="t2"/>
  <task id="t2"/>
  <sequenceFlow id="g2" sourceRef="t2" targetRef="e2"/>
  ¶<sequenceFlow id="g3" sourceRef="t2" targetRef="end"/>
  <endEvent id="e2"/>
</subProcess>"#,
        ),
        "Q105",
    );
}

#[test]
fn q106_no_start_event() {
    let xml = format!(
        "{HEAD}\n¶<process id=\"p\" isExecutable=\"true\">\n<task id=\"t\"/>\n<sequenceFlow id=\"f\" sourceRef=\"t\" targetRef=\"end\"/>\n<endEvent id=\"end\"/>\n</process>\n</definitions>\n"
    );
    refused(&xml, "Q106");
}

#[test]
fn q107_unreachable_node() {
    refused(
        &around(
            r#"<task id="t"/>
¶<task id="orphan"/>
<sequenceFlow id="f3" sourceRef="orphan" targetRef="end"/>"#,
        ),
        "Q107",
    );
}

#[test]
fn q108_dead_end() {
    refused(
        &process(
            r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="fork"/>
<parallelGateway id="fork"/>
<sequenceFlow id="f2" sourceRef="fork" targetRef="end"/>
<sequenceFlow id="f3" sourceRef="fork" targetRef="stuck"/>
¶<exclusiveGateway id="stuck"/>
<endEvent id="end"/>"#,
        ),
        "Q108",
    );
}

/// An activity or event without an outgoing flow is an implicit end (BPMN 2.0 §13.2): it
/// loads, with a warning at the node.
#[test]
fn q905_an_activity_or_event_without_a_flow_out_is_an_implicit_end() {
    let (pos, xml) = locate(&process(
        r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="fork"/>
<parallelGateway id="fork"/>
<sequenceFlow id="f2" sourceRef="fork" targetRef="end"/>
<sequenceFlow id="f3" sourceRef="fork" targetRef="last"/>
¶<task id="last"/>
<endEvent id="end"/>"#,
    ));
    let loaded = loads(&xml);
    let warned: Vec<String> = loaded
        .warnings
        .iter()
        .map(|d| format!("{} {}", d.code, d.pos))
        .collect();
    assert_eq!(warned, [format!("Q905 {pos}")]);
    assert!(loaded.warnings[0].message.contains("implicit end"));
}

#[test]
fn q109_default_flow_not_outgoing() {
    refused(
        &process(
            r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="xor"/>
<exclusiveGateway id="xor" ¶default="f1"/>
<sequenceFlow id="f2" sourceRef="xor" targetRef="end"><conditionExpression>x > 1</conditionExpression></sequenceFlow>
<sequenceFlow id="f3" sourceRef="xor" targetRef="end"/>
<endEvent id="end"/>"#,
        ),
        "Q109",
    );
}

#[test]
fn q110_default_flow_on_an_event() {
    refused(
        &process(
            r#"<startEvent id="s"/><sequenceFlow id="f1" sourceRef="s" targetRef="t"/>
<intermediateThrowEvent id="t" ¶default="f2"/>
<sequenceFlow id="f2" sourceRef="t" targetRef="e"/><endEvent id="e"/>"#,
        ),
        "Q110",
    );
}

#[test]
fn a_default_flow_on_an_activity_loads_as_camunda_7_runs_it() {
    let l = loads(&process(
        r#"<startEvent id="s"/><sequenceFlow id="f1" sourceRef="s" targetRef="t"/>
<task id="t" default="f3"/>
<sequenceFlow id="f2" sourceRef="t" targetRef="e"><conditionExpression>x == 1</conditionExpression></sequenceFlow>
<sequenceFlow id="f3" sourceRef="t" targetRef="e2"/>
<endEvent id="e"/><endEvent id="e2"/>"#,
    ));
    let p = &only(&l).process;
    let t = p.find("t").unwrap();
    assert_eq!(p.flow(p.activity_defaults[&t]).id, "f3");
}

#[test]
fn q111_boundary_on_missing_node() {
    refused(
        &around(
            r#"<task id="t"/>
<boundaryEvent id="b" ¶attachedToRef="ghost"><timerEventDefinition><timeDuration>PT1M</timeDuration></timerEventDefinition></boundaryEvent>
<sequenceFlow id="f3" sourceRef="b" targetRef="end"/>"#,
        ),
        "Q111",
    );
}

/// An event that loads as a task inside — a none throw passed through, a message end
/// run by a worker — is still an event: it takes no boundary, as in both vendors.
#[test]
fn q111_boundary_on_an_event_loaded_as_a_task() {
    refused(
        &around(
            r#"<intermediateThrowEvent id="t"/>
<boundaryEvent id="b" ¶attachedToRef="t"><timerEventDefinition><timeDuration>PT1M</timeDuration></timerEventDefinition></boundaryEvent>
<sequenceFlow id="f3" sourceRef="b" targetRef="end"/>"#,
        ),
        "Q111",
    );
}

#[test]
fn q111_boundary_on_a_gateway() {
    refused(
        &process(
            r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="xor"/>
<exclusiveGateway id="xor"/>
<sequenceFlow id="f2" sourceRef="xor" targetRef="end"/>
<boundaryEvent id="b" ¶attachedToRef="xor"><timerEventDefinition><timeDuration>PT1M</timeDuration></timerEventDefinition></boundaryEvent>
<sequenceFlow id="f3" sourceRef="b" targetRef="end"/>
<endEvent id="end"/>"#,
        ),
        "Q111",
    );
}

#[test]
fn q112_error_end_with_unknown_error() {
    refused(
        &process(
            r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="end"/>
<endEvent id="end"><errorEventDefinition ¶errorRef="nope"/></endEvent>"#,
        ),
        "Q112",
    );
}

#[test]
fn q112_error_boundary_with_unknown_error() {
    refused(
        &around(
            r#"<serviceTask id="t" q:task="pay"/>
<boundaryEvent id="b" attachedToRef="t"><errorEventDefinition ¶errorRef="nope"/></boundaryEvent>
<sequenceFlow id="f3" sourceRef="b" targetRef="end"/>"#,
        ),
        "Q112",
    );
}

#[test]
fn q113_unknown_message() {
    refused(
        &around(r#"<receiveTask id="t" ¶messageRef="nope"/>"#),
        "Q113",
    );
}

#[test]
fn q114_service_task_without_kind() {
    let d = refused(&around(r#"¶<serviceTask id="t"/>"#), "Q114");
    assert!(d.help.unwrap().contains("q:task"));
}

#[test]
fn q114_java_binding_no_topic_can_be_derived_from() {
    for binding in [
        r#"camunda:expression="${a ? b : c}""#,
        r#"camunda:expression="${orders[0].charge()}""#,
        r#"camunda:delegateExpression="pay-${kind}""#,
        r#"camunda:delegateExpression="${pay(""#,
        r#"camunda:class="com.acme.""#,
        r#"camunda:class="com acme Pay""#,
    ] {
        let d = refused(
            &around(&format!(r#"<serviceTask id="t" ¶{binding}/>"#)),
            "Q114",
        );
        assert!(
            d.message.contains("no topic can be derived"),
            "{binding}: {}",
            d.message
        );
    }
}

/// The task `t` of a loaded model.
fn task_t(l: &Loaded) -> &Task {
    let p = &only(l).process;
    match &p.node(p.find("t").unwrap()).kind {
        NodeKind::Task(t) => t,
        other => panic!("`t` is {other:?}"),
    }
}

#[test]
fn java_bindings_load_as_pull_tasks_on_the_converters_topic_with_a_note() {
    for (binding, topic, header) in [
        (
            r#"camunda:class="com.acme.ChargeCard""#,
            "chargeCard",
            ("class", "com.acme.ChargeCard"),
        ),
        (
            r#"camunda:class="com.acme.URLFetcher""#,
            "URLFetcher",
            ("class", "com.acme.URLFetcher"),
        ),
        (
            r#"camunda:class="com.acme.Outer$Inner""#,
            "inner",
            ("class", "com.acme.Outer$Inner"),
        ),
        (
            r#"camunda:delegateExpression="${chargeCard}""#,
            "chargeCard",
            ("delegateExpression", "${chargeCard}"),
        ),
        (
            r##"camunda:delegateExpression=" #{archiveService} ""##,
            "archiveService",
            ("delegateExpression", "#{archiveService}"),
        ),
        (
            r#"camunda:expression="${orders.charge(execution, 'a)b')}""#,
            "ordersCharge",
            ("expression", "${orders.charge(execution, 'a)b')}"),
        ),
        (
            r##"camunda:expression="#{environment.services.getSpotPrice}""##,
            "environmentServicesGetSpotPrice",
            ("expression", "#{environment.services.getSpotPrice}"),
        ),
    ] {
        let l = loads(&around(&format!(r#"<serviceTask id="t" {binding}/>"#)));
        let t = task_t(&l);
        assert_eq!(
            t.kind,
            TaskKind::Pull {
                topic: topic.into(),
                retries: None
            },
            "{binding}"
        );
        assert_eq!(
            t.headers,
            [(header.0.to_owned(), header.1.to_owned())],
            "{binding}"
        );
        let d = t.delegate.as_ref().expect("the binding is kept");
        assert_eq!(
            (d.kind.attribute(), d.text.as_str(), d.topic.as_str()),
            (header.0, header.1, topic)
        );
        let notes: Vec<&Diagnostic> = l.warnings.iter().filter(|w| w.code == "Q950").collect();
        assert_eq!(notes.len(), 1, "{binding}: {:?}", l.warnings);
        assert_eq!(notes[0].severity, Severity::Note);
        assert!(
            notes[0].message.contains(&format!("`{topic}`")),
            "{}",
            notes[0].message
        );
    }
}

#[test]
fn a_java_binding_keeps_its_fields_result_variable_and_headers_for_the_worker() {
    let l = loads(&around(
        r#"<serviceTask id="t" camunda:expression="${mailer.send(execution)}" camunda:resultVariable="sent">
  <extensionElements>
    <camunda:inputOutput><camunda:inputParameter name="to">${customer.email}</camunda:inputParameter></camunda:inputOutput>
    <camunda:field name="subject" stringValue="Your order"/>
    <camunda:field name="body"><camunda:expression>${order.summary}</camunda:expression></camunda:field>
    <camunda:field name="sender"><camunda:string> shop@example.com </camunda:string></camunda:field>
    <camunda:properties><camunda:property name="team" value="billing"/></camunda:properties>
  </extensionElements>
</serviceTask>"#,
    ));
    let t = task_t(&l);
    assert_eq!(t.mapping_style, MappingStyle::Camunda);
    let inputs: Vec<(&str, &str)> = t
        .inputs
        .iter()
        .map(|m| (m.target.as_str(), m.source.source()))
        .collect();
    assert_eq!(
        inputs,
        [
            ("to", "customer.email"),
            ("subject", "\"Your order\""),
            ("body", "order.summary"),
            ("sender", "\"shop@example.com\""),
        ]
    );
    assert_eq!(
        t.headers,
        [
            (
                "expression".to_owned(),
                "${mailer.send(execution)}".to_owned()
            ),
            ("resultVariable".to_owned(), "sent".to_owned()),
            ("team".to_owned(), "billing".to_owned()),
        ]
    );
}

#[test]
fn zeebe_task_headers_reach_a_job_worker() {
    let l = loads(&around(
        r#"<serviceTask id="t"><extensionElements>
  <zeebe:taskDefinition type="charge"/>
  <zeebe:taskHeaders><zeebe:header key="method" value="card"/><zeebe:header key="empty"/></zeebe:taskHeaders>
</extensionElements></serviceTask>"#,
    ));
    assert_eq!(
        task_t(&l).headers,
        [
            ("method".to_owned(), "card".to_owned()),
            ("empty".to_owned(), String::new())
        ]
    );
    assert!(
        !l.warnings.iter().any(|w| w.message.contains("taskHeaders")),
        "{:?}",
        l.warnings
    );
}

#[test]
fn delegate_mistakes_are_refused_where_they_are() {
    // Two bindings on one task.
    refused(
        &around(r#"<serviceTask id="t" ¶camunda:class="a.B" camunda:expression="${b.c}"/>"#),
        "Q115",
    );
    // A field on a task no Java binding runs: nothing to inject into.
    refused(
        &around(
            r#"<serviceTask id="t" camunda:type="external" camunda:topic="x"><extensionElements>¶<camunda:field name="a" stringValue="1"/></extensionElements></serviceTask>"#,
        ),
        "Q401",
    );
    // A field with two values, or none.
    refused(
        &around(
            r#"<serviceTask id="t" camunda:class="a.B"><extensionElements><camunda:field name="a" stringValue="1"><camunda:string>¶2</camunda:string></camunda:field></extensionElements></serviceTask>"#,
        ),
        "Q401",
    );
    refused(
        &around(
            r#"<serviceTask id="t" camunda:class="a.B"><extensionElements>¶<camunda:field name="a"/></extensionElements></serviceTask>"#,
        ),
        "Q102",
    );
    // A field that reads an input parameter: Camunda evaluates it over the local.
    let d = refused(
        &around(
            r#"<serviceTask id="t" camunda:class="a.B"><extensionElements>
<camunda:inputOutput><camunda:inputParameter name="amount">${total}</camunda:inputParameter></camunda:inputOutput>
¶<camunda:field name="label" expression="${amount}"/></extensionElements></serviceTask>"#,
        ),
        "Q401",
    );
    assert!(
        d.message.contains("reads the input parameter `amount`"),
        "{}",
        d.message
    );
    // A field beside Zeebe mappings.
    refused(
        &around(
            r#"<serviceTask id="t" camunda:class="a.B"><extensionElements>
<zeebe:ioMapping><zeebe:input source="=total" target="amount"/></zeebe:ioMapping>
¶<camunda:field name="label" stringValue="x"/></extensionElements></serviceTask>"#,
        ),
        "Q401",
    );
    // A header key again: the binding's stays, otherwise the last is kept (Camunda's map),
    // with a warning each.
    let l = loads(&around(
        r#"<serviceTask id="t" camunda:class="a.B"><extensionElements><camunda:properties><camunda:property name="class" value="x"/><camunda:property name="team" value="a"/><camunda:property name="team" value="b"/><camunda:property name="" value="c"/></camunda:properties></extensionElements></serviceTask>"#,
    ));
    assert_eq!(
        task_t(&l).headers,
        [
            ("class".to_owned(), "a.B".to_owned()),
            ("team".to_owned(), "b".to_owned())
        ]
    );
    assert_eq!(
        l.warnings.iter().filter(|w| w.code == "Q902").count(),
        3,
        "{:?}",
        l.warnings
    );
    // A field an output parameter reads: Camunda reads the process variable there.
    refused(
        &around(
            r#"<serviceTask id="t" camunda:class="a.B"><extensionElements>
<camunda:inputOutput><camunda:outputParameter name="shown">${subject}</camunda:outputParameter></camunda:inputOutput>
¶<camunda:field name="subject" stringValue="x"/></extensionElements></serviceTask>"#,
        ),
        "Q401",
    );
    // q:retry on a Java-bound task: kept for a routed handler, with a warning.
    let l = loads(&around(
        r#"<serviceTask id="t" camunda:class="a.B"><extensionElements><q:retry maxAttempts="3" initialInterval="PT1S"/></extensionElements></serviceTask>"#,
    ));
    assert!(task_t(&l).retry.is_some());
    assert!(
        l.warnings.iter().any(|w| w.code == "Q906"),
        "{:?}",
        l.warnings
    );
    // A topic no worker could fetch.
    let long = "x".repeat(300);
    refused(
        &around(&format!(r#"<serviceTask id="t" ¶q:topic="{long}"/>"#)),
        "Q401",
    );
    refused(
        &around(&format!(
            r#"<serviceTask id="t" ¶camunda:delegateExpression="${{{long}}}"/>"#
        )),
        "Q114",
    );
    // A field expression outside the JUEL subset is foreign code.
    refused(
        &around(
            r#"<serviceTask id="t" camunda:class="a.B"><extensionElements><camunda:field name="g"><camunda:expression>¶${bean.gender(x)}</camunda:expression></camunda:field></extensionElements></serviceTask>"#,
        ),
        "Q203",
    );
}

#[test]
fn q102_external_task_without_topic_is_one_error() {
    refused(
        &around(r#"¶<serviceTask id="t" camunda:type="external"/>"#),
        "Q102",
    );
}

#[test]
fn q401_java_class_on_a_user_task() {
    refused(
        &around(r#"<userTask id="t" ¶camunda:class="com.acme.Approve"/>"#),
        "Q401",
    );
}

/// The pull topic of task `id`, or a panic naming what it is instead.
fn pull_topic(l: &Loaded, id: &str) -> String {
    match &task(only(l), id).kind {
        TaskKind::Pull { topic, .. } => topic.clone(),
        other => panic!("{id} is not a pull task: {other:?}"),
    }
}

/// `xml` as a file Camunda Modeler drew for `platform` ("Camunda Cloud", "Camunda Platform").
fn drawn_for(platform: &str, xml: &str) -> String {
    xml.replacen(
        r#"id="defs">"#,
        &format!(
            r#"xmlns:modeler="http://camunda.org/schema/modeler/1.0" modeler:executionPlatform="{platform}" id="defs">"#
        ),
        1,
    )
}

#[test]
fn a_send_task_with_a_vendor_worker_runs_as_that_worker_as_both_vendors_run_it() {
    // Camunda 7's external task: the worker does the sending.
    let l = loads(&around(
        r#"<sendTask id="t" camunda:type="external" camunda:topic="mail"/>"#,
    ));
    assert_eq!(pull_topic(&l, "t"), "mail");
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    // Zeebe's job worker, with a messageRef neither vendor uses: a note names it.
    let l = loads(&file(
        r#"<message id="m" name="Mail"/>"#,
        r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
<sendTask id="t" messageRef="m"><extensionElements><zeebe:taskDefinition type="mail"/></extensionElements></sendTask>
<sequenceFlow id="f2" sourceRef="t" targetRef="end"/>
<endEvent id="end"/>"#,
    ));
    assert_eq!(pull_topic(&l, "t"), "mail");
    assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
    assert_eq!(l.warnings[0].code, "Q908");
    assert!(
        l.warnings[0].message.contains("messageRef `m` is not used"),
        "{}",
        l.warnings[0].message
    );
    // A Java binding: the derived topic, as on a service task.
    let l = loads(&around(
        r#"<sendTask id="t" camunda:class="com.acme.SendMail"/>"#,
    ));
    assert_eq!(pull_topic(&l, "t"), "sendMail");
    // Without a binding the message goes through qflow's outbox, as before.
    let l = loads(&file(
        r#"<message id="m" name="Mail"/>"#,
        r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
<sendTask id="t" messageRef="m"/>
<sequenceFlow id="f2" sourceRef="t" targetRef="end"/>
<endEvent id="end"/>"#,
    ));
    assert!(matches!(
        task(only(&l), "t").kind,
        TaskKind::Send { message: Some(_) }
    ));
}

#[test]
fn a_message_throw_or_end_event_with_a_worker_is_that_worker_s_pull_task() {
    // Zeebe: the job type on the event, no message.
    let l = loads(&process(
        r#"<startEvent id="s"/>
<sequenceFlow id="f1" sourceRef="s" targetRef="t"/>
<intermediateThrowEvent id="t"><extensionElements><zeebe:taskDefinition type="notify"/><zeebe:ioMapping><zeebe:input source="=1" target="x"/></zeebe:ioMapping></extensionElements><messageEventDefinition/></intermediateThrowEvent>
<sequenceFlow id="f2" sourceRef="t" targetRef="e"/>
<endEvent id="e"><extensionElements><zeebe:taskDefinition type="inform"/></extensionElements><messageEventDefinition id="md"/></endEvent>"#,
    ));
    assert_eq!(pull_topic(&l, "t"), "notify");
    assert_eq!(task(only(&l), "t").inputs.len(), 1);
    assert_eq!(pull_topic(&l, "e"), "inform");
    // An end event has no flow out by design: no implicit-end warning.
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    // Camunda 7: the implementation on the event definition; a messageRef is unused.
    let l = loads(&file(
        r#"<message id="m" name="Mail"/>"#,
        r#"<startEvent id="s"/>
<sequenceFlow id="f1" sourceRef="s" targetRef="t"/>
<intermediateThrowEvent id="t"><messageEventDefinition messageRef="m" camunda:type="external" camunda:topic="mail"/></intermediateThrowEvent>
<sequenceFlow id="f2" sourceRef="t" targetRef="e"/>
<endEvent id="e"><messageEventDefinition camunda:class="com.acme.SendReceipt"/></endEvent>"#,
    ));
    assert_eq!(pull_topic(&l, "t"), "mail");
    assert_eq!(pull_topic(&l, "e"), "sendReceipt");
    assert_eq!(
        l.warnings.iter().filter(|w| w.code == "Q908").count(),
        1,
        "{:?}",
        l.warnings
    );
    // Still an end event to the graph rules: a flow out of it is refused.
    refused(
        &process(
            r#"<startEvent id="s"/>
<sequenceFlow id="f1" sourceRef="s" targetRef="e"/>
¶<endEvent id="e"><extensionElements><zeebe:taskDefinition type="inform"/></extensionElements><messageEventDefinition/></endEvent>
<sequenceFlow id="f2" sourceRef="e" targetRef="e2"/>
<endEvent id="e2"/>"#,
        ),
        "Q116",
    );
    // A q: binding beside the vendor's is refused, not ignored.
    let d = refused(
        &process(
            r#"<startEvent id="s"/>
<sequenceFlow id="f1" sourceRef="s" targetRef="e"/>
<endEvent id="e" ¶q:task="inform"><extensionElements><zeebe:taskDefinition type="inform"/></extensionElements><messageEventDefinition/></endEvent>"#,
        ),
        "Q307",
    );
    assert!(d.message.contains("vendor binding"), "{}", d.message);
    // Neither a message nor a worker: it sends nothing, as Camunda 7 runs it (Q909).
    let l = loads(&around(
        r#"<intermediateThrowEvent id="t"><messageEventDefinition/></intermediateThrowEvent>"#,
    ));
    assert!(matches!(task(only(&l), "t").kind, TaskKind::PassThrough));
    assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
    assert_eq!(l.warnings[0].code, "Q909");
    let l = loads(&process(
        r#"<startEvent id="s"/><sequenceFlow id="f1" sourceRef="s" targetRef="e"/>
<endEvent id="e"><messageEventDefinition/></endEvent>"#,
    ));
    let p = &only(&l).process;
    assert!(matches!(
        p.node(p.find("e").unwrap()).kind,
        NodeKind::EndEvent(EndKind::None)
    ));
    assert_eq!(l.warnings[0].code, "Q909");
}

/// What Camunda 7 reads from a message event's definition beside its implementation —
/// field injections, a connector, a result variable — is refused where it is written,
/// never dropped.
#[test]
fn q401_camunda_settings_on_a_message_event_definition() {
    let d = refused(
        &process(
            r#"<startEvent id="s"/><sequenceFlow id="f1" sourceRef="s" targetRef="e"/>
<endEvent id="e"><messageEventDefinition camunda:class="com.acme.Send"><extensionElements>¶<camunda:field name="to" stringValue="a"/></extensionElements></messageEventDefinition></endEvent>"#,
        ),
        "Q401",
    );
    assert!(d.message.contains("<field>"), "{}", d.message);
    refused(
        &around(
            r#"<intermediateThrowEvent id="t"><messageEventDefinition><extensionElements>¶<camunda:connector/></extensionElements></messageEventDefinition></intermediateThrowEvent>"#,
        ),
        "Q401",
    );
    refused(
        &around(
            r#"<intermediateThrowEvent id="t"><messageEventDefinition camunda:type="external" camunda:topic="t" ¶camunda:resultVariable="r"/></intermediateThrowEvent>"#,
        ),
        "Q401",
    );
}

#[test]
fn a_task_kept_for_both_engines_runs_the_binding_of_the_engine_the_file_names() {
    let both = around(
        r#"<serviceTask id="t" camunda:type="external" camunda:topic="emailService"><extensionElements><zeebe:taskDefinition type="email"/></extensionElements></serviceTask>"#,
    );
    let l = loads(&drawn_for("Camunda Cloud", &both));
    assert_eq!(pull_topic(&l, "t"), "email");
    assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
    assert_eq!(l.warnings[0].code, "Q908");
    assert!(
        l.warnings[0]
            .message
            .contains("camunda:topic `emailService` is not used"),
        "{}",
        l.warnings[0].message
    );
    let l = loads(&drawn_for("Camunda Platform", &both));
    assert_eq!(pull_topic(&l, "t"), "emailService");
    assert!(l.warnings[0]
        .message
        .contains("zeebe:taskDefinition `email` is not used"));
    // Camunda 7's Java binding beside Zeebe's job type, in a Camunda 7 file: the binding.
    let java = around(
        r#"<sendTask id="t" camunda:delegateExpression="${mailer}"><extensionElements><zeebe:taskDefinition type="email"/></extensionElements></sendTask>"#,
    );
    let l = loads(&drawn_for("Camunda Platform", &java));
    assert_eq!(pull_topic(&l, "t"), "mailer");
    // A file that does not name its engine is refused: which worker serves it is a guess.
    let d = refused(
        &around(
            r#"<serviceTask id="t" camunda:type="external" camunda:topic="emailService"><extensionElements>¶<zeebe:taskDefinition type="email"/></extensionElements></serviceTask>"#,
        ),
        "Q115",
    );
    assert!(
        d.help
            .as_deref()
            .is_some_and(|h| h.contains("modeler:executionPlatform")),
        "{d:?}"
    );
    // `q:` ways are never settled by the platform.
    refused(
        &drawn_for(
            "Camunda Cloud",
            &around(
                r#"<serviceTask id="t" q:topic="a"><extensionElements>¶<zeebe:taskDefinition type="email"/></extensionElements></serviceTask>"#,
            ),
        ),
        "Q115",
    );
}

#[test]
fn q115_two_task_kinds() {
    refused(
        &around(r#"<serviceTask id="t" q:task="pay" ¶q:topic="pay"/>"#),
        "Q115",
    );
}

#[test]
fn q116_end_event_with_outgoing_flow() {
    refused(
        &process(
            r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="mid"/>
¶<endEvent id="mid"/>
<sequenceFlow id="f2" sourceRef="mid" targetRef="end"/>
<endEvent id="end"/>"#,
        ),
        "Q116",
    );
}

#[test]
fn q117_call_activity_without_called_element() {
    refused(&around(r#"¶<callActivity id="t"/>"#), "Q117");
}

#[test]
fn q118_event_gateway_to_a_task() {
    refused(
        &file(
            r#"<message id="m" name="paid"/>"#,
            r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="eg"/>
<eventBasedGateway id="eg"/>
<sequenceFlow id="f2" sourceRef="eg" targetRef="wait"/>
¶<sequenceFlow id="f3" sourceRef="eg" targetRef="t"/>
<intermediateCatchEvent id="wait"><messageEventDefinition messageRef="m"/></intermediateCatchEvent>
<task id="t"/>
<sequenceFlow id="f4" sourceRef="wait" targetRef="end"/>
<sequenceFlow id="f5" sourceRef="t" targetRef="end"/>
<endEvent id="end"/>"#,
        ),
        "Q118",
    );
}

#[test]
fn q119_condition_after_an_event_not_after_an_activity() {
    refused(
        &process(
            r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
<intermediateThrowEvent id="t"/>
<sequenceFlow id="f2" sourceRef="t" targetRef="end"><conditionExpression>¶ok</conditionExpression></sequenceFlow>
<endEvent id="end"/>"#,
        ),
        "Q119",
    );
    // Out of an activity, a conditional flow is BPMN's (§13.2.1) and Camunda 7 runs it.
    loads(&process(
        r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
<task id="t"/>
<sequenceFlow id="f2" sourceRef="t" targetRef="end"><conditionExpression>ok</conditionExpression></sequenceFlow>
<endEvent id="end"/>"#,
    ));
}

#[test]
fn q120_two_event_definitions() {
    refused(
        &file(
            r#"<message id="m" name="paid"/>"#,
            r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
<intermediateCatchEvent id="t"><messageEventDefinition messageRef="m"/>¶<timerEventDefinition><timeDuration>PT1S</timeDuration></timerEventDefinition></intermediateCatchEvent>
<sequenceFlow id="f2" sourceRef="t" targetRef="end"/>
<endEvent id="end"/>"#,
        ),
        "Q120",
    );
}

// ---------------------------------------------------------------- expressions, timers (Q2xx)

fn gateway_with_condition(cond: &str) -> String {
    process(&format!(
        r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="xor"/>
<exclusiveGateway id="xor" default="f3"/>
<sequenceFlow id="f2" sourceRef="xor" targetRef="end">{cond}</sequenceFlow>
<sequenceFlow id="f3" sourceRef="xor" targetRef="end"/>
<endEvent id="end"/>"#
    ))
}

#[test]
fn q201_cel_syntax_error_points_at_the_character() {
    let d = refused(
        &gateway_with_condition(
            "<conditionExpression>amount &gt; 1 &amp;&amp;¶&amp; x</conditionExpression>",
        ),
        "Q201",
    );
    assert!(d.message.contains("CEL"), "{}", d.message);
}

#[test]
fn q201_bad_mapping_source() {
    refused(
        &around(
            r#"<serviceTask id="t" q:task="pay"><extensionElements><q:input target="amount" source="¶)"/></extensionElements></serviceTask>"#,
        ),
        "Q201",
    );
}

#[test]
fn q209_an_expression_far_over_the_evaluation_budget() {
    let d = refused(
        &gateway_with_condition(
            "<conditionExpression>size(xs.map¶(a, xs.map(b, xs))) &gt; 0</conditionExpression>",
        ),
        "Q209",
    );
    assert!(d.message.contains("evaluation budget"), "{}", d.message);
    refused(
        &around(
            r#"<serviceTask id="t" q:task="pay"><extensionElements><q:output target="x" source="xs.map¶(a, xs.map(b, [xs]))"/></extensionElements></serviceTask>"#,
        ),
        "Q209",
    );
    // A cost linear in a list's length times a value's size loads: fine on small
    // inputs, and the meter bounds it at run time.
    let linear = gateway_with_condition(
        "<conditionExpression>size(xs.map(a, s)) &gt; 0</conditionExpression>",
    );
    load_str(&linear).expect("a linear cost loads");
}

#[test]
fn q202_juel_condition_outside_the_subset() {
    let d = refused(
        &gateway_with_condition(
            "<conditionExpression>¶${execution.getVariable('amount') > 1}</conditionExpression>",
        ),
        "Q202",
    );
    assert!(d.message.contains("JUEL"), "{}", d.message);
    assert!(d.message.contains("function call"), "{}", d.message);
    refused(
        &gateway_with_condition("<conditionExpression>¶${amount + 1 > 2}</conditionExpression>"),
        "Q202",
    );
}

#[test]
fn a_juel_condition_in_the_comparison_subset_is_translated_to_cel() {
    let l = loads(&gateway_with_condition(
        "<conditionExpression>${amount &gt; 1000 &amp;&amp; !blocked}</conditionExpression>",
    ));
    let flows = &l.definitions[0].process.flows;
    let cel: Vec<&str> = flows
        .iter()
        .filter_map(|f| f.condition.as_ref().map(|c| c.source()))
        .collect();
    assert_eq!(cel, vec!["amount > 1000 && !blocked"]);
    // A JUEL condition compiles to CEL; a CEL error points at the condition's start.
    refused(
        &gateway_with_condition("<conditionExpression>¶${a == }</conditionExpression>"),
        "Q202",
    );
}

#[test]
fn q202_javascript_condition() {
    refused(
        &gateway_with_condition(
            r#"<conditionExpression ¶language="javascript">next(null, true)</conditionExpression>"#,
        ),
        "Q202",
    );
}

#[test]
fn q202_condition_inherits_the_files_expression_language() {
    let xml =
        gateway_with_condition("<conditionExpression>¶approved = 'yes'</conditionExpression>")
            .replace(
                r#"id="defs">"#,
                r#"id="defs" expressionLanguage="http://www.w3.org/1999/XPath">"#,
            );
    let d = refused(&xml, "Q202");
    assert!(d.message.contains("expressionLanguage"), "{}", d.message);
}

#[test]
fn feel_as_the_files_expression_language_is_translated() {
    let xml = gateway_with_condition("<conditionExpression>tier = \"gold\"</conditionExpression>")
        .replace(
            r#"id="defs">"#,
            r#"id="defs" expressionLanguage="https://www.omg.org/spec/DMN/20191111/FEEL/">"#,
        );
    let l = loads(&xml);
    let c = only(&l).process.flows[1].condition.clone().unwrap();
    assert_eq!(c.source(), "tier == \"gold\"");
}

#[test]
fn q203_only_one_leading_equals_sign_is_the_feel_marker() {
    refused(
        &gateway_with_condition("<conditionExpression>¶==x</conditionExpression>"),
        "Q203",
    );
}

#[test]
fn q203_feel_beyond_the_subset() {
    refused(
        &gateway_with_condition("<conditionExpression>¶=sum(items) > 0</conditionExpression>"),
        "Q203",
    );
}

/// A Zeebe condition with a list filter, an index and `is defined` loads and decides as
/// FEEL does (the exact semantics are tested in `loader/src/feel.rs`).
#[test]
fn feel_filters_indexes_and_is_defined_load_as_conditions() {
    let xml = gateway_with_condition(
        r#"<conditionExpression>=count(items[type = "x" and item.price > 10]) > 0 and items[-1].price = 3 and not(is defined(order.discount))</conditionExpression>"#,
    );
    let l = loads(&xml);
    let c = only(&l).process.flows[1].condition.clone().unwrap();
    let vars = |json: &str| -> Variables { serde_json::from_str(json).unwrap() };
    let items = r#"[{"type": "x", "price": 12}, {"type": "y", "price": 3}]"#;
    assert_eq!(
        c.eval_bool(&vars(&format!(r#"{{"items": {items}, "order": {{}}}}"#))),
        Ok(true)
    );
    assert_eq!(
        c.eval_bool(&vars(&format!(
            r#"{{"items": {items}, "order": {{"discount": 5}}}}"#
        ))),
        Ok(false)
    );
    // Where FEEL's value is not CEL's (a null discount: the versions disagree), it fails.
    assert!(c
        .eval_bool(&vars(&format!(
            r#"{{"items": {items}, "order": {{"discount": null}}}}"#
        )))
        .is_err());
}

#[test]
fn q203_a_filter_feel_could_read_as_an_index() {
    let d = refused(
        &gateway_with_condition(
            "<conditionExpression>¶=count(items[active]) > 0</conditionExpression>",
        ),
        "Q203",
    );
    assert!(d.message.contains("offset 11"), "{}", d.message);
    for feel in ["=items[0] = 1", "=items[a > 1].price = 1", "=is defined(1)"] {
        refused(
            &gateway_with_condition(&format!(
                "<conditionExpression>¶{feel}</conditionExpression>"
            )),
            "Q203",
        );
    }
}

fn timer_catch(def: &str) -> String {
    around(&format!(
        r#"<intermediateCatchEvent id="t"><timerEventDefinition>{def}</timerEventDefinition></intermediateCatchEvent>"#
    ))
}

#[test]
fn q204_bad_duration() {
    refused(&timer_catch("<timeDuration>¶PT5X</timeDuration>"), "Q204");
}

#[test]
fn q205_bad_date() {
    refused(
        &timer_catch("<timeDate>¶2026-02-30T10:00:00Z</timeDate>"),
        "Q205",
    );
}

#[test]
fn q206_bad_cycle() {
    // Five fields (classic Unix cron): neither vendor reads them.
    let d = refused(&timer_catch("<timeCycle>¶0 0 * * *</timeCycle>"), "Q206");
    assert!(d.message.contains("has 5 fields"), "{}", d.message);
    // A numeric day of the week means other days in Zeebe and Camunda 7.
    let d = refused(
        &timer_catch("<timeCycle>¶0 0 9 * * 1-5</timeCycle>"),
        "Q206",
    );
    assert!(d.message.contains("day names"), "{}", d.message);
    assert!(d.help.as_deref().unwrap_or("").contains("cron"), "{d:?}");
}

#[test]
fn a_cron_time_cycle_loads_as_a_cron_schedule() {
    use qflow_loader::model::TimerDef;
    for (text, instant) in [
        // The order-handling model of camunda-bpm-examples: every 5 seconds.
        ("0/5 0/1 * 1/1 * ?", "1970-01-01T00:00:05Z"),
        ("0 0 9 ? * MON-FRI", "1970-01-01T09:00:00Z"),
        ("@weekly", "1970-01-04T00:00:00Z"),
    ] {
        let loaded = loads(&timer_catch(&format!("<timeCycle>{text}</timeCycle>")));
        let timer = loaded.definitions[0]
            .process
            .nodes
            .iter()
            .find_map(|n| match &n.kind {
                qflow_loader::model::NodeKind::IntermediateCatch(
                    qflow_loader::model::CatchTrigger::Timer(t),
                ) => Some(t.clone()),
                _ => None,
            })
            .expect("the timer catch");
        let TimerDef::Cron(cron) = timer else {
            panic!("{text}: {timer:?}")
        };
        assert_eq!(cron.text(), text);
        let expected = qflow_loader::iso8601::parse_date_time(instant).unwrap();
        assert_eq!(cron.next_after(0), Some(expected), "{text}");
    }
}

#[test]
fn q207_timer_without_value() {
    refused(
        &around(
            r#"<intermediateCatchEvent id="t">¶<timerEventDefinition/></intermediateCatchEvent>"#,
        ),
        "Q207",
    );
}

#[test]
fn q208_mapping_target_not_a_name() {
    refused(
        &around(
            r#"<serviceTask id="t" q:task="pay"><extensionElements><q:output ¶target="a.b" source="result.x"/></extensionElements></serviceTask>"#,
        ),
        "Q208",
    );
}

// ---------------------------------------------------------------- retry and timeout (Q3xx)

fn service(attrs: &str, ext: &str) -> String {
    around(&format!(
        r#"<serviceTask id="t" {attrs}><extensionElements>{ext}</extensionElements></serviceTask>"#
    ))
}

#[test]
fn q301_max_attempts_out_of_range() {
    refused(
        &service(r#"q:task="pay""#, r#"<q:retry ¶maxAttempts="0"/>"#),
        "Q301",
    );
    refused(
        &service(r#"q:task="pay""#, r#"<q:retry ¶maxAttempts="1001"/>"#),
        "Q301",
    );
}

#[test]
fn q301_multiplier_below_one() {
    refused(
        &service(r#"q:task="pay""#, r#"<q:retry ¶backoffMultiplier="0.5"/>"#),
        "Q301",
    );
}

#[test]
fn q301_zero_interval_and_bad_jitter() {
    refused(
        &service(r#"q:task="pay""#, r#"<q:retry ¶initialInterval="PT0S"/>"#),
        "Q301",
    );
    refused(
        &service(r#"q:task="pay""#, r#"<q:retry ¶jitter="half"/>"#),
        "Q301",
    );
}

#[test]
fn q302_initial_above_max() {
    refused(
        &service(
            r#"q:task="pay""#,
            r#"<q:retry ¶initialInterval="PT2M" maxInterval="PT1M"/>"#,
        ),
        "Q302",
    );
}

#[test]
fn non_retryable_code_that_cannot_occur_is_refused() {
    let d = refused(
        &service(
            r#"q:task="pay""#,
            r#"<q:retry ¶nonRetryableCodes="HANDLER_FAILED NO_SUCH_CODE"/>"#,
        ),
        "Q303",
    );
    assert!(d.message.contains("NO_SUCH_CODE"));
}

#[test]
fn an_engine_code_the_task_cannot_produce_is_refused_per_task() {
    for (code, why) in [
        ("TIMEOUT", "no q:timeout"),
        ("POISONED", "channel call"),
        ("LOCK_EXPIRED", "pull task"),
    ] {
        let d = refused(
            &service(
                r#"q:task="pay""#,
                &format!(r#"<q:retry ¶nonRetryableCodes="{code}"/>"#),
            ),
            "Q303",
        );
        assert!(d.message.contains(why), "{code}: {}", d.message);
    }
    // With a q:timeout, TIMEOUT can occur; a handler's codes on a registered task too.
    loads(&service(
        r#"q:task="pay""#,
        r#"<q:retry nonRetryableCodes="TIMEOUT HANDLER_PANICKED"/><q:timeout duration="PT5S"/>"#,
    ));
    let d = refused(
        &service(
            r#"q:channel="pay""#,
            r#"<q:retry ¶nonRetryableCodes="HANDLER_FAILED"/><q:timeout duration="PT5S"/>"#,
        ),
        "Q303",
    );
    assert!(d.message.contains("runs no handler"), "{}", d.message);
    loads(&service(
        r#"q:channel="pay""#,
        r#"<q:retry nonRetryableCodes="POISONED TIMEOUT"/><q:timeout duration="PT5S"/>"#,
    ));
}

#[test]
fn non_retryable_codes_may_name_engine_and_declared_codes() {
    let l = loads(&file(
        r#"<error id="e1" errorCode="CARD_DECLINED"/>"#,
        r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
<serviceTask id="t" q:task="pay"><extensionElements><q:retry nonRetryableCodes="CARD_DECLINED HANDLER_PANICKED"/></extensionElements></serviceTask>
<sequenceFlow id="f2" sourceRef="t" targetRef="end"/>
<endEvent id="end"/>"#,
    ));
    let r = task(only(&l), "t").retry.clone().unwrap();
    assert_eq!(
        r.non_retryable_codes,
        vec!["CARD_DECLINED", "HANDLER_PANICKED"]
    );
}

#[test]
fn retry_on_a_pull_task_is_refused() {
    let d = refused(
        &service(r#"q:topic="invoices""#, r#"¶<q:retry maxAttempts="5"/>"#),
        "Q304",
    );
    assert!(d.message.contains("pull"));
}

#[test]
fn channel_call_without_any_timeout_is_refused() {
    refused(
        &around(r#"¶<serviceTask id="t" q:channel="bank"/>"#),
        "Q305",
    );
}

fn with_routed_timer(task_xml: &str) -> String {
    around(&format!(
        r#"{task_xml}
<boundaryEvent id="late" attachedToRef="t"><timerEventDefinition><timeDuration>PT5M</timeDuration></timerEventDefinition></boundaryEvent>
<sequenceFlow id="f3" sourceRef="late" targetRef="end"/>"#
    ))
}

#[test]
fn channel_call_with_retry_beside_routed_timer_is_refused() {
    let d = refused(
        &with_routed_timer(
            r#"<serviceTask id="t" q:channel="bank"><extensionElements>¶<q:retry maxAttempts="3"/></extensionElements></serviceTask>"#,
        ),
        "Q306",
    );
    assert!(d.message.contains("could never fire"), "{}", d.message);
}

#[test]
fn channel_call_with_retry_and_routeless_timeout_loads() {
    let l = loads(&service(
        r#"q:channel="bank""#,
        r#"<q:retry maxAttempts="3"/><q:timeout duration="PT30S"/>"#,
    ));
    let t = task(only(&l), "t");
    assert_eq!(t.timeout, Some(DurationMs(30_000)));
    assert_eq!(t.retry.as_ref().unwrap().max_attempts.get(), 3);
}

fn with_non_interrupting_timer(task_xml: &str) -> String {
    around(&format!(
        r#"{task_xml}
<boundaryEvent id="remind" attachedToRef="t" cancelActivity="false"><timerEventDefinition><timeDuration>PT5M</timeDuration></timerEventDefinition></boundaryEvent>
<sequenceFlow id="f3" sourceRef="remind" targetRef="end"/>"#
    ))
}

#[test]
fn non_interrupting_timer_is_not_a_channel_timeout() {
    refused(
        &with_non_interrupting_timer(r#"¶<serviceTask id="t" q:channel="bank"/>"#),
        "Q305",
    );
}

#[test]
fn channel_retry_beside_a_non_interrupting_timer_loads() {
    loads(&with_non_interrupting_timer(
        r#"<serviceTask id="t" q:channel="bank"><extensionElements><q:retry/><q:timeout duration="PT30S"/></extensionElements></serviceTask>"#,
    ));
}

#[test]
fn channel_call_with_routed_timer_and_no_retry_loads() {
    loads(&with_routed_timer(
        r#"<serviceTask id="t" q:channel="bank"/>"#,
    ));
}

#[test]
fn registered_task_with_retry_beside_routed_timer_loads() {
    let l = loads(&with_routed_timer(
        r#"<serviceTask id="t" q:task="pay"><extensionElements><q:retry maxAttempts="4"/></extensionElements></serviceTask>"#,
    ));
    let d = only(&l);
    let host = d.process.find("t").unwrap();
    assert_eq!(d.process.boundaries_of(host).count(), 1);
    assert!(task(d, "t").retry.is_some());
}

#[test]
fn q307_retry_on_a_user_task() {
    refused(
        &around(
            r#"<userTask id="t"><extensionElements>¶<q:retry/></extensionElements></userTask>"#,
        ),
        "Q307",
    );
}

#[test]
fn a_call_activity_takes_retries_timeouts_mappings_and_a_version_binding() {
    let l = loads(&around(
        r#"<callActivity id="t" calledElement="child" camunda:calledElementBinding="version" camunda:calledElementVersion="3"><extensionElements><q:retry maxAttempts="3" nonRetryableCodes="CALLED_PROCESS_NOT_FOUND"/><q:timeout duration="PT1M"/><q:input target="x" source="y"/><q:output target="z" source="result.z"/></extensionElements></callActivity>"#,
    ));
    let t = task(only(&l), "t");
    assert_eq!(
        t.kind,
        TaskKind::Call(Box::new(CallSpec {
            process: "child".into(),
            version: Some(3),
            merge_child_variables: true,
        }))
    );
    assert!(t.retry.is_some() && t.timeout.is_some());
    assert_eq!((t.inputs.len(), t.outputs.len()), (1, 1));
    // Zeebe's form: the process id in zeebe:calledElement, the latest binding.
    for (flag, merge_child_variables) in [("true", true), ("false", false)] {
        let l = loads(&around(&format!(
            r#"<callActivity id="t"><extensionElements><zeebe:calledElement processId="child" propagateAllChildVariables="{flag}"/></extensionElements></callActivity>"#,
        )));
        assert_eq!(
            task(only(&l), "t").kind,
            TaskKind::Call(Box::new(CallSpec {
                process: "child".into(),
                version: None,
                merge_child_variables,
            }))
        );
    }
}

#[test]
fn call_activity_bindings_that_do_not_map_are_refused_where_they_are_written() {
    for (attrs, code) in [
        (
            r#"calledElement="c" ¶camunda:calledElementBinding="deployment""#,
            "Q401",
        ),
        (
            r#"calledElement="c" ¶camunda:calledElementVersion="2""#,
            "Q117",
        ),
        (
            r#"calledElement="c" camunda:calledElementBinding="version" ¶camunda:calledElementVersion="two""#,
            "Q117",
        ),
        (
            r#"calledElement="c" camunda:calledElementBinding="version" ¶camunda:calledElementVersion="0""#,
            "Q117",
        ),
        (r#"¶calledElement="${which}""#, "Q401"),
    ] {
        refused(&around(&format!(r#"<callActivity id="t" {attrs}/>"#)), code);
    }
    for zeebe in [
        r#"processId="c" ¶bindingType="deployment""#,
        r#"processId="c" ¶propagateAllParentVariables="false""#,
    ] {
        refused(
            &around(&format!(
                r#"<callActivity id="t"><extensionElements><zeebe:calledElement {zeebe}/></extensionElements></callActivity>"#
            )),
            "Q401",
        );
    }
}

#[test]
fn camunda_input_output_on_a_call_activity_is_refused_and_zeebe_io_mapping_loads() {
    refused(
        &around(
            r#"<callActivity id="t" calledElement="c"><extensionElements>¶<camunda:inputOutput><camunda:inputParameter name="a">1</camunda:inputParameter></camunda:inputOutput></extensionElements></callActivity>"#,
        ),
        "Q401",
    );
    let l = loads(&around(
        r#"<callActivity id="t"><extensionElements><zeebe:calledElement processId="c"/><zeebe:ioMapping><zeebe:input source="=x" target="y"/></zeebe:ioMapping></extensionElements></callActivity>"#,
    ));
    assert_eq!(task(only(&l), "t").mapping_style, MappingStyle::Zeebe);
}

#[test]
fn two_bindings_on_one_derived_topic_warn_and_a_q_way_to_run_wins_with_a_note() {
    let l = loads(&process(
        r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="a"/>
<serviceTask id="a" camunda:class="com.a.Charge"/>
<sequenceFlow id="f2" sourceRef="a" targetRef="b"/>
<serviceTask id="b" camunda:class="com.b.Charge"/>
<sequenceFlow id="f3" sourceRef="b" targetRef="c"/>
<serviceTask id="c" camunda:class="com.a.Charge"/>
<sequenceFlow id="f4" sourceRef="c" targetRef="end"/>
<endEvent id="end"/>"#,
    ));
    let w: Vec<&Diagnostic> = l.warnings.iter().filter(|d| d.code == "Q907").collect();
    assert_eq!(
        w.len(),
        1,
        "only the second binding warns: {:?}",
        l.warnings
    );
    assert!(
        w[0].message.contains("`com.b.Charge` and `com.a.Charge`"),
        "{}",
        w[0].message
    );
    let (pos, xml) = locate(&around(
        r#"<serviceTask id="t" q:topic="charge" ¶camunda:class="com.acme.Pay"/>"#,
    ));
    let l = loads(&xml);
    assert_eq!(
        task_t(&l).kind,
        TaskKind::Pull {
            topic: "charge".into(),
            retries: None
        }
    );
    assert!(task_t(&l).delegate.is_none());
    let n: Vec<&Diagnostic> = l.warnings.iter().filter(|d| d.code == "Q908").collect();
    assert_eq!(n.len(), 1, "{:?}", l.warnings);
    assert_eq!((n[0].severity, n[0].pos), (Severity::Note, pos));
}

#[test]
fn zeebe_outputs_on_a_message_catch_load_and_other_triggered_events_stay_refused() {
    let decls = r#"<message id="m" name="paid"/>"#;
    let catch = |ext: &str, def: &str| {
        file(
            decls,
            &format!(
                r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
<intermediateCatchEvent id="t"><extensionElements>{ext}</extensionElements>{def}</intermediateCatchEvent>
<sequenceFlow id="f2" sourceRef="t" targetRef="end"/>
<endEvent id="end"/>"#
            ),
        )
    };
    let msg = r#"<messageEventDefinition messageRef="m"/>"#;
    let l = loads(&catch(
        r#"<zeebe:ioMapping><zeebe:output source="=amount" target="paidCents"/></zeebe:ioMapping>"#,
        msg,
    ));
    let p = &only(&l).process;
    let m = &p.event_mappings[&p.find("t").unwrap()];
    assert_eq!(m.style, MappingStyle::Zeebe);
    assert_eq!(m.outputs[0].target, "paidCents");
    // Inputs on it, Camunda's mappings, and other triggers are still refused.
    refused(
        &catch(
            r#"¶<zeebe:ioMapping><zeebe:input source="=a" target="b"/></zeebe:ioMapping>"#,
            msg,
        ),
        "Q401",
    );
    refused(
        &catch(
            r#"¶<camunda:inputOutput><camunda:outputParameter name="b">${a}</camunda:outputParameter></camunda:inputOutput>"#,
            msg,
        ),
        "Q401",
    );
    refused(
        &catch(
            r#"¶<zeebe:ioMapping><zeebe:output source="=a" target="b"/></zeebe:ioMapping>"#,
            "<timerEventDefinition><timeDuration>PT1S</timeDuration></timerEventDefinition>",
        ),
        "Q401",
    );
}

/// A call activity's `camunda:in` / `camunda:out` as q: mappings with Camunda 7's meaning.
#[test]
fn camunda_in_and_out_map_a_call_activitys_variables_as_camunda_7_does() {
    let call = |ext: &str| {
        around(&format!(
            r#"<callActivity id="t" calledElement="c"><extensionElements>{ext}</extensionElements></callActivity>"#
        ))
    };
    let spec = |t: &Task| match &t.kind {
        TaskKind::Call(s) => (**s).clone(),
        other => panic!("{other:?}"),
    };
    let shown = |ms: &[Mapping]| -> Vec<(String, String)> {
        ms.iter()
            .map(|m| (m.target.clone(), m.source.source().to_owned()))
            .collect()
    };
    // Only what the ins name goes in; no out: nothing comes back.
    let l = loads(&call(
        r#"<camunda:in source="jobAnnouncementId" target="id"/><camunda:in sourceExpression="${order.total}" target="total"/>"#,
    ));
    let t = task(only(&l), "t");
    assert_eq!(t.mapping_style, MappingStyle::Q);
    assert_eq!(
        shown(&t.inputs),
        [
            ("id".to_owned(), "jobAnnouncementId".to_owned()),
            ("total".to_owned(), "order.total".to_owned())
        ]
    );
    assert!(t.outputs.is_empty());
    assert!(
        !spec(t).merge_child_variables,
        "Camunda 7 passes nothing back by default"
    );
    // Outs name the child's variables (the call's result); all of them with variables="all".
    let l = loads(&call(
        r#"<camunda:in variables="all"/><camunda:out source="score" target="riskScore"/>"#,
    ));
    let t = task(only(&l), "t");
    assert!(t.inputs.is_empty(), "every variable goes in");
    assert_eq!(
        shown(&t.outputs),
        [("riskScore".to_owned(), "result.score".to_owned())]
    );
    assert!(!spec(t).merge_child_variables);
    let l = loads(&call(
        r#"<camunda:in variables="all"/><camunda:out variables="all"/>"#,
    ));
    assert!(spec(task(only(&l), "t")).merge_child_variables);
    // What qflow cannot keep one to one is refused where it is written.
    for (ext, code) in [
        (r#"<camunda:in ¶businessKey="${key}"/>"#, "Q401"),
        (
            r#"<camunda:in source="a" target="a" ¶local="true"/>"#,
            "Q401",
        ),
        (r#"<camunda:out ¶source="a" target="b"/>"#, "Q401"),
        (
            r#"<camunda:in variables="all"/><camunda:in ¶source="a" target="b"/>"#,
            "Q401",
        ),
        (
            r#"<camunda:in variables="all"/><camunda:out ¶sourceExpression="${a}" target="b"/>"#,
            "Q401",
        ),
        (r#"¶<camunda:in target="b"/>"#, "Q102"),
        (r#"<camunda:in ¶source="a.b" target="b"/>"#, "Q208"),
        (
            r#"<camunda:in ¶sourceExpression="${a.b()}" target="b"/>"#,
            "Q203",
        ),
    ] {
        refused(&call(ext), code);
    }
    refused(
        &around(
            r#"<userTask id="t"><extensionElements><camunda:in ¶source="a" target="b"/></extensionElements></userTask>"#,
        ),
        "Q401",
    );
}

#[test]
fn q303_codes_that_never_occur_on_a_call_activity_or_elsewhere() {
    refused(
        &around(
            r#"<callActivity id="t" calledElement="c"><extensionElements><q:retry ¶nonRetryableCodes="HANDLER_FAILED"/></extensionElements></callActivity>"#,
        ),
        "Q303",
    );
    refused(
        &service(
            r#"q:task="pay""#,
            r#"<q:retry ¶nonRetryableCodes="CALLED_INSTANCE_FAILED"/>"#,
        ),
        "Q303",
    );
}

#[test]
fn q401_listener_on_a_sequence_flow() {
    refused(
        &process(
            r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="end"><extensionElements>¶<camunda:executionListener event="take"/></extensionElements></sequenceFlow>
<endEvent id="end"/>"#,
        ),
        "Q401",
    );
}

#[test]
fn q308_two_timeouts() {
    refused(
        &service(
            r#"q:task="pay""#,
            r#"<q:timeout duration="PT1S"/>¶<q:timeout duration="PT2S"/>"#,
        ),
        "Q308",
    );
}

#[test]
fn q309_unknown_q_attribute() {
    refused(
        &service(r#"q:task="pay""#, r#"<q:retry ¶maxAttempt="3"/>"#),
        "Q309",
    );
}

#[test]
fn q_respond_marks_a_task_where_a_token_waits() {
    let l = loads(&around(r#"<userTask id="t" q:respond="true"/>"#));
    let p = &l.definitions[0].process;
    let idx = p.find("t").expect("t");
    assert!(matches!(&p.node(idx).kind, NodeKind::Task(t) if t.respond));
    refused(&service(r#"q:task="pay" ¶q:respond="yes""#, ""), "Q310");
    refused(&around(r#"<manualTask id="t" ¶q:respond="true"/>"#), "Q311");
}

#[test]
fn q309_unknown_q_element() {
    refused(&service(r#"q:task="pay""#, r#"¶<q:retyr/>"#), "Q309");
}

// ---------------------------------------------------------------- vendors (Q4xx, L8)

/// A task's mappings as `target = CEL source`, inputs then outputs.
fn mapping_lines(t: &Task) -> (Vec<String>, Vec<String>) {
    let show = |ms: &[Mapping]| {
        ms.iter()
            .map(|m| format!("{} = {}", m.target, m.source.source()))
            .collect()
    };
    (show(&t.inputs), show(&t.outputs))
}

#[test]
fn zeebe_io_mapping_loads_with_zeebe_semantics() {
    let l = loads(&around(
        r#"<serviceTask id="t"><extensionElements><zeebe:taskDefinition type="pay"/><zeebe:ioMapping>
  <zeebe:input source="=order.total" target="amount"/>
  <zeebe:input source="Peter" target="sender"/>
  <zeebe:input target="nothing"/>
  <zeebe:input source="= count - 1" target="left"/>
  <zeebe:output source="=status" target="paymentStatus"/>
</zeebe:ioMapping></extensionElements></serviceTask>"#,
    ));
    let t = task(only(&l), "t");
    assert_eq!(t.mapping_style, MappingStyle::Zeebe);
    assert!(matches!(t.kind, TaskKind::Pull { .. }));
    let (inputs, outputs) = mapping_lines(t);
    assert_eq!(
        inputs,
        [
            "amount = order.total",
            "sender = \"Peter\"",
            "nothing = null",
            "left = (type(count) == int ? (count - 1) : feel_sum_needs_whole_numbers())",
        ]
    );
    assert_eq!(outputs, ["paymentStatus = status"]);
}

#[test]
fn camunda_input_output_loads_with_camunda_semantics() {
    let l = loads(&around(
        r#"<userTask id="t"><extensionElements><camunda:inputOutput>
  <camunda:inputParameter name="start">${order.start}</camunda:inputParameter>
  <camunda:inputParameter name="label">  foo bar  </camunda:inputParameter>
  <camunda:inputParameter name="willBeNull"/>
  <camunda:outputParameter name="approved">${decision == 'yes'}</camunda:outputParameter>
  <camunda:outputParameter name="cleared"></camunda:outputParameter>
</camunda:inputOutput></extensionElements></userTask>"#,
    ));
    let t = task(only(&l), "t");
    assert_eq!(t.mapping_style, MappingStyle::Camunda);
    let (inputs, outputs) = mapping_lines(t);
    assert_eq!(
        inputs,
        [
            "start = order.start",
            "label = \"foo bar\"",
            "willBeNull = null"
        ]
    );
    assert_eq!(
        outputs,
        ["approved = decision == \"yes\"", "cleared = null"]
    );
}

#[test]
fn vendor_mappings_load_on_every_task_qflow_runs() {
    for el in [
        r#"<serviceTask id="t" q:task="pay">"#,
        r#"<serviceTask id="t" q:channel="pay">"#,
        r#"<serviceTask id="t" camunda:type="external" camunda:topic="pay">"#,
        r#"<userTask id="t">"#,
        r#"<receiveTask id="t">"#,
        r#"<manualTask id="t">"#,
        r#"<sendTask id="t" camunda:type="external" camunda:topic="mail">"#,
    ] {
        let close = format!("</{}>", &el[1..el.find(' ').unwrap()]);
        let timeout = if el.contains("q:channel") {
            r#"<q:timeout duration="PT1M"/>"#
        } else {
            ""
        };
        let xml = around(&format!(
            r#"{el}<extensionElements>{timeout}<camunda:inputOutput><camunda:inputParameter name="x">${{a}}</camunda:inputParameter><camunda:outputParameter name="y">${{x}}</camunda:outputParameter></camunda:inputOutput></extensionElements>{close}"#
        ));
        let l = loads(&xml);
        assert_eq!(
            task(only(&l), "t").mapping_style,
            MappingStyle::Camunda,
            "{el}"
        );
    }
    let l = loads(&around(
        r#"<scriptTask id="t"><extensionElements><zeebe:script expression="=x" resultVariable="r"/><zeebe:ioMapping><zeebe:input source="=1" target="x"/><zeebe:output source="=r" target="out"/></zeebe:ioMapping></extensionElements></scriptTask>"#,
    ));
    assert_eq!(task(only(&l), "t").mapping_style, MappingStyle::Zeebe);
}

#[test]
fn event_mappings_load_where_the_vendor_allows_them() {
    let l = loads(&process(
        r#"<startEvent id="s"><extensionElements><zeebe:ioMapping><zeebe:output source="= 0" target="loopAmount"/></zeebe:ioMapping></extensionElements></startEvent>
<sequenceFlow id="f1" sourceRef="s" targetRef="th"/>
<intermediateThrowEvent id="th"><extensionElements><camunda:inputOutput><camunda:inputParameter name="x">mapped</camunda:inputParameter><camunda:outputParameter name="out">${x}</camunda:outputParameter></camunda:inputOutput></extensionElements></intermediateThrowEvent>
<sequenceFlow id="f2" sourceRef="th" targetRef="e"/>
<endEvent id="e"><extensionElements><camunda:inputOutput><camunda:inputParameter name="x">${out}</camunda:inputParameter></camunda:inputOutput></extensionElements></endEvent>"#,
    ));
    let p = &only(&l).process;
    let at = |id: &str| &p.event_mappings[&p.find(id).unwrap()];
    assert_eq!(at("s").style, MappingStyle::Zeebe);
    assert_eq!(at("s").outputs[0].source.source(), "0");
    assert_eq!(at("th").style, MappingStyle::Camunda);
    assert_eq!((at("th").inputs.len(), at("th").outputs.len()), (1, 1));
    assert_eq!((at("e").inputs.len(), at("e").outputs.len()), (1, 0));
    assert_eq!(p.event_mappings.len(), 3);
}

/// Zeebe's `zeebe:ioMapping` on an embedded sub-process loads (its inputs are locals of
/// each instance of it, its outputs written as it completes); on a multi-instance
/// sub-process it belongs to the inner node, which Zeebe maps once per inner instance.
#[test]
fn zeebe_mappings_on_an_embedded_sub_process_load() {
    let sub = |ext: &str, mi: &str| {
        around(&format!(
            r#"<subProcess id="t">{mi}<extensionElements>{ext}</extensionElements>
<startEvent id="in"/><sequenceFlow id="g1" sourceRef="in" targetRef="out"/><endEvent id="out"/>
</subProcess>"#
        ))
    };
    let io = r#"<zeebe:ioMapping><zeebe:input source="=order.total" target="amount"/><zeebe:output source="=amount" target="charged"/><zeebe:output source="=1" target="order.done"/></zeebe:ioMapping>"#;
    let l = loads(&sub(io, ""));
    let p = &only(&l).process;
    let sp = p.find("t").unwrap();
    let m = p.sub_process_mappings(sp).expect("mapped");
    assert_eq!(m.style, MappingStyle::Zeebe);
    assert_eq!(m.inputs[0].target, "amount");
    let outputs: Vec<&str> = m.outputs.iter().map(|o| o.target.as_str()).collect();
    assert_eq!(outputs, ["charged", "order.done"]);
    // Not an event's mapping: nothing runs as a token passes the sub-process.
    assert!(p.event_mappings.is_empty());
    // A multi-instance sub-process: the mappings move to its inner node.
    let mi = r#"<multiInstanceLoopCharacteristics><extensionElements><zeebe:loopCharacteristics inputCollection="=items" inputElement="item"/></extensionElements></multiInstanceLoopCharacteristics>"#;
    let l = loads(&sub(io, mi));
    let p = &only(&l).process;
    let body = p.find("t").unwrap();
    let inner = p.multi_instance(body).expect("a body").inner;
    assert!(p.sub_process_mappings(body).is_none());
    assert!(p.sub_process_mappings(inner.with_instance(2)).is_some());
}

/// What stays refused on sub-processes: any mapping on an event sub-process, two mapping
/// elements, and what vendor mappings refuse anywhere. (Camunda 7's run: core's
/// sub-process locals tests.)
#[test]
fn q401_sub_process_mappings_qflow_does_not_run() {
    let sub = |ext: &str| {
        around(&format!(
            r#"<subProcess id="t"><extensionElements>{ext}</extensionElements>
<startEvent id="in"/><sequenceFlow id="g1" sourceRef="in" targetRef="out"/><endEvent id="out"/>
</subProcess>"#
        ))
    };
    let camunda = r#"<camunda:inputOutput><camunda:inputParameter name="x">${a}</camunda:inputParameter></camunda:inputOutput>"#;
    let l = loads(&sub(camunda));
    let p = &only(&l).process;
    let m = p
        .sub_process_mappings(p.find("t").unwrap())
        .expect("mapped");
    assert_eq!(m.style, MappingStyle::Camunda);
    let twice = r#"<zeebe:ioMapping/>¶<zeebe:ioMapping/>"#;
    refused(&sub(twice), "Q308");
    let nested_deep = r#"<zeebe:ioMapping><zeebe:input source="=a" ¶target="a.b.c.d.e.f.g.h.i"/></zeebe:ioMapping>"#;
    refused(&sub(nested_deep), "Q401");
    let chained = r#"<zeebe:ioMapping><zeebe:input source="=a" target="x"/>¶<zeebe:input source="=x" target="y"/></zeebe:ioMapping>"#;
    refused(&sub(chained), "Q401");
    let esp = process(
        r#"<startEvent id="s"/><sequenceFlow id="f1" sourceRef="s" targetRef="u"/>
<userTask id="u"/><sequenceFlow id="f2" sourceRef="u" targetRef="e"/><endEvent id="e"/>
<subProcess id="esp" triggeredByEvent="true"><extensionElements>¶<zeebe:ioMapping><zeebe:input source="=1" target="x"/></zeebe:ioMapping></extensionElements>
<startEvent id="es"><timerEventDefinition><timeDuration>PT1H</timeDuration></timerEventDefinition></startEvent>
<sequenceFlow id="g1" sourceRef="es" targetRef="ee"/><endEvent id="ee"/>
</subProcess>"#,
    );
    assert!(refused(&esp, "Q401")
        .message
        .contains("on an event sub-process"));
}

/// A Camunda 7 signal throw passes no variables with its signal, so its mappings are a
/// none throw's: they are kept (whether the signal throw itself loads is another rule's).
#[test]
fn camunda_mappings_on_a_signal_throw_are_not_refused() {
    let xml = file(
        r#"<signal id="sig" name="price"/>"#,
        r#"<startEvent id="s"/><sequenceFlow id="f1" sourceRef="s" targetRef="t"/>
<intermediateThrowEvent id="t"><extensionElements><camunda:inputOutput><camunda:inputParameter name="price">${spot}</camunda:inputParameter><camunda:outputParameter name="last">${price}</camunda:outputParameter></camunda:inputOutput></extensionElements><signalEventDefinition signalRef="sig"/></intermediateThrowEvent>
<sequenceFlow id="f2" sourceRef="t" targetRef="e"/><endEvent id="e"/>"#,
    );
    let codes: Vec<&str> = match &load_str(&xml) {
        Ok(l) => {
            let p = &only(l).process;
            assert_eq!(
                p.event_mappings[&p.find("t").unwrap()].style,
                MappingStyle::Camunda
            );
            Vec::new()
        }
        Err(d) => d.iter().map(|d| d.code).collect(),
    };
    assert!(!codes.contains(&"Q401"), "{codes:?}");
    // Zeebe's inputs on a signal throw are the signal's variables: refused.
    let zeebe = xml
        .replace(
            r#"<camunda:inputOutput><camunda:inputParameter name="price">${spot}</camunda:inputParameter><camunda:outputParameter name="last">${price}</camunda:outputParameter></camunda:inputOutput>"#,
            r#"<zeebe:ioMapping><zeebe:input source="=spot" target="price"/></zeebe:ioMapping>"#,
        );
    let codes: Vec<&str> = load_str(&zeebe)
        .err()
        .map(|d| d.iter().map(|d| d.code).collect())
        .unwrap_or_default();
    assert!(codes.contains(&"Q401"), "{codes:?}");
}

#[test]
fn q401_vendor_mappings_beyond_what_maps_one_to_one() {
    let user = |io: &str| {
        around(&format!(
            r#"<userTask id="t"><extensionElements>{io}</extensionElements></userTask>"#
        ))
    };
    let list = r#"<camunda:inputOutput><camunda:inputParameter name="x">¶<camunda:list><camunda:value>a</camunda:value></camunda:list></camunda:inputParameter></camunda:inputOutput>"#;
    let d = refused(&user(list), "Q401");
    assert!(d.message.contains("<list>"), "{}", d.message);
    let map = r#"<camunda:inputOutput><camunda:outputParameter name="x">¶<camunda:map><camunda:entry key="a">b</camunda:entry></camunda:map></camunda:outputParameter></camunda:inputOutput>"#;
    refused(&user(map), "Q401");
    let script = r#"<camunda:inputOutput><camunda:inputParameter name="x">¶<camunda:script scriptFormat="groovy">1</camunda:script></camunda:inputParameter></camunda:inputOutput>"#;
    assert!(refused(&user(script), "Q401").message.contains("<script>"));
    // A nested target: a Zeebe output updates the property (one meaning in every Zeebe
    // version); a Zeebe input builds a local object with its siblings (and fails at run
    // time where versions differ, `qflow_core`'s vendor_io tests); a Camunda parameter
    // names a variable.
    loads(&user(
        r#"<zeebe:ioMapping><zeebe:output source="=a" target="order.total"/><zeebe:output source="=b" target="order.tax"/></zeebe:ioMapping>"#,
    ));
    let l = loads(&user(
        r#"<zeebe:ioMapping><zeebe:input source="=a" target="from.email"/><zeebe:input source="=b" target="from.name"/></zeebe:ioMapping>"#,
    ));
    let targets: Vec<&str> = task(only(&l), "t")
        .inputs
        .iter()
        .map(|m| m.target.as_str())
        .collect();
    assert_eq!(targets, ["from.email", "from.name"]);
    let input_above = r#"<zeebe:ioMapping><zeebe:input source="=a" target="from.email"/>¶<zeebe:input source="=b" target="from"/></zeebe:ioMapping>"#;
    refused(&user(input_above), "Q401");
    let nested_camunda = r#"<camunda:inputOutput><camunda:outputParameter ¶name="order.total">${a}</camunda:outputParameter></camunda:inputOutput>"#;
    assert!(refused(&user(nested_camunda), "Q401")
        .message
        .contains("Camunda 7"));
    // A later output that writes a path above or below an earlier one's, or reads its
    // variable, is refused like a same-target pair.
    let above = r#"<zeebe:ioMapping><zeebe:output source="=a" target="order.total"/>¶<zeebe:output source="=b" target="order"/></zeebe:ioMapping>"#;
    refused(&user(above), "Q401");
    let reads = r#"<zeebe:ioMapping><zeebe:output source="=a" target="order.total"/>¶<zeebe:output source="=order.total + 1" target="sum"/></zeebe:ioMapping>"#;
    assert!(refused(&user(reads), "Q401").message.contains("reads"));
    let deep = r#"<zeebe:ioMapping><zeebe:output source="=a" ¶target="a.b.c.d.e.f.g.h.i"/></zeebe:ioMapping>"#;
    refused(&user(deep), "Q401");
    // Zeebe versions differ on whether a mapping sees the ones before it.
    let chained = r#"<zeebe:ioMapping><zeebe:input source="=a" target="x"/>¶<zeebe:input source="=x + 1" target="y"/></zeebe:ioMapping>"#;
    assert!(refused(&user(chained), "Q401").message.contains("earlier"));
    let same = r#"<zeebe:ioMapping><zeebe:output source="=a" target="x"/>¶<zeebe:output source="=b" target="x"/></zeebe:ioMapping>"#;
    refused(&user(same), "Q401");
    // Camunda 7's order is one: an output sees the outputs before it.
    loads(&user(
        r#"<camunda:inputOutput><camunda:outputParameter name="x">${a}</camunda:outputParameter><camunda:outputParameter name="y">${x}</camunda:outputParameter></camunda:inputOutput>"#,
    ));
    let unknown = r#"<zeebe:ioMapping>¶<zeebe:inpt source="=a" target="b"/></zeebe:ioMapping>"#;
    refused(&user(unknown), "Q401");
    let mixed = r#"<q:output target="a" source="b"/>¶<zeebe:ioMapping><zeebe:output source="=a" target="b"/></zeebe:ioMapping>"#;
    refused(&user(mixed), "Q401");
    let twice = r#"<zeebe:ioMapping/>¶<camunda:inputOutput/>"#;
    refused(&user(twice), "Q308");
}

#[test]
fn q203_vendor_mapping_sources_beyond_the_subsets() {
    let user = |io: &str| {
        around(&format!(
            r#"<userTask id="t"><extensionElements>{io}</extensionElements></userTask>"#
        ))
    };
    // A composite text runs (`x ${a}`, core's vendor_io tests); what is refused is JUEL
    // beyond the subset in any part, an escape, a quoted string in a part, a part that
    // does not close, and `${` mixed with `#{`.
    for juel in [
        "${a + 1}",
        "x ${a + 1}",
        "${a.equals(b)}",
        r"\${a} ${b}",
        "x ${a == 'y'}",
        "x ${a",
        "${a} #{b}",
    ] {
        let io = format!(
            r#"<camunda:inputOutput><camunda:inputParameter name="x">¶{juel}</camunda:inputParameter></camunda:inputOutput>"#
        );
        assert!(
            refused(&user(&io), "Q203").message.contains("JUEL"),
            "{juel}"
        );
    }
    for feel in ["=sum(xs)", "=a * 2", "=a + 0.5"] {
        let io = format!(
            r#"<zeebe:ioMapping><zeebe:input ¶source="{feel}" target="x"/></zeebe:ioMapping>"#
        );
        refused(&user(&io), "Q203");
    }
    let l = loads(&user(
        r#"<camunda:inputOutput><camunda:inputParameter name="x">Order ${order.id} for ${name}</camunda:inputParameter></camunda:inputOutput>"#,
    ));
    assert_eq!(
        task(only(&l), "t").inputs[0].source.source(),
        r#""Order " + juel_text(order.id) + " for " + juel_text(name)"#
    );
}

#[test]
fn q401_vendor_mappings_where_the_vendor_refuses_them() {
    let io = r#"<extensionElements>¶<camunda:inputOutput><camunda:outputParameter name="x">${a}</camunda:outputParameter></camunda:inputOutput></extensionElements>"#;
    let d = refused(
        &around(&format!(
            r#"<exclusiveGateway id="t">{io}</exclusiveGateway>"#
        )),
        "Q401",
    );
    assert!(d.message.contains("exclusiveGateway"), "{}", d.message);
    refused(
        &process(&format!(
            r#"<startEvent id="s">{io}</startEvent><sequenceFlow id="f" sourceRef="s" targetRef="e"/><endEvent id="e"/>"#
        )),
        "Q401",
    );
    refused(
        &process(&format!(
            r#"<startEvent id="s"/><sequenceFlow id="f" sourceRef="s" targetRef="e"/><endEvent id="e">{io}</endEvent>"#
        )),
        "Q401",
    );
    // An event with a trigger: the vendor's mapping there would map its payload.
    refused(
        &around(&format!(
            r#"<intermediateCatchEvent id="t">{}<timerEventDefinition><timeDuration>PT1M</timeDuration></timerEventDefinition></intermediateCatchEvent>"#,
            io.replace("camunda:inputOutput", "zeebe:ioMapping")
                .replace(
                    r#"<camunda:outputParameter name="x">${a}</camunda:outputParameter>"#,
                    r#"<zeebe:output source="=a" target="x"/>"#
                )
        )),
        "Q401",
    );
    // Zeebe: an event passed through takes outputs only.
    refused(
        &process(
            r#"<startEvent id="s"><extensionElements>¶<zeebe:ioMapping><zeebe:input source="=a" target="x"/></zeebe:ioMapping></extensionElements></startEvent><sequenceFlow id="f" sourceRef="s" targetRef="e"/><endEvent id="e"/>"#,
        ),
        "Q401",
    );
}

#[test]
fn camunda_external_task_is_a_pull_task() {
    let l = loads(&around(
        r#"<serviceTask id="t" camunda:type="external" camunda:topic="invoices"/>"#,
    ));
    assert_eq!(
        task(only(&l), "t").kind,
        TaskKind::Pull {
            topic: "invoices".into(),
            retries: None
        }
    );
}

#[test]
fn zeebe_job_task_is_a_pull_task_with_its_budget() {
    let l = loads(&around(
        r#"<serviceTask id="t"><extensionElements><zeebe:taskDefinition type="ship" retries="5"/></extensionElements></serviceTask>"#,
    ));
    assert_eq!(
        task(only(&l), "t").kind,
        TaskKind::Pull {
            topic: "ship".into(),
            retries: Some(5)
        }
    );
}

#[test]
fn zeebe_condition_is_translated_to_cel() {
    let l = loads(&gateway_with_condition(
        "<conditionExpression>=amount &gt; 100 and tier = \"gold\"</conditionExpression>",
    ));
    let d = only(&l);
    let c = d.process.flows[1].condition.as_ref().unwrap();
    assert_eq!(c.source(), "amount > 100 && tier == \"gold\"");
    let vars: Variables = serde_json::from_str(r#"{"amount": 150, "tier": "gold"}"#).unwrap();
    assert!(c.eval_bool(&vars).unwrap());
}

// ---------------------------------------------------------------- valid models per kind

#[test]
fn registered_task_loads_with_policy_defaults() {
    let l = loads(&service(
        r#"q:task="pay""#,
        r#"<q:retry backoffMultiplier="1.5" jitter="none" maxElapsed="PT1H"/>
<q:input target="amount" source="order.total"/>
<q:output target="receipt" source="result.id"/>"#,
    ));
    let t = task(only(&l), "t");
    assert_eq!(t.kind, TaskKind::Registered { name: "pay".into() });
    let r = t.retry.clone().unwrap();
    assert_eq!(
        r,
        RetryPolicy {
            multiplier_milli: 1500,
            jitter: Jitter::None,
            max_elapsed: Some(DurationMs(3_600_000)),
            ..RetryPolicy::default()
        }
    );
    assert_eq!(t.inputs[0].target, "amount");
    assert_eq!(t.outputs[0].source.source(), "result.id");
}

#[test]
fn channel_task_loads() {
    let l = loads(&service(
        r#"q:channel="bank""#,
        r#"<q:timeout duration="PT30S"/>"#,
    ));
    assert_eq!(
        task(only(&l), "t").kind,
        TaskKind::Channel {
            name: "bank".into()
        }
    );
}

#[test]
fn pull_task_loads() {
    let l = loads(&around(r#"<serviceTask id="t" q:topic="invoices"/>"#));
    assert_eq!(
        task(only(&l), "t").kind,
        TaskKind::Pull {
            topic: "invoices".into(),
            retries: None
        }
    );
}

#[test]
fn user_abstract_and_manual_tasks_load() {
    for (xml, kind) in [
        (
            r#"<userTask id="t"/>"#,
            TaskKind::User {
                assignment: Box::default(),
            },
        ),
        (r#"<task id="t"/>"#, TaskKind::PassThrough),
        (r#"<manualTask id="t"/>"#, TaskKind::PassThrough),
    ] {
        let l = loads(&around(xml));
        assert_eq!(task(only(&l), "t").kind, kind, "{xml}");
    }
}

#[test]
fn send_and_receive_tasks_load() {
    let decl = r#"<message id="m1" name="order-paid"/>"#;
    let body = |t: &str| {
        format!(
            r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
{t}
<sequenceFlow id="f2" sourceRef="t" targetRef="end"/>
<endEvent id="end"/>"#
        )
    };
    let l = loads(&file(
        decl,
        &body(r#"<receiveTask id="t" messageRef="m1"/>"#),
    ));
    assert_eq!(
        task(only(&l), "t").kind,
        TaskKind::Receive {
            message: Some("order-paid".into())
        }
    );
    // Without a messageRef, a receive task is a plain wait state (Camunda 7, Flowable).
    let l = loads(&file(decl, &body(r#"<receiveTask id="t"/>"#)));
    assert_eq!(
        task(only(&l), "t").kind,
        TaskKind::Receive { message: None }
    );
    let l = loads(&file(decl, &body(r#"<sendTask id="t" messageRef="m1"/>"#)));
    assert_eq!(
        task(only(&l), "t").kind,
        TaskKind::Send {
            message: Some("order-paid".into())
        }
    );
}

/// Every supported construct in one model, with prefixed BPMN, diagram interchange and
/// documentation that must be ignored.
const FULL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:bpmndi="http://www.omg.org/spec/BPMN/20100524/DI"
    xmlns:dc="http://www.omg.org/spec/DD/20100524/DC"
    xmlns:q="urn:qflow:bpmn:1" id="defs">
  <bpmn:error id="declined" errorCode="CARD_DECLINED"/>
  <bpmn:message id="m" name="shipped"/>
  <bpmn:process id="order" name="Order" isExecutable="true">
    <bpmn:documentation>ignored</bpmn:documentation>
    <bpmn:laneSet id="lanes"><bpmn:lane id="lane1"/></bpmn:laneSet>
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="split"/>
    <bpmn:parallelGateway id="split"/>
    <bpmn:sequenceFlow id="f2" sourceRef="split" targetRef="pay"/>
    <bpmn:sequenceFlow id="f3" sourceRef="split" targetRef="sub"/>
    <bpmn:serviceTask id="pay" q:task="charge">
      <bpmn:extensionElements><q:retry maxAttempts="5" nonRetryableCodes="CARD_DECLINED"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:boundaryEvent id="payFailed" attachedToRef="pay">
      <bpmn:errorEventDefinition errorRef="declined"/>
    </bpmn:boundaryEvent>
    <bpmn:sequenceFlow id="f4" sourceRef="payFailed" targetRef="failed"/>
    <bpmn:endEvent id="failed"><bpmn:terminateEventDefinition/></bpmn:endEvent>
    <bpmn:sequenceFlow id="f5" sourceRef="pay" targetRef="join"/>
    <bpmn:subProcess id="sub">
      <bpmn:startEvent id="subStart"/>
      <bpmn:sequenceFlow id="s1" sourceRef="subStart" targetRef="wait"/>
      <bpmn:intermediateCatchEvent id="wait">
        <bpmn:timerEventDefinition><bpmn:timeDuration>PT10M</bpmn:timeDuration></bpmn:timerEventDefinition>
      </bpmn:intermediateCatchEvent>
      <bpmn:sequenceFlow id="s2" sourceRef="wait" targetRef="subEnd"/>
      <bpmn:endEvent id="subEnd"/>
    </bpmn:subProcess>
    <bpmn:boundaryEvent id="reminder" attachedToRef="sub" cancelActivity="false">
      <bpmn:timerEventDefinition><bpmn:timeCycle>R3/PT1M</bpmn:timeCycle></bpmn:timerEventDefinition>
    </bpmn:boundaryEvent>
    <bpmn:sequenceFlow id="f6" sourceRef="reminder" targetRef="remindEnd"/>
    <bpmn:endEvent id="remindEnd"/>
    <bpmn:sequenceFlow id="f7" sourceRef="sub" targetRef="join"/>
    <bpmn:parallelGateway id="join"/>
    <bpmn:sequenceFlow id="f8" sourceRef="join" targetRef="route"/>
    <bpmn:exclusiveGateway id="route" default="f10"/>
    <bpmn:sequenceFlow id="f9" sourceRef="route" targetRef="events">
      <bpmn:conditionExpression>total &gt;= 100</bpmn:conditionExpression>
    </bpmn:sequenceFlow>
    <bpmn:sequenceFlow id="f10" sourceRef="route" targetRef="child"/>
    <bpmn:callActivity id="child" calledElement="archive"/>
    <bpmn:sequenceFlow id="f11" sourceRef="child" targetRef="done"/>
    <bpmn:eventBasedGateway id="events"/>
    <bpmn:sequenceFlow id="f12" sourceRef="events" targetRef="gotShipped"/>
    <bpmn:sequenceFlow id="f13" sourceRef="events" targetRef="deadline"/>
    <bpmn:intermediateCatchEvent id="gotShipped"><bpmn:messageEventDefinition messageRef="m"/></bpmn:intermediateCatchEvent>
    <bpmn:intermediateCatchEvent id="deadline">
      <bpmn:timerEventDefinition><bpmn:timeDate>2030-01-01T00:00:00Z</bpmn:timeDate></bpmn:timerEventDefinition>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f14" sourceRef="gotShipped" targetRef="done"/>
    <bpmn:sequenceFlow id="f15" sourceRef="deadline" targetRef="done"/>
    <bpmn:endEvent id="done"/>
  </bpmn:process>
  <bpmndi:BPMNDiagram id="d1"><bpmndi:BPMNPlane id="pl" bpmnElement="order"><bpmndi:BPMNShape id="sh" bpmnElement="start"><dc:Bounds x="1" y="2" width="3" height="4"/></bpmndi:BPMNShape></bpmndi:BPMNPlane></bpmndi:BPMNDiagram>
</bpmn:definitions>
"#;

#[test]
fn full_model_loads_with_every_supported_construct() {
    let l = loads(FULL);
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    let d = only(&l);
    assert_eq!(d.id, "order");
    assert_eq!(d.name.as_deref(), Some("Order"));
    assert_eq!(d.content_hash.len(), 64);
    let p = &d.process;
    assert_eq!(p.nodes.len(), 18);
    assert_eq!(p.flows.len(), 17);
    let sub = p.find("sub").unwrap();
    assert_eq!(p.node(p.find("wait").unwrap()).scope, Some(sub));
    assert_eq!(p.start_events(Some(sub)).count(), 1);
    match &p.node(p.find("payFailed").unwrap()).kind {
        NodeKind::Boundary(b) => {
            assert_eq!(b.attached_to, p.find("pay").unwrap());
            assert_eq!(
                b.trigger,
                BoundaryTrigger::Error {
                    code: Some("CARD_DECLINED".into())
                }
            );
        }
        k => panic!("{k:?}"),
    }
    match &p.node(p.find("reminder").unwrap()).kind {
        NodeKind::Boundary(b) => {
            assert!(!b.interrupting);
            assert_eq!(
                b.trigger,
                BoundaryTrigger::Timer(TimerDef::Cycle {
                    repetitions: Some(3),
                    interval: DurationMs(60_000)
                })
            );
        }
        k => panic!("{k:?}"),
    }
    match &p.node(p.find("route").unwrap()).kind {
        NodeKind::ExclusiveGateway { default: Some(f) } => assert_eq!(p.flow(*f).id, "f10"),
        k => panic!("{k:?}"),
    }
    match &p.node(p.find("deadline").unwrap()).kind {
        NodeKind::IntermediateCatch(CatchTrigger::Timer(TimerDef::Date { epoch_ms })) => {
            assert_eq!(*epoch_ms, 1_893_456_000_000)
        }
        k => panic!("{k:?}"),
    }
    let reasons = match &d.class {
        Classification::Stateful { reasons } => reasons.clone(),
        c => panic!("{c:?}"),
    };
    assert!(
        reasons.contains(&"node `pay`: q:retry".to_string()),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&"node `wait`: timer".to_string()),
        "{reasons:?}"
    );
}

#[test]
fn same_bytes_give_equal_hashes_and_structure() {
    let a = loads(FULL);
    let b = loads(FULL);
    assert_eq!(a.definitions[0].content_hash, b.definitions[0].content_hash);
    assert_eq!(
        format!("{:?}", a.definitions[0].process.nodes),
        format!("{:?}", b.definitions[0].process.nodes)
    );
}

#[test]
fn plain_registered_model_is_stateless() {
    let l = loads(&around(r#"<serviceTask id="t" q:task="pay"/>"#));
    assert_eq!(only(&l).class, Classification::Stateless);
}

#[test]
fn channel_call_makes_a_model_stateful() {
    let l = loads(&service(
        r#"q:channel="bank""#,
        r#"<q:timeout duration="PT30S"/>"#,
    ));
    assert_eq!(
        only(&l).class,
        Classification::Stateful {
            reasons: vec![
                "node `t`: channel call".into(),
                "node `t`: q:timeout (timer)".into()
            ]
        }
    );
}

// ---------------------------------------------------------------- process selection

#[test]
fn non_executable_process_loads_with_a_warning_when_alone() {
    let xml = process(r#"<startEvent id="s"/><sequenceFlow id="f" sourceRef="s" targetRef="e"/><endEvent id="e"/>"#)
        .replace(r#"isExecutable="true""#, r#"isExecutable="false""#);
    let l = loads(&xml);
    assert_eq!(l.definitions.len(), 1);
    assert_eq!(l.warnings.len(), 1);
    assert_eq!(l.warnings[0].code, "Q901");
}

#[test]
fn only_executable_processes_load_when_some_are() {
    let xml = format!(
        r#"{HEAD}
<process id="a" isExecutable="false"><startEvent id="s1"/><sequenceFlow id="f1" sourceRef="s1" targetRef="e1"/><endEvent id="e1"/></process>
<process id="b" isExecutable="true"><startEvent id="s2"/><sequenceFlow id="f2" sourceRef="s2" targetRef="e2"/><endEvent id="e2"/></process>
</definitions>"#
    );
    let l = loads(&xml);
    let ids: Vec<&str> = l.definitions.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, vec!["b"]);
}

#[test]
fn every_diagnostic_is_collected_in_position_order() {
    let xml = process(
        r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="a"/>
<businessRuleTask id="a"/>
<sequenceFlow id="f2" sourceRef="a" targetRef="b"/>
<serviceTask id="b" q:channel="bank"/>
<sequenceFlow id="f3" sourceRef="b" targetRef="end"/>
<endEvent id="end"/>"#,
    );
    let d = load_str(&xml).unwrap_err();
    let codes: Vec<&str> = d.iter().map(|d| d.code).collect();
    assert_eq!(codes, vec!["Q103", "Q305"]);
    assert!(d.windows(2).all(|w| w[0].pos <= w[1].pos));
}

#[test]
fn every_code_is_documented_in_the_rules_table() {
    let codes: Vec<&str> = qflow_loader::rules().iter().map(|r| r.0).collect();
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/diagnostics.md"
    ))
    .expect("docs/diagnostics.md exists");
    for c in codes {
        assert!(docs.contains(&format!("## {c}")), "{c} is not documented");
    }
}

#[test]
fn definitions_can_be_shared_across_threads() {
    fn check<T: Clone + Send + Sync + std::fmt::Debug + 'static>() {}
    check::<Definition>();
    check::<Loaded>();
    let l = loads(FULL);
    let d = std::sync::Arc::new(l.definitions[0].clone());
    let handles: Vec<_> = (0..2)
        .map(|i| {
            let d = d.clone();
            std::thread::spawn(move || {
                let f =
                    &d.process.flows[d.process.flows.iter().position(|f| f.id == "f9").unwrap()];
                let vars: Variables =
                    serde_json::from_str(&format!("{{\"total\": {}}}", 99 + i)).unwrap();
                f.condition.as_ref().unwrap().eval_bool(&vars).unwrap()
            })
        })
        .collect();
    let got: Vec<bool> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(got, vec![false, true]);
}

#[test]
fn every_code_the_source_emits_is_in_the_rules_table() {
    let known: Vec<&str> = qflow_loader::rules().iter().map(|r| r.0).collect();
    let mut dirs = vec![std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src"
    ))];
    let mut files = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    let mut checked = 0;
    for path in files {
        let text = std::fs::read_to_string(path).unwrap();
        let bytes = text.as_bytes();
        for i in 0..bytes.len().saturating_sub(5) {
            let w = &bytes[i..i + 6];
            if w[0] == b'"'
                && w[1] == b'Q'
                && w[2..5].iter().all(u8::is_ascii_digit)
                && w[5] == b'"'
            {
                let code = std::str::from_utf8(&w[1..5]).unwrap();
                assert!(
                    known.contains(&code),
                    "{code} is emitted but not in rules()"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 40, "only {checked} code literals found");
}

#[test]
fn empty_pool_is_skipped_with_a_warning() {
    let xml = format!(
        r#"{HEAD}
<collaboration id="c"><participant id="a" processRef="pool"/><participant id="b" processRef="p"/></collaboration>
<process id="pool" isExecutable="true"/>
<process id="p" isExecutable="true"><startEvent id="s"/><sequenceFlow id="f" sourceRef="s" targetRef="e"/><endEvent id="e"/></process>
</definitions>"#
    );
    let l = loads(&xml);
    assert_eq!(only(&l).id, "p");
    let codes: Vec<&str> = l.warnings.iter().map(|w| w.code).collect();
    assert_eq!(codes, vec!["Q903"]);
}

#[test]
fn inclusive_gateway_error_end_and_milestone_load() {
    let l = loads(&file(
        r#"<error id="e1" errorCode="REJECTED"/>"#,
        r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="or"/>
<inclusiveGateway id="or" default="f3"/>
<sequenceFlow id="f2" sourceRef="or" targetRef="milestone"><conditionExpression>a == 1</conditionExpression></sequenceFlow>
<sequenceFlow id="f3" sourceRef="or" targetRef="reject"/>
<intermediateThrowEvent id="milestone"/>
<sequenceFlow id="f4" sourceRef="milestone" targetRef="call"/>
<callActivity id="call"><extensionElements><zeebe:calledElement processId="child"/></extensionElements></callActivity>
<sequenceFlow id="f5" sourceRef="call" targetRef="end"/>
<endEvent id="end"/>
<endEvent id="reject"><errorEventDefinition errorRef="e1"/></endEvent>"#,
    ));
    let d = only(&l);
    let p = &d.process;
    match &p.node(p.find("or").unwrap()).kind {
        NodeKind::InclusiveGateway { default: Some(f) } => assert_eq!(p.flow(*f).id, "f3"),
        k => panic!("{k:?}"),
    }
    match &p.node(p.find("reject").unwrap()).kind {
        NodeKind::EndEvent(EndKind::Error { error }) => assert_eq!(error.as_deref(), Some("e1")),
        k => panic!("{k:?}"),
    }
    match &p.node(p.find("call").unwrap()).kind {
        NodeKind::Task(Task {
            kind: TaskKind::Call(spec),
            ..
        }) => assert_eq!(
            **spec,
            CallSpec {
                process: "child".into(),
                version: None,
                merge_child_variables: true,
            }
        ),
        k => panic!("{k:?}"),
    }
    assert_eq!(d.errors["e1"].code.as_deref(), Some("REJECTED"));
}

// ------------------------------------------------------ message correlation keys (O1)

/// A receive task waiting for message `m1`.
fn receiving(decls: &str) -> String {
    file(
        decls,
        r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
<receiveTask id="t" messageRef="m1"/>
<sequenceFlow id="f2" sourceRef="t" targetRef="end"/>
<endEvent id="end"/>"#,
    )
}

#[test]
fn a_message_declares_its_correlation_key_in_cel_or_zeebe_feel() {
    let l = loads(&receiving(
        r#"<message id="m1" name="paid" q:correlationKey="order.id"/>"#,
    ));
    let keys = &l.definitions[0].correlation_keys;
    assert_eq!(keys.get("paid").map(|e| e.source()), Some("order.id"));
    let l = loads(&receiving(
        r#"<message id="m1" name="paid"><extensionElements>
             <zeebe:subscription correlationKey="=orderId"/></extensionElements></message>"#,
    ));
    assert_eq!(
        l.definitions[0]
            .correlation_keys
            .get("paid")
            .map(|e| e.source()),
        Some("orderId")
    );
    // Two declarations of one name with the same key are one key.
    let l = loads(&receiving(
        r#"<message id="m1" name="paid" q:correlationKey="k"/>
           <message id="m2" name="paid" q:correlationKey="k"/>"#,
    ));
    assert_eq!(l.definitions[0].correlation_keys.len(), 1);
    // Without a key, the message is correlated by name only.
    let l = loads(&receiving(r#"<message id="m1" name="paid"/>"#));
    assert!(l.definitions[0].correlation_keys.is_empty());
}

#[test]
fn q312_a_message_with_two_correlation_keys() {
    refused(
        &receiving(
            r#"<message id="m1" name="paid" q:correlationKey="a"><extensionElements>
             <zeebe:subscription ¶correlationKey="=b"/></extensionElements></message>"#,
        ),
        "Q312",
    );
    refused(
        &receiving(
            r#"<message id="m1" name="paid" q:correlationKey="a"/>
           <message id="m2" name="paid" ¶q:correlationKey="b"/>"#,
        ),
        "Q312",
    );
}

#[test]
fn a_correlation_key_is_checked_like_any_expression() {
    refused(
        &receiving(r#"<message id="m1" name="paid" ¶q:correlationKey="order.("/>"#),
        "Q201",
    );
    refused(
        &receiving(
            r#"<message id="m1" name="paid"><extensionElements>
             <zeebe:subscription ¶correlationKey="=string(orderId)"/></extensionElements></message>"#,
        ),
        "Q203",
    );
    refused(
        &receiving(r#"<message id="m1" name="paid" ¶q:corelationKey="k"/>"#),
        "Q309",
    );
}

#[test]
fn activiti_and_flowable_extensions_are_read_as_camunda_and_code_stays_refused() {
    for ns in ["http://activiti.org/bpmn", "http://flowable.org/bpmn"] {
        let with =
            |xml: String| xml.replace(r#"id="defs">"#, &format!(r#"xmlns:act="{ns}" id="defs">"#));
        // A Java binding in either spelling is a pull task on the converter's topic.
        for binding in [
            r#"act:class="com.acme.Pay""#,
            r#"act:delegateExpression="${pay}""#,
        ] {
            let l = loads(&with(around(&format!(
                r#"<serviceTask id="t" {binding}/>"#
            ))));
            assert_eq!(
                task_t(&l).kind,
                TaskKind::Pull {
                    topic: "pay".into(),
                    retries: None
                },
                "{ns} {binding}"
            );
        }
        refused(
            &with(around(
                r#"<userTask id="t"><extensionElements>¶<act:taskListener event="create" class="X"/></extensionElements></userTask>"#,
            )),
            "Q401",
        );
        // What Camunda ignores (an assignee), Activiti's spelling of it loads too.
        loads(&with(around(r#"<userTask id="t" act:assignee="kermit"/>"#)));
        // An external task in the Activiti spelling is a pull task, as Camunda's is.
        let l = loads(&with(around(
            r#"<serviceTask id="t" act:type="external" act:topic="charge"/>"#,
        )));
        let p = &l.definitions[0].process;
        let t = p.node(p.find("t").unwrap());
        assert!(
            matches!(&t.kind, NodeKind::Task(Task { kind: TaskKind::Pull { topic, .. }, .. }) if topic == "charge"),
            "{ns}"
        );
    }
}

#[test]
fn a_sequence_flow_without_an_id_gets_a_stable_derived_one() {
    let xml = process(
        r#"<startEvent id="start"/>
<sequenceFlow sourceRef="start" targetRef="fork"/>
<parallelGateway id="fork"/>
<sequenceFlow sourceRef="fork" targetRef="join"/>
<sequenceFlow sourceRef="fork" targetRef="join"/>
<parallelGateway id="join"/>
<sequenceFlow id="out" sourceRef="join" targetRef="end"/>
<endEvent id="end"/>"#,
    );
    let l = loads(&xml);
    let ids: Vec<&str> = l.definitions[0]
        .process
        .flows
        .iter()
        .map(|f| f.id.as_str())
        .collect();
    assert_eq!(
        ids,
        vec![
            "flow:start->fork",
            "flow:fork->join",
            "flow:fork->join#2",
            "out"
        ]
    );
    let warned: Vec<&str> = l.warnings.iter().map(|w| w.code).collect();
    assert_eq!(warned, vec!["Q904", "Q904", "Q904"]);
    // Loading again gives the same ids.
    let again = loads(&xml);
    let ids_again: Vec<&str> = again.definitions[0]
        .process
        .flows
        .iter()
        .map(|f| f.id.as_str())
        .collect();
    assert_eq!(ids, ids_again);
}

// ---------------------------------------------------------------- user-task assignment (L8)

/// The assignment of user task `t` of a model that must load.
fn assignment_of(xml: &str) -> Assignment {
    let l = loads(xml);
    match &task(only(&l), "t").kind {
        TaskKind::User { assignment } => (**assignment).clone(),
        other => panic!("`t` is not a user task: {other:?}"),
    }
}

/// The names of static sources, and `=<cel>` for expressions.
fn shown(sources: &[NameSource]) -> Vec<String> {
    sources
        .iter()
        .map(|s| match s {
            NameSource::Static(n) => n.clone(),
            NameSource::Expression(e) => format!("={}", e.source()),
        })
        .collect()
}

fn zeebe_user_task(attrs: &str) -> String {
    around(&format!(
        r#"<userTask id="t"><extensionElements><zeebe:assignmentDefinition {attrs}/></extensionElements></userTask>"#
    ))
}

#[test]
fn camunda_static_assignment_loads() {
    let a = assignment_of(&around(
        r#"<userTask id="t" camunda:assignee="kermit" camunda:candidateGroups="sales, management" camunda:candidateUsers="fozzie,gonzo"/>"#,
    ));
    assert_eq!(shown(a.assignee.as_slice()), vec!["kermit"]);
    assert_eq!(shown(&a.candidate_groups), vec!["sales", "management"]);
    assert_eq!(shown(&a.candidate_users), vec!["fozzie", "gonzo"]);
}

#[test]
fn camunda_expressions_become_cel() {
    let a = assignment_of(&around(
        r##"<userTask id="t" camunda:assignee="${initiator}" camunda:candidateGroups="${order.team}, sales" camunda:candidateUsers="#{reviewers}"/>"##,
    ));
    assert_eq!(shown(a.assignee.as_slice()), vec!["=initiator"]);
    assert_eq!(shown(&a.candidate_groups), vec!["=order.team", "sales"]);
    assert_eq!(shown(&a.candidate_users), vec!["=reviewers"]);
}

#[test]
fn activiti_and_flowable_assignments_read_as_camunda() {
    for ns in ["http://activiti.org/bpmn", "http://flowable.org/bpmn"] {
        let xml = around(r#"<userTask id="t" v:assignee="kermit" v:candidateGroups="sales"/>"#)
            .replace("<definitions ", &format!("<definitions xmlns:v=\"{ns}\" "));
        let a = assignment_of(&xml);
        assert_eq!(shown(a.assignee.as_slice()), vec!["kermit"], "{ns}");
        assert_eq!(shown(&a.candidate_groups), vec!["sales"], "{ns}");
    }
}

#[test]
fn zeebe_static_assignment_loads() {
    let a = assignment_of(&zeebe_user_task(
        r#"assignee="demo" candidateGroups="sales, operations" candidateUsers="ann""#,
    ));
    assert_eq!(shown(a.assignee.as_slice()), vec!["demo"]);
    assert_eq!(shown(&a.candidate_groups), vec!["sales", "operations"]);
    assert_eq!(shown(&a.candidate_users), vec!["ann"]);
}

#[test]
fn zeebe_feel_expressions_become_cel() {
    let a = assignment_of(&zeebe_user_task(
        r#"assignee="= book.author" candidateGroups="=reviewerGroups""#,
    ));
    assert_eq!(shown(a.assignee.as_slice()), vec!["=book.author"]);
    assert_eq!(shown(&a.candidate_groups), vec!["=reviewerGroups"]);
    assert!(a.candidate_users.is_empty());
}

#[test]
fn empty_assignment_values_name_nobody() {
    let a = assignment_of(&around(
        r#"<userTask id="t" camunda:assignee=" " camunda:candidateGroups=""/>"#,
    ));
    assert!(a.is_empty());
}

#[test]
fn q210_camunda_method_call() {
    let d = refused(
        &around(r#"<userTask id="t" ¶camunda:assignee="${userService.manager(initiator)}"/>"#),
        "Q210",
    );
    assert!(d.message.contains("assignee"), "{}", d.message);
}

#[test]
fn q210_camunda_composite_expression() {
    refused(
        &around(r#"<userTask id="t" ¶camunda:candidateUsers="kermit, user-${id}"/>"#),
        "Q210",
    );
}

#[test]
fn q210_zeebe_function_call() {
    refused(
        &around(
            r#"<userTask id="t"><extensionElements><zeebe:assignmentDefinition ¶candidateUsers="= remove(reviewers, book.author)"/></extensionElements></userTask>"#,
        ),
        "Q210",
    );
}

#[test]
fn q210_unclosed_expression_in_a_camunda_list() {
    refused(
        &around(r#"<userTask id="t" ¶camunda:candidateGroups="sales, ${team"/>"#),
        "Q210",
    );
}

#[test]
fn q211_name_over_the_bound() {
    let long = "n".repeat(ASSIGNMENT_NAME_CHARS_MAX + 1);
    refused(
        &around(&format!(r#"<userTask id="t" ¶camunda:assignee="{long}"/>"#)),
        "Q211",
    );
    // At the bound it loads.
    let ok = "n".repeat(ASSIGNMENT_NAME_CHARS_MAX);
    assignment_of(&around(&format!(
        r#"<userTask id="t" camunda:assignee="{ok}"/>"#
    )));
}

#[test]
fn q211_too_many_candidate_groups() {
    let groups: Vec<String> = (0..=CANDIDATES_MAX).map(|i| format!("g{i}")).collect();
    refused(
        &zeebe_user_task(&format!("¶candidateGroups=\"{}\"", groups.join(","))),
        "Q211",
    );
    let at_bound = groups[..CANDIDATES_MAX].join(",");
    let a = assignment_of(&zeebe_user_task(&format!("candidateGroups=\"{at_bound}\"")));
    assert_eq!(a.candidate_groups.len(), CANDIDATES_MAX);
}

#[test]
fn q211_empty_name_in_a_list() {
    refused(
        &around(r#"<userTask id="t" ¶camunda:candidateUsers="kermit,,gonzo"/>"#),
        "Q211",
    );
}

#[test]
fn q211_control_character_in_a_name() {
    refused(
        &around(r#"<userTask id="t" ¶camunda:assignee="ker&#x9;mit"/>"#),
        "Q211",
    );
}

#[test]
fn q211_assignee_given_twice() {
    refused(
        &around(
            r#"<userTask id="t" camunda:assignee="kermit"><extensionElements><zeebe:assignmentDefinition ¶assignee="demo"/></extensionElements></userTask>"#,
        ),
        "Q211",
    );
}

#[test]
fn q211_two_assignment_definitions() {
    refused(
        &around(
            r#"<userTask id="t"><extensionElements><zeebe:assignmentDefinition assignee="a"/>¶<zeebe:assignmentDefinition candidateGroups="b"/></extensionElements></userTask>"#,
        ),
        "Q211",
    );
}

// ---------------------------------------------------------------- link and escalation events

/// start → `t` (a pass-through) → link throw `x`; link catch `x` → end.
fn link_pair(throw_name: &str, catch_name: &str) -> String {
    process(&format!(
        r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="go"/>
<intermediateThrowEvent id="go"><linkEventDefinition {throw_name}/></intermediateThrowEvent>
<intermediateCatchEvent id="land"><linkEventDefinition {catch_name}/></intermediateCatchEvent>
<sequenceFlow id="f2" sourceRef="land" targetRef="end"/>
<endEvent id="end"/>"#
    ))
}

#[test]
fn link_pair_loads_and_the_throw_names_its_catch() {
    let l = loads(&link_pair(r#"name="x""#, r#"name="x""#));
    let d = only(&l);
    let go = d.process.node(d.process.find("go").unwrap());
    let land = d.process.find("land").unwrap();
    assert!(matches!(
        &go.kind,
        NodeKind::IntermediateThrow(ThrowTrigger::Link { name, target }) if name == "x" && *target == land
    ));
    assert!(!d.class.is_stateful());
}

#[test]
fn q121_link_throw_without_catch() {
    refused(&link_pair(r#"¶name="x""#, r#"name="y""#).replace(
        r#"<sequenceFlow id="f2""#,
        r#"<intermediateThrowEvent id="go2"><linkEventDefinition name="y"/></intermediateThrowEvent>
<sequenceFlow id="f0" sourceRef="start" targetRef="go2"/>
<sequenceFlow id="f2""#,
    ), "Q121");
}

#[test]
fn q122_two_link_catches_with_one_name() {
    refused(
        &link_pair(r#"name="x""#, r#"name="x""#).replace(
            r#"<endEvent id="end"/>"#,
            r#"<endEvent id="end"/>
<intermediateCatchEvent id="land2"><linkEventDefinition ¶name="x"/></intermediateCatchEvent>
<sequenceFlow id="f3" sourceRef="land2" targetRef="end"/>"#,
        ),
        "Q122",
    );
}

#[test]
fn q123_link_catch_with_incoming_flow() {
    refused(
        &link_pair(r#"name="x""#, r#"name="x""#)
            .replace(
                r#"<intermediateCatchEvent id="land">"#,
                r#"¶<intermediateCatchEvent id="land">"#,
            )
            .replace(
                r#"<endEvent id="end"/>"#,
                r#"<endEvent id="end"/>
<sequenceFlow id="f9" sourceRef="start" targetRef="land"/>"#,
            ),
        "Q123",
    );
}

#[test]
fn q123_link_throw_with_outgoing_flow() {
    refused(
        &link_pair(r#"name="x""#, r#"name="x""#)
            .replace(
                r#"<intermediateThrowEvent id="go">"#,
                r#"¶<intermediateThrowEvent id="go">"#,
            )
            .replace(
                r#"<endEvent id="end"/>"#,
                r#"<endEvent id="end"/>
<sequenceFlow id="f9" sourceRef="go" targetRef="end"/>"#,
            ),
        "Q123",
    );
}

#[test]
fn q124_link_across_scopes() {
    refused(
        &process(
            r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="sp"/>
<subProcess id="sp">
  <startEvent id="in"/>
  <sequenceFlow id="s1" sourceRef="in" targetRef="out"/>
  <intermediateThrowEvent id="out"><linkEventDefinition ¶name="x"/></intermediateThrowEvent>
</subProcess>
<sequenceFlow id="f2" sourceRef="sp" targetRef="go"/>
<intermediateThrowEvent id="go"><linkEventDefinition name="x"/></intermediateThrowEvent>
<intermediateCatchEvent id="land"><linkEventDefinition name="x"/></intermediateCatchEvent>
<sequenceFlow id="f3" sourceRef="land" targetRef="end"/>
<endEvent id="end"/>"#,
        ),
        "Q124",
    );
}

#[test]
fn link_without_name_is_q102() {
    refused(
        &link_pair(r#"name="x""#, r#"name="x""#).replace(
            r#"<intermediateThrowEvent id="go"><linkEventDefinition name="x"/>"#,
            r#"<intermediateThrowEvent id="go">¶<linkEventDefinition/>"#,
        ),
        "Q102",
    );
}

const ESCALATIONS: &str = r#"<escalation id="late" escalationCode="LATE"/>
<escalation id="vague"/>"#;

/// start → sub-process `sp` (start → `inner` → end) → end, with `boundary` on `sp`.
fn escalating(inner: &str, boundary: &str) -> String {
    file(
        ESCALATIONS,
        &format!(
            r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="sp"/>
<subProcess id="sp">
  <startEvent id="in"/>
  <sequenceFlow id="s1" sourceRef="in" targetRef="raise"/>
  {inner}
  <sequenceFlow id="s2" sourceRef="raise" targetRef="spEnd"/>
  <endEvent id="spEnd"/>
</subProcess>
{boundary}
<sequenceFlow id="f2" sourceRef="sp" targetRef="end"/>
<endEvent id="end"/>"#
        ),
    )
}

const RAISE_LATE: &str = r#"<intermediateThrowEvent id="raise"><escalationEventDefinition escalationRef="late"/></intermediateThrowEvent>"#;

#[test]
fn escalation_throw_end_and_boundaries_load() {
    let l = loads(&escalating(
        RAISE_LATE,
        r#"<boundaryEvent id="b" attachedToRef="sp" cancelActivity="false"><escalationEventDefinition escalationRef="late"/></boundaryEvent>
<boundaryEvent id="all" attachedToRef="sp"><escalationEventDefinition/></boundaryEvent>
<sequenceFlow id="f3" sourceRef="b" targetRef="end"/>
<sequenceFlow id="f4" sourceRef="all" targetRef="end"/>"#,
    ));
    let d = only(&l);
    let kind = |id: &str| &d.process.node(d.process.find(id).unwrap()).kind;
    assert!(matches!(
        kind("raise"),
        NodeKind::IntermediateThrow(ThrowTrigger::Escalation { code: Some(c) }) if c == "LATE"
    ));
    assert!(matches!(
        kind("b"),
        NodeKind::Boundary(Boundary { interrupting: false, trigger: BoundaryTrigger::Escalation { code: Some(c) }, .. }) if c == "LATE"
    ));
    // cancelActivity's schema default is true, for escalation boundaries as for all.
    assert!(matches!(
        kind("all"),
        NodeKind::Boundary(Boundary {
            interrupting: true,
            trigger: BoundaryTrigger::Escalation { code: None },
            ..
        })
    ));
    // A throw of an escalation without a code loads; only a catch-all catches it.
    loads(&escalating(
        r#"<intermediateThrowEvent id="raise"><escalationEventDefinition escalationRef="vague"/></intermediateThrowEvent>"#,
        "",
    ));
}

#[test]
fn q125_unknown_escalation_ref() {
    refused(
        &escalating(
            r#"<intermediateThrowEvent id="raise"><escalationEventDefinition ¶escalationRef="nope"/></intermediateThrowEvent>"#,
            "",
        ),
        "Q125",
    );
}

#[test]
fn q126_escalation_boundary_on_a_task_is_a_warning() {
    // Zeebe and Camunda 7 deploy it (the boundary never fires); so does qflow, and says so.
    let (pos, xml) = locate(&file(
        ESCALATIONS,
        r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
<task id="t"/>
<boundaryEvent id="b" ¶attachedToRef="t"><escalationEventDefinition/></boundaryEvent>
<sequenceFlow id="f2" sourceRef="t" targetRef="end"/>
<sequenceFlow id="f3" sourceRef="b" targetRef="end"/>
<endEvent id="end"/>"#,
    ));
    let l = loads(&xml);
    let w: Vec<&Diagnostic> = l.warnings.iter().filter(|d| d.code == "Q126").collect();
    assert_eq!(w.len(), 1, "{:?}", l.warnings);
    assert_eq!((w[0].severity, w[0].pos), (Severity::Warning, pos));
    assert!(w[0].message.contains("never fires"), "{}", w[0].message);
}

#[test]
fn a_business_rule_task_runs_as_a_job_or_a_delegate_and_dmn_is_refused() {
    let l = loads(&around(
        r#"<businessRuleTask id="t"><extensionElements><zeebe:taskDefinition type="score"/>
<zeebe:taskHeaders><zeebe:header key="rules" value="v2"/></zeebe:taskHeaders>
<zeebe:ioMapping><zeebe:output source="=result" target="score"/></zeebe:ioMapping>
</extensionElements></businessRuleTask>"#,
    ));
    let t = task_t(&l);
    assert_eq!(
        t.kind,
        TaskKind::Pull {
            topic: "score".into(),
            retries: None
        }
    );
    assert_eq!(t.mapping_style, MappingStyle::Zeebe);
    assert_eq!(t.headers, [("rules".to_owned(), "v2".to_owned())]);
    let l = loads(&around(
        r#"<businessRuleTask id="t" camunda:delegateExpression="${riskRules}"/>"#,
    ));
    assert_eq!(
        task_t(&l).kind,
        TaskKind::Pull {
            topic: "riskRules".into(),
            retries: None
        }
    );
    loads(&around(
        r#"<businessRuleTask id="t" camunda:type="external" camunda:topic="rules"/>"#,
    ));
    let d = refused(
        &around(r#"<businessRuleTask id="t" ¶camunda:decisionRef="risk"/>"#),
        "Q103",
    );
    assert!(d.message.contains("DMN"), "{}", d.message);
    refused(
        &around(
            r#"<businessRuleTask id="t"><extensionElements>¶<zeebe:calledDecision decisionId="risk" resultVariable="r"/></extensionElements></businessRuleTask>"#,
        ),
        "Q401",
    );
    refused(&around(r#"¶<businessRuleTask id="t"/>"#), "Q103");
}

#[test]
fn an_escalation_boundary_on_a_user_task_loads() {
    let body = r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
<userTask id="t"/>
<boundaryEvent id="b" attachedToRef="t" cancelActivity="false"><escalationEventDefinition/></boundaryEvent>
<sequenceFlow id="f2" sourceRef="t" targetRef="end"/>
<sequenceFlow id="f3" sourceRef="b" targetRef="end"/>
<endEvent id="end"/>"#;
    let loaded = loads(&file(ESCALATIONS, body));
    let p = &loaded.definitions[0].process;
    assert!(matches!(
        &p.node(p.find("b").unwrap()).kind,
        NodeKind::Boundary(Boundary {
            interrupting: false,
            trigger: BoundaryTrigger::Escalation { code: None },
            ..
        })
    ));
}

#[test]
fn escalation_boundary_on_an_escalation_without_code_is_q102() {
    refused(
        &escalating(
            RAISE_LATE,
            r#"<boundaryEvent id="b" attachedToRef="sp"><escalationEventDefinition ¶escalationRef="vague"/></boundaryEvent>
<sequenceFlow id="f3" sourceRef="b" targetRef="end"/>"#,
        ),
        "Q102",
    );
}

/// The timer of the catch event `w` in `start → w → end`.
fn catch_timer(timer: &str) -> String {
    process(&format!(
        r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="w"/>
<intermediateCatchEvent id="w"><timerEventDefinition>{timer}</timerEventDefinition></intermediateCatchEvent>
<sequenceFlow id="f2" sourceRef="w" targetRef="end"/>
<endEvent id="end"/>"#
    ))
}

#[test]
fn timers_computed_by_feel_or_juel_load_as_expressions() {
    for (timer, kind, source) in [
        (
            "<timeDuration>=cooloff</timeDuration>",
            TimeKind::Duration,
            "cooloff",
        ),
        (
            "<timeDate>${follow_up.at}</timeDate>",
            TimeKind::Date,
            "follow_up.at",
        ),
        (
            "<timeCycle>=reminders</timeCycle>",
            TimeKind::Cycle,
            "reminders",
        ),
    ] {
        let l = loads(&catch_timer(timer));
        let d = only(&l);
        match &d.process.node(d.process.find("w").unwrap()).kind {
            NodeKind::IntermediateCatch(CatchTrigger::Timer(TimerDef::Computed {
                kind: k,
                expression,
            })) => {
                assert_eq!(*k, kind, "{timer}");
                assert_eq!(expression.source(), source, "{timer}");
            }
            other => panic!("{timer}: {other:?}"),
        }
    }
}

#[test]
fn q203_timer_expression_beyond_the_subset() {
    let d = refused(
        &catch_timer(r#"<timeDuration>¶=duration("PT1H") * 2</timeDuration>"#),
        "Q203",
    );
    assert!(d.message.contains("timer expression"), "{}", d.message);
}

#[test]
fn message_throw_and_end_events_load() {
    let body = r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="tell"/>
<intermediateThrowEvent id="tell"><messageEventDefinition messageRef="m"/></intermediateThrowEvent>
<sequenceFlow id="f2" sourceRef="tell" targetRef="bye"/>
<endEvent id="bye"><messageEventDefinition messageRef="m"/></endEvent>"#;
    let loaded = loads(&file(r#"<message id="m" name="order-placed"/>"#, body));
    let p = &loaded.definitions[0].process;
    let kind = |id: &str| &p.node(p.find(id).unwrap()).kind;
    assert!(
        matches!(kind("tell"), NodeKind::IntermediateThrow(ThrowTrigger::Message { name }) if name == "order-placed")
    );
    assert!(
        matches!(kind("bye"), NodeKind::EndEvent(EndKind::Message { name }) if name == "order-placed")
    );
    assert!(loaded.definitions[0].class.is_stateful());
}

#[test]
fn q102_message_catch_without_a_message_ref() {
    refused(
        &around(
            r#"<intermediateCatchEvent id="t">¶<messageEventDefinition/></intermediateCatchEvent>"#,
        ),
        "Q102",
    );
}

// ---------------------------------------------------------------- event sub-processes

const ESP_DECLS: &str = r#"<message id="msg" name="order-cancelled"/>
<signal id="sig" name="price-changed"/>
<error id="err" errorCode="OUT_OF_STOCK"/>
<error id="codeless"/>
<escalation id="esc" escalationCode="LATE"/>"#;

/// start → user task `t` → end, beside the event sub-process `esp`.
fn with_esp(esp: &str) -> String {
    file(
        ESP_DECLS,
        &format!(
            r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
<userTask id="t"/>
<sequenceFlow id="f2" sourceRef="t" targetRef="end"/>
<endEvent id="end"/>
{esp}"#
        ),
    )
}

/// An event sub-process `esp` whose start event `es` has `start_inner` and `start_attrs`.
fn esp(start_attrs: &str, start_inner: &str) -> String {
    format!(
        r#"<subProcess id="esp" triggeredByEvent="true">
  <startEvent id="es"{start_attrs}>{start_inner}</startEvent>
  <sequenceFlow id="e1" sourceRef="es" targetRef="handle"/>
  <serviceTask id="handle" q:task="handle"/>
  <sequenceFlow id="e2" sourceRef="handle" targetRef="handled"/>
  <endEvent id="handled"/>
</subProcess>"#
    )
}

#[test]
fn event_sub_processes_load_with_every_trigger() {
    let triggers = [
        ("", r#"<messageEventDefinition messageRef="msg"/>"#),
        (
            r#" isInterrupting="false""#,
            r#"<signalEventDefinition signalRef="sig"/>"#,
        ),
        (
            "",
            r#"<timerEventDefinition><timeDuration>PT5M</timeDuration></timerEventDefinition>"#,
        ),
        (
            r#" isInterrupting="false""#,
            r#"<timerEventDefinition><timeCycle>R3/PT1M</timeCycle></timerEventDefinition>"#,
        ),
        ("", r#"<errorEventDefinition errorRef="err"/>"#),
        ("", "<errorEventDefinition/>"),
        (
            r#" isInterrupting="false""#,
            r#"<escalationEventDefinition escalationRef="esc"/>"#,
        ),
    ];
    for (attrs, inner) in triggers {
        let l = loads(&with_esp(&esp(attrs, inner)));
        let d = only(&l);
        let p = &d.process;
        let (node, start) = (p.find("esp").unwrap(), p.find("es").unwrap());
        assert_eq!(
            p.event_sub_processes,
            vec![EventSubProcess {
                node,
                start,
                interrupting: attrs.is_empty(),
            }],
            "{inner}"
        );
        assert!(matches!(p.node(node).kind, NodeKind::SubProcess));
        assert_eq!(p.node(start).scope, Some(node));
        assert_eq!(p.event_start(start).map(|e| e.node), Some(node));
        assert_eq!(p.event_sub_processes_in(None).count(), 1);
        // Not a start of the instance: runtimes look for those in `triggered_starts`.
        assert_eq!(p.triggered_starts().count(), 0, "{inner}");
        assert_eq!(p.message_start("order-cancelled"), None);
        assert_eq!(d.waits_for_signals, inner.contains("signal"));
    }
    let l = loads(&with_esp(&esp(
        "",
        r#"<errorEventDefinition errorRef="err"/>"#,
    )));
    let p = &only(&l).process;
    assert!(matches!(
        p.start_trigger(p.find("es").unwrap()),
        Some(StartTrigger::Error { code: Some(c) }) if c == "OUT_OF_STOCK"
    ));
}

#[test]
fn an_event_sub_process_in_an_embedded_sub_process_and_a_computed_timer_load() {
    let body = r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="sub"/>
<subProcess id="sub">
  <startEvent id="s0"/>
  <sequenceFlow id="g1" sourceRef="s0" targetRef="work"/>
  <userTask id="work"/>
  <sequenceFlow id="g2" sourceRef="work" targetRef="e0"/>
  <endEvent id="e0"/>
  <subProcess id="esp" triggeredByEvent="true">
    <startEvent id="es"><timerEventDefinition><timeDuration>=reminder</timeDuration></timerEventDefinition></startEvent>
    <sequenceFlow id="h1" sourceRef="es" targetRef="he"/>
    <endEvent id="he"/>
  </subProcess>
</subProcess>
<sequenceFlow id="f2" sourceRef="sub" targetRef="end"/>
<endEvent id="end"/>"#;
    let l = loads(&process(body));
    let d = only(&l);
    let p = &d.process;
    let sub = p.find("sub").unwrap();
    assert_eq!(p.node(p.find("esp").unwrap()).scope, Some(sub));
    assert_eq!(p.event_sub_processes_in(Some(sub)).count(), 1);
    assert_eq!(p.event_sub_processes_in(None).count(), 0);
    match &d.class {
        Classification::Stateful { reasons } => assert!(
            reasons
                .iter()
                .any(|r| r.contains("event sub-process timer start")),
            "{reasons:?}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn q128_an_event_sub_process_without_a_start_event() {
    refused(
        &with_esp(
            r#"¶<subProcess id="esp" triggeredByEvent="true">
  <serviceTask id="handle" q:task="handle"/>
  <sequenceFlow id="e2" sourceRef="handle" targetRef="handled"/>
  <endEvent id="handled"/>
</subProcess>"#,
        ),
        "Q128",
    );
}

#[test]
fn q128_an_event_sub_process_with_a_none_start_event() {
    refused(
        &with_esp(&esp("", "").replace("<startEvent id=\"es\"", "¶<startEvent id=\"es\"")),
        "Q128",
    );
}

#[test]
fn q128_an_event_sub_process_with_two_start_events() {
    let body = r#"<subProcess id="esp" triggeredByEvent="true">
  <startEvent id="es"><messageEventDefinition messageRef="msg"/></startEvent>
  ¶<startEvent id="es2"><signalEventDefinition signalRef="sig"/></startEvent>
  <sequenceFlow id="e1" sourceRef="es" targetRef="handled"/>
  <sequenceFlow id="e3" sourceRef="es2" targetRef="handled"/>
  <endEvent id="handled"/>
</subProcess>"#;
    refused(&with_esp(body), "Q128");
}

#[test]
fn q129_a_sequence_flow_into_an_event_sub_process() {
    let body = r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
<userTask id="t"/>
<sequenceFlow id="f2" sourceRef="t" targetRef="end"/>
<endEvent id="end"/>
¶<sequenceFlow id="f3" sourceRef="t" targetRef="esp"/>
<subProcess id="esp" triggeredByEvent="true">
  <startEvent id="es"><messageEventDefinition messageRef="msg"/></startEvent>
  <sequenceFlow id="e1" sourceRef="es" targetRef="handled"/>
  <endEvent id="handled"/>
</subProcess>"#;
    refused(&file(ESP_DECLS, body), "Q129");
}

#[test]
fn q129_a_sequence_flow_out_of_an_event_sub_process() {
    let body = r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
<userTask id="t"/>
<sequenceFlow id="f2" sourceRef="t" targetRef="end"/>
<endEvent id="end"/>
<subProcess id="esp" triggeredByEvent="true">
  <startEvent id="es"><messageEventDefinition messageRef="msg"/></startEvent>
  <sequenceFlow id="e1" sourceRef="es" targetRef="handled"/>
  <endEvent id="handled"/>
</subProcess>
¶<sequenceFlow id="f3" sourceRef="esp" targetRef="end"/>"#;
    refused(&file(ESP_DECLS, body), "Q129");
}

#[test]
fn q129_a_boundary_event_on_an_event_sub_process() {
    let marked = with_esp(&format!(
        r#"{}
<boundaryEvent id="b" ¶attachedToRef="esp"><timerEventDefinition><timeDuration>PT1M</timeDuration></timerEventDefinition></boundaryEvent>
<sequenceFlow id="f9" sourceRef="b" targetRef="end"/>"#,
        esp("", r#"<messageEventDefinition messageRef="msg"/>"#)
    ));
    refused(&marked, "Q129");
}

#[test]
fn q130_a_non_interrupting_error_start() {
    let marked = with_esp(&esp(
        r#" ¶isInterrupting="false""#,
        r#"<errorEventDefinition errorRef="err"/>"#,
    ));
    refused(&marked, "Q130");
}

#[test]
fn an_event_sub_process_start_with_a_codeless_error_or_an_unsupported_trigger_is_refused() {
    refused(
        &with_esp(&esp("", r#"<errorEventDefinition ¶errorRef="codeless"/>"#)),
        "Q102",
    );
    refused(&with_esp(&esp("", "¶<cancelEventDefinition/>")), "Q103");
    refused(
        &with_esp(&esp("", r#"<messageEventDefinition ¶messageRef="nope"/>"#)),
        "Q113",
    );
}

#[test]
fn an_error_or_escalation_start_outside_an_event_sub_process_is_still_refused() {
    refused(
        &file(
            ESP_DECLS,
            r#"<startEvent id="start">¶<errorEventDefinition errorRef="err"/></startEvent>
<sequenceFlow id="f1" sourceRef="start" targetRef="end"/>
<endEvent id="end"/>"#,
        ),
        "Q103",
    );
}

// ----- multi-instance (docs/multi-instance.md) -----

/// The multi-instance activity `t` of the one definition in `l`, with its inner node.
fn multi(l: &Loaded) -> (&Process, &MultiInstance) {
    let p = &l.definitions[0].process;
    let body = p.find("t").expect("t exists");
    (p, p.multi_instance(body).expect("t is multi-instance"))
}

#[test]
fn a_q_multi_instance_task_loads_as_a_body_with_one_inner_node() {
    let l = loads(&around(
        r#"<serviceTask id="t" q:task="work">
  <multiInstanceLoopCharacteristics isSequential="true" q:collection="items" q:elementVariable="item"
      q:outputCollection="out" q:outputElement="result">
    <completionCondition>numberOfCompletedInstances &gt;= 2</completionCondition>
  </multiInstanceLoopCharacteristics>
</serviceTask>"#,
    ));
    let (p, mi) = multi(&l);
    let body = p.find("t").unwrap();
    assert!(mi.sequential);
    assert!(matches!(mi.items, MultiItems::Collection(_)));
    assert_eq!(mi.element.as_deref(), Some("item"));
    assert_eq!(mi.output_collection.as_deref(), Some("out"));
    assert!(mi.output_element.is_some() && mi.completion.is_some());
    assert_eq!(mi.counter_base, 1);
    assert!(matches!(p.node(body).kind, NodeKind::SubProcess));
    let inner = p.node(mi.inner);
    assert_eq!((inner.id.as_str(), inner.scope), ("t", Some(body)));
    assert!(inner.incoming.is_empty() && inner.outgoing.is_empty());
    assert!(
        matches!(&inner.kind, NodeKind::Task(t) if matches!(t.kind, TaskKind::Registered { .. }))
    );
    // Inner instances are addressed as `t#<k>`, one spelling each.
    assert_eq!(p.find("t#3"), Some(mi.inner.with_instance(3)));
    assert_eq!(p.key(mi.inner.with_instance(3)), "t#3");
    for bad in ["t#0", "t#03", "t#", "t#-1", "t#x", "u#1"] {
        assert_eq!(p.find(bad), None, "{bad}");
    }
}

#[test]
fn zeebe_loop_characteristics_map_one_to_one() {
    let l = loads(&around(
        r#"<serviceTask id="t">
  <extensionElements><zeebe:taskDefinition type="work"/></extensionElements>
  <multiInstanceLoopCharacteristics>
    <extensionElements>
      <zeebe:loopCharacteristics inputCollection="= items" inputElement="item"
          outputCollection="results" outputElement="= result"/>
    </extensionElements>
    <completionCondition>= numberOfCompletedInstances &gt;= 1</completionCondition>
  </multiInstanceLoopCharacteristics>
</serviceTask>"#,
    ));
    let (_, mi) = multi(&l);
    assert!(!mi.sequential);
    assert_eq!(mi.element.as_deref(), Some("item"));
    assert_eq!(mi.output_collection.as_deref(), Some("results"));
    assert_eq!(mi.counter_base, 1);
}

#[test]
fn camunda_collection_and_element_variable_map_with_a_zero_based_counter() {
    for collection in ["${items}", "items"] {
        let l = loads(&around(&format!(
            r#"<userTask id="t">
  <multiInstanceLoopCharacteristics camunda:collection="{collection}" camunda:elementVariable="item"/>
</userTask>"#
        )));
        let (_, mi) = multi(&l);
        assert_eq!(mi.element.as_deref(), Some("item"));
        assert_eq!(mi.counter_base, 0);
    }
}

#[test]
fn a_sequential_multi_instance_sub_process_moves_its_children_into_the_inner_node() {
    let l = loads(&around(
        r#"<subProcess id="t">
  <multiInstanceLoopCharacteristics isSequential="true"><loopCardinality>3</loopCardinality></multiInstanceLoopCharacteristics>
  <startEvent id="s1"/><sequenceFlow id="g1" sourceRef="s1" targetRef="e1"/><endEvent id="e1"/>
</subProcess>"#,
    ));
    let (p, mi) = multi(&l);
    let s1 = p.find("s1").unwrap();
    assert_eq!(p.node(s1).scope, Some(mi.inner));
    assert!(matches!(mi.items, MultiItems::Cardinality(_)));
}

#[test]
fn a_camunda_collection_may_stand_beside_a_loop_cardinality() {
    let l = loads(&around(
        r#"<userTask id="t">
  <multiInstanceLoopCharacteristics camunda:collection="${items}" camunda:elementVariable="item"><loopCardinality>${n}</loopCardinality></multiInstanceLoopCharacteristics>
</userTask>"#,
    ));
    let (_, mi) = multi(&l);
    assert!(
        matches!(mi.items, MultiItems::Indexed { .. }),
        "{:?}",
        mi.items
    );
    assert_eq!(mi.element.as_deref(), Some("item"));
}

#[test]
fn q131_neither_or_both_counts() {
    refused(
        &around(r#"<task id="t">¶<multiInstanceLoopCharacteristics isSequential="true"/></task>"#),
        "Q131",
    );
    refused(
        &around(
            r#"<task id="t"><multiInstanceLoopCharacteristics ¶q:collection="items"><loopCardinality>2</loopCardinality></multiInstanceLoopCharacteristics></task>"#,
        ),
        "Q131",
    );
}

#[test]
fn a_parallel_multi_instance_sub_process_loads_and_its_content_is_per_instance() {
    let l = loads(&around(
        r#"<subProcess id="t">
  <multiInstanceLoopCharacteristics q:collection="items"/>
  <startEvent id="s1"/><sequenceFlow id="g1" sourceRef="s1" targetRef="w"/>
  <userTask id="w"/><sequenceFlow id="g2" sourceRef="w" targetRef="e1"/><endEvent id="e1"/>
</subProcess>"#,
    ));
    let (p, mi) = multi(&l);
    let w = p.find("w").unwrap();
    assert!(p.is_instanced(w) && p.is_instanced(mi.inner));
    assert!(!p.is_instanced(p.find("t").unwrap()));
    assert_eq!(p.find("w#2"), Some(w.with_instance(2)));
    assert_eq!(
        p.body_of(w.with_instance(2)),
        None,
        "w is inside an instance, not one"
    );
    assert_eq!(p.inherit(mi.inner.with_instance(2), w), w.with_instance(2));
    // Outside a multi-instance sub-process a `#` name is nothing.
    assert_eq!(p.find("start#2"), None);
}

#[test]
fn q132_what_a_multi_instance_sub_process_cannot_hold() {
    for inside in [
        r#"<task id="x">¶<multiInstanceLoopCharacteristics q:collection="more"/></task>"#,
        r#"¶<subProcess id="x" triggeredByEvent="true"><startEvent id="xs"><signalEventDefinition signalRef="sig"/></startEvent></subProcess>"#,
        r#"¶<inclusiveGateway id="x"/>"#,
    ] {
        let xml = file(
            r#"<signal id="sig" name="halt"/>"#,
            &format!(
                r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
<subProcess id="t">
  <multiInstanceLoopCharacteristics q:collection="items"/>
  <startEvent id="s1"/><sequenceFlow id="g1" sourceRef="s1" targetRef="e1"/><endEvent id="e1"/>
  {inside}
</subProcess>
<sequenceFlow id="f2" sourceRef="t" targetRef="end"/>
<endEvent id="end"/>"#
            ),
        );
        let (pos, clean) = locate(&xml);
        let d = load_str(&clean).unwrap_err();
        assert!(
            d.iter().any(|d| d.code == "Q132" && d.pos == pos),
            "{inside}: {:?}",
            errors(&d)
        );
    }
}

#[test]
fn q132_data_associations_and_complex_behaviour() {
    for child in [
        "<loopDataInputRef>items</loopDataInputRef>",
        "<inputDataItem id=\"i\"/>",
        "<complexBehaviorDefinition/>",
    ] {
        refused(
            &around(&format!(
                r#"<task id="t"><multiInstanceLoopCharacteristics q:collection="items">¶{child}</multiInstanceLoopCharacteristics></task>"#
            )),
            "Q132",
        );
    }
    refused(
        &around(
            r#"<task id="t"><multiInstanceLoopCharacteristics q:collection="items" ¶behavior="One"/></task>"#,
        ),
        "Q132",
    );
}

#[test]
fn q132_forms_without_one_meaning() {
    // A Zeebe collection without `=` is a string to Zeebe.
    refused(
        &around(
            r#"<task id="t"><multiInstanceLoopCharacteristics><extensionElements><zeebe:loopCharacteristics ¶inputCollection="items"/></extensionElements></multiInstanceLoopCharacteristics></task>"#,
        ),
        "Q132",
    );
    // An element without a collection, an output element without an output collection.
    refused(
        &around(
            r#"<task id="t"><multiInstanceLoopCharacteristics ¶q:elementVariable="x"><loopCardinality>2</loopCardinality></multiInstanceLoopCharacteristics></task>"#,
        ),
        "Q132",
    );
    refused(
        &around(
            r#"<task id="t"><multiInstanceLoopCharacteristics q:collection="items" ¶q:outputElement="x"/></task>"#,
        ),
        "Q132",
    );
    // An attribute qflow does not know.
    refused(
        &around(
            r#"<task id="t"><multiInstanceLoopCharacteristics q:collection="items" ¶q:parallelism="2"/></task>"#,
        ),
        "Q132",
    );
}

#[test]
fn q208_a_multi_instance_variable_that_is_not_a_name() {
    refused(
        &around(
            r#"<task id="t"><multiInstanceLoopCharacteristics q:collection="items" ¶q:elementVariable="a.b"/></task>"#,
        ),
        "Q208",
    );
}

#[test]
fn multi_instance_expressions_outside_the_subsets_are_refused_where_they_are() {
    refused(
        &around(
            r#"<task id="t"><multiInstanceLoopCharacteristics ¶q:collection="items["/></task>"#,
        ),
        "Q201",
    );
    refused(
        &around(
            r#"<task id="t"><multiInstanceLoopCharacteristics><loopCardinality>¶=for x in y return x</loopCardinality></multiInstanceLoopCharacteristics></task>"#,
        ),
        "Q203",
    );
}

// ----- compensation (docs/compensation.md) -----

/// `book` (compensated by `unbook`, linked by `boundary` and `association`) → `undo`
/// (a compensation throw whose definition is `throw_def`) → end.
fn compensating(boundary: &str, handler: &str, association: &str, throw_def: &str) -> String {
    process(&format!(
        r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="book"/>
<serviceTask id="book" q:task="book"/>
{boundary}
{handler}
{association}
<sequenceFlow id="f2" sourceRef="book" targetRef="undo"/>
<intermediateThrowEvent id="undo">{throw_def}</intermediateThrowEvent>
<sequenceFlow id="f3" sourceRef="undo" targetRef="end"/>
<endEvent id="end"/>"#
    ))
}

const COMP_BOUNDARY: &str = r#"<boundaryEvent id="bookUndo" attachedToRef="book"><compensateEventDefinition/></boundaryEvent>"#;
const COMP_HANDLER: &str = r#"<serviceTask id="unbook" isForCompensation="true" q:task="unbook"/>"#;
const COMP_ASSOC: &str = r#"<association id="a1" sourceRef="bookUndo" targetRef="unbook"/>"#;

#[test]
fn a_compensation_boundary_links_its_activity_to_the_handler_its_association_names() {
    let l = loads(&compensating(
        COMP_BOUNDARY,
        COMP_HANDLER,
        COMP_ASSOC,
        r#"<compensateEventDefinition activityRef="book"/>"#,
    ));
    let p = &only(&l).process;
    let book = p.find("book").unwrap();
    let c = p.compensation(book).expect("book is compensable");
    assert_eq!(p.node(c.boundary).id, "bookUndo");
    assert_eq!(p.node(c.handler).id, "unbook");
    assert!(p.is_compensation_handler(c.handler));
    assert!(matches!(
        p.node(p.find("undo").unwrap()).kind,
        NodeKind::IntermediateThrow(ThrowTrigger::Compensation { activity: Some(a) }) if a == book
    ));
}

#[test]
fn a_compensation_end_event_without_activity_ref_compensates_the_whole_scope() {
    let xml = compensating(COMP_BOUNDARY, COMP_HANDLER, COMP_ASSOC, "").replace(
        r#"<intermediateThrowEvent id="undo"></intermediateThrowEvent>
<sequenceFlow id="f3" sourceRef="undo" targetRef="end"/>
<endEvent id="end"/>"#,
        r#"<endEvent id="undo"><compensateEventDefinition/></endEvent>"#,
    );
    let l = loads(&xml);
    let p = &only(&l).process;
    assert!(matches!(
        p.node(p.find("undo").unwrap()).kind,
        NodeKind::EndEvent(EndKind::Compensation { activity: None })
    ));
}

#[test]
fn a_compensation_boundary_without_an_association_is_q133() {
    refused(
        &compensating(
            r#"¶<boundaryEvent id="bookUndo" attachedToRef="book"><compensateEventDefinition/></boundaryEvent>"#,
            r#"<serviceTask id="unbook" isForCompensation="true" q:task="unbook"/>"#,
            "",
            "<compensateEventDefinition/>",
        )
        .replace(
            r#"<serviceTask id="unbook" isForCompensation="true" q:task="unbook"/>"#,
            "",
        ),
        "Q133",
    );
}

#[test]
fn a_handler_no_boundary_names_is_q133() {
    refused(
        &compensating(
            "",
            r#"¶<serviceTask id="unbook" isForCompensation="true" q:task="unbook"/>"#,
            "",
            "<compensateEventDefinition/>",
        ),
        "Q133",
    );
}

#[test]
fn an_association_to_a_task_not_marked_for_compensation_is_q133() {
    refused(
        &compensating(
            COMP_BOUNDARY,
            // An ordinary task on a path of its own: only the association is wrong.
            r#"<serviceTask id="unbook" q:task="unbook"/>
<sequenceFlow id="fx" sourceRef="unbook" targetRef="end"/>
<sequenceFlow id="fy" sourceRef="start" targetRef="unbook"/>"#,
            r#"¶<association id="a1" sourceRef="bookUndo" targetRef="unbook"/>"#,
            "<compensateEventDefinition/>",
        ),
        "Q133",
    );
}

#[test]
fn a_handler_with_flows_is_q133() {
    refused(
        &compensating(
            COMP_BOUNDARY,
            r#"¶<serviceTask id="unbook" isForCompensation="true" q:task="unbook"/><sequenceFlow id="fx" sourceRef="unbook" targetRef="end"/>"#,
            COMP_ASSOC,
            "<compensateEventDefinition/>",
        ),
        "Q133",
    );
}

#[test]
fn a_compensation_boundary_with_an_outgoing_flow_is_q133() {
    refused(
        &compensating(
            &format!(
                r#"{COMP_BOUNDARY}¶<sequenceFlow id="fx" sourceRef="bookUndo" targetRef="end"/>"#
            ),
            COMP_HANDLER,
            COMP_ASSOC,
            "<compensateEventDefinition/>",
        ),
        "Q133",
    );
}

#[test]
fn a_handler_in_another_scope_is_q133() {
    refused(
        &compensating(
            COMP_BOUNDARY,
            r#"<subProcess id="sp"><startEvent id="s0"/><sequenceFlow id="s1" sourceRef="s0" targetRef="e0"/><endEvent id="e0"/>¶<serviceTask id="unbook" isForCompensation="true" q:task="unbook"/></subProcess>"#,
            COMP_ASSOC,
            "<compensateEventDefinition/>",
        )
        .replace(
            r#"<sequenceFlow id="f2" sourceRef="book" targetRef="undo"/>"#,
            r#"<sequenceFlow id="f2" sourceRef="book" targetRef="sp"/><sequenceFlow id="f2b" sourceRef="sp" targetRef="undo"/>"#,
        ),
        "Q133",
    );
}

#[test]
fn wait_for_completion_false_is_q134() {
    refused(
        &compensating(
            COMP_BOUNDARY,
            COMP_HANDLER,
            COMP_ASSOC,
            r#"<compensateEventDefinition ¶waitForCompletion="false"/>"#,
        ),
        "Q134",
    );
}

#[test]
fn an_activity_ref_to_an_activity_without_compensation_is_q134() {
    refused(
        &compensating(
            COMP_BOUNDARY,
            COMP_HANDLER,
            COMP_ASSOC,
            r#"<compensateEventDefinition ¶activityRef="start"/>"#,
        ),
        "Q134",
    );
}

#[test]
fn a_compensation_start_or_catch_event_stays_q103() {
    let d = refused(
        &process(
            r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="w"/>
<intermediateCatchEvent id="w">¶<compensateEventDefinition/></intermediateCatchEvent>
<sequenceFlow id="f2" sourceRef="w" targetRef="end"/>
<endEvent id="end"/>"#,
        ),
        "Q103",
    );
    assert!(d.help.unwrap().contains("compensation boundary event"));
}

#[test]
fn compensation_inside_a_multi_instance_sub_process_is_q132() {
    refused(
        &process(
            r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="mi"/>
<subProcess id="mi">
  <multiInstanceLoopCharacteristics isSequential="true"><loopCardinality>2</loopCardinality></multiInstanceLoopCharacteristics>
  <startEvent id="s0"/>
  <sequenceFlow id="s1" sourceRef="s0" targetRef="book"/>
  <serviceTask id="book" q:task="book"/>
  <boundaryEvent id="bookUndo" attachedToRef="book">¶<compensateEventDefinition/></boundaryEvent>
  <serviceTask id="unbook" isForCompensation="true" q:task="unbook"/>
  <association id="a1" sourceRef="bookUndo" targetRef="unbook"/>
  <sequenceFlow id="s2" sourceRef="book" targetRef="e0"/>
  <endEvent id="e0"/>
</subProcess>
<sequenceFlow id="f2" sourceRef="mi" targetRef="end"/>
<endEvent id="end"/>"#,
        ),
        "Q132",
    );
}

#[test]
fn a_text_annotation_on_a_compensation_boundary_is_not_a_second_handler() {
    let l = loads(&compensating(
        COMP_BOUNDARY,
        COMP_HANDLER,
        r#"<association id="a1" sourceRef="bookUndo" targetRef="unbook"/>
<textAnnotation id="note"><text>refund within a day</text></textAnnotation>
<association id="a2" sourceRef="bookUndo" targetRef="note"/>"#,
        r#"<compensateEventDefinition activityRef="book"/>"#,
    ));
    let p = &only(&l).process;
    let c = p.compensation(p.find("book").unwrap()).unwrap();
    assert_eq!(p.node(c.handler).id, "unbook");
}

#[test]
fn an_association_from_a_compensation_boundary_to_an_annotation_only_is_q133() {
    refused(
        &compensating(
            COMP_BOUNDARY,
            "",
            r#"<textAnnotation id="note"><text>refund</text></textAnnotation>
¶<association id="a2" sourceRef="bookUndo" targetRef="note"/>"#,
            "<compensateEventDefinition/>",
        ),
        "Q133",
    );
}

// ---------------------------------------------------------------- ad-hoc sub-processes

/// start → ad-hoc sub-process `t` (its attributes `attrs`, its content `inner`) → end.
fn ad_hoc_model(attrs: &str, inner: &str) -> String {
    around(&format!(
        "<adHocSubProcess id=\"t\"{attrs}>\n{inner}\n</adHocSubProcess>"
    ))
}

const AD_HOC_ELEMENTS: &str = r#"<extensionElements><zeebe:adHoc activeElementsCollection="=toDo"/></extensionElements>
<task id="a"/>
<task id="b"/>
<sequenceFlow id="ab" sourceRef="a" targetRef="b2"/>
<task id="b2"/>"#;

#[test]
fn ad_hoc_sub_process_loads_with_zeebe_settings() {
    let l = loads(&ad_hoc_model(
        r#" cancelRemainingInstances="false" ordering="Parallel""#,
        &format!(
            "{AD_HOC_ELEMENTS}\n<completionCondition xsi:type=\"tFormalExpression\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\">=done = true</completionCondition>"
        ),
    ));
    let d = only(&l);
    assert!(
        l.warnings
            .iter()
            .all(|x| x.code != "Q905" && x.code != "Q106"),
        "a path ending inside an ad-hoc sub-process is no implicit end: {:?}",
        l.warnings
    );
    let t = d.process.find("t").unwrap();
    assert!(matches!(d.process.node(t).kind, NodeKind::SubProcess));
    let settings = d.process.ad_hoc(t).expect("an ad-hoc sub-process");
    assert_eq!(settings.active_elements.as_ref().unwrap().source(), "toDo");
    assert_eq!(
        settings.completion.as_ref().unwrap().source(),
        "done == true"
    );
    assert!(!settings.cancel_remaining);
    // What the collection may name: the elements without incoming flows.
    assert!(d.process.ad_hoc_element(t, "a").is_some());
    assert!(d.process.ad_hoc_element(t, "b").is_some());
    assert_eq!(d.process.ad_hoc_element(t, "b2"), None);
    assert_eq!(d.process.ad_hoc_element(t, "start"), None);
}

#[test]
fn ad_hoc_sub_process_defaults() {
    let l = loads(&ad_hoc_model("", "<task id=\"a\"/>"));
    let d = only(&l);
    let settings = d.process.ad_hoc(d.process.find("t").unwrap()).unwrap();
    assert!(settings.active_elements.is_none());
    assert!(settings.completion.is_none());
    assert!(
        settings.cancel_remaining,
        "cancelRemainingInstances defaults to true"
    );
    // An empty collection is no expression: Zeebe activates nothing.
    let l = loads(&ad_hoc_model(
        "",
        "<extensionElements><zeebe:adHoc activeElementsCollection=\"\"/></extensionElements><task id=\"a\"/>",
    ));
    let d = only(&l);
    assert!(d
        .process
        .ad_hoc(d.process.find("t").unwrap())
        .unwrap()
        .active_elements
        .is_none());
    // Zeebe input and output mappings on it are its locals, as on a sub-process.
    let l = loads(&ad_hoc_model(
        "",
        r#"<extensionElements><zeebe:ioMapping><zeebe:input source="=order.id" target="orderId"/><zeebe:output source="=orderId" target="handled"/></zeebe:ioMapping></extensionElements><task id="a"/>"#,
    ));
    let d = only(&l);
    assert!(d
        .process
        .sub_process_mappings(d.process.find("t").unwrap())
        .is_some());
}

#[test]
fn q135_ad_hoc_sub_process_refusals() {
    for (marked, why) in [
        (ad_hoc_model(" ¶ordering=\"Sequential\"", "<task id=\"a\"/>"), "Sequential"),
        (ad_hoc_model(" ¶ordering=\"Sometimes\"", "<task id=\"a\"/>"), "Sometimes"),
        (ad_hoc_model(" ¶cancelRemainingInstances=\"yes\"", "<task id=\"a\"/>"), "yes"),
        (
            ad_hoc_model("", "<extensionElements><zeebe:adHoc ¶activeElementsCollection=\"toDo\"/></extensionElements><task id=\"a\"/>"),
            "not an expression",
        ),
        (
            ad_hoc_model("", "<extensionElements><zeebe:adHoc activeElementsCollection=\"=toDo\" ¶outputCollection=\"results\"/></extensionElements><task id=\"a\"/>"),
            "outputCollection",
        ),
        (
            ad_hoc_model("", "<extensionElements>¶<zeebe:taskDefinition type=\"agent\"/></extensionElements><task id=\"a\"/>"),
            "job worker",
        ),
        (ad_hoc_model("", "¶<startEvent id=\"s\"/><task id=\"a\"/>"), "startEvent"),
        (ad_hoc_model("", "<task id=\"a\"/>¶<endEvent id=\"e\"/>"), "endEvent"),
    ] {
        let d = refused(&marked, "Q135");
        assert!(d.message.contains(why), "{why}: {}", d.message);
    }
    let d = refused(
        &around("¶<adHocSubProcess id=\"t\"></adHocSubProcess>"),
        "Q135",
    );
    assert!(d.message.contains("no element"), "{}", d.message);
}

#[test]
fn ad_hoc_completion_condition_outside_the_feel_subset_is_q203() {
    refused(
        &ad_hoc_model(
            "",
            "<task id=\"a\"/><completionCondition>¶=string length(x) &gt; 2</completionCondition>",
        ),
        "Q203",
    );
}

#[test]
fn q107_an_element_of_an_ad_hoc_sub_process_that_no_activatable_one_reaches() {
    // `b` only reaches itself: no collection can name it (it has an incoming flow)
    // and nothing activatable leads to it.
    refused(
        &ad_hoc_model(
            "",
            r#"<task id="a"/>
¶<task id="b"/>
<sequenceFlow id="bb" sourceRef="b" targetRef="b"/>"#,
        ),
        "Q107",
    );
}

// ---------------------------------------------------------------- conditional events

/// A user task `t` with a conditional boundary `b` whose definition is `def`.
fn conditional_boundary(def: &str) -> String {
    around(&format!(
        r#"<userTask id="t"/>
<boundaryEvent id="b" attachedToRef="t" cancelActivity="false">{def}</boundaryEvent>
<sequenceFlow id="f3" sourceRef="b" targetRef="end2"/>
<endEvent id="end2"/>"#
    ))
}

#[test]
fn a_conditional_boundary_loads_with_its_condition_and_filter() {
    let l = loads(&conditional_boundary(
        r#"<conditionalEventDefinition camunda:variableName="a, b" camunda:variableEvents="create">
  <condition>${a &gt; 1}</condition></conditionalEventDefinition>"#,
    ));
    let d = only(&l);
    let b = d.process.find("b").expect("b");
    assert_eq!(d.process.conditionals, [b]);
    let NodeKind::Boundary(Boundary {
        interrupting: false,
        trigger: BoundaryTrigger::Conditional(c),
        ..
    }) = &d.process.node(b).kind
    else {
        panic!("not a conditional boundary: {:?}", d.process.node(b).kind)
    };
    assert_eq!(c.variables, ["a", "b"]);
    assert!(c.on_create && !c.on_update);
    assert_eq!(c.condition.source(), "a > 1");
}

#[test]
fn a_zeebe_conditional_filter_is_read_from_the_event() {
    let l = loads(&conditional_boundary(
        r#"<extensionElements><zeebe:conditionalFilter variableNames="level" variableEvents="update"/></extensionElements>
<conditionalEventDefinition><condition>=level &gt; 5</condition></conditionalEventDefinition>"#,
    ));
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    let d = only(&l);
    let b = d.process.find("b").expect("b");
    let NodeKind::Boundary(Boundary {
        trigger: BoundaryTrigger::Conditional(c),
        ..
    }) = &d.process.node(b).kind
    else {
        panic!("not a conditional boundary")
    };
    assert_eq!(c.variables, ["level"]);
    assert!(!c.on_create && c.on_update);
}

#[test]
fn a_conditional_event_without_a_condition_is_refused() {
    refused(
        &conditional_boundary("¶<conditionalEventDefinition/>"),
        "Q102",
    );
}

#[test]
fn a_conditional_event_listening_only_for_deletions_is_refused() {
    refused(
        &conditional_boundary(
            r#"<conditionalEventDefinition ¶camunda:variableEvents="delete"><condition>${a}</condition></conditionalEventDefinition>"#,
        ),
        "Q103",
    );
}

#[test]
fn an_unknown_variable_event_is_refused() {
    refused(
        &conditional_boundary(
            r#"<conditionalEventDefinition ¶camunda:variableEvents="create, change"><condition>${a}</condition></conditionalEventDefinition>"#,
        ),
        "Q102",
    );
}

#[test]
fn a_conditional_event_in_a_foreign_language_is_refused() {
    refused(
        &conditional_boundary(
            r#"<conditionalEventDefinition><condition ¶language="javascript">a &gt; 1</condition></conditionalEventDefinition>"#,
        ),
        "Q202",
    );
}

#[test]
fn a_conditional_start_event_of_a_process_is_refused_with_the_reason() {
    let d = refused(
        &process(
            r#"<startEvent id="s">¶<conditionalEventDefinition><condition>${a}</condition></conditionalEventDefinition></startEvent>
<sequenceFlow id="f1" sourceRef="s" targetRef="e"/><endEvent id="e"/>"#,
        ),
        "Q103",
    );
    assert!(d.help.unwrap().contains("API call"));
}

#[test]
fn zeebe_execution_listeners_load_as_pull_tasks_on_the_tokens_path_with_a_note_each() {
    let l = loads(&around(
        r#"<serviceTask id="t"><extensionElements>
  <zeebe:taskDefinition type="work"/>
  <zeebe:executionListeners>
    <zeebe:executionListener eventType="start" type="audit" retries="5"/>
    <zeebe:executionListener eventType="end" type="notify"/>
  </zeebe:executionListeners>
</extensionElements></serviceTask>"#,
    ));
    let p = &only(&l).process;
    let topic = |id: &str| match &p.node(p.find(id).expect(id)).kind {
        NodeKind::Task(Task {
            kind: TaskKind::Pull { topic, retries },
            ..
        }) => (topic.clone(), *retries),
        other => panic!("{id}: {other:?}"),
    };
    assert_eq!(topic("t~start-1"), ("audit".to_owned(), Some(5)));
    assert_eq!(topic("t"), ("work".to_owned(), None));
    assert_eq!(topic("t~end-1"), ("notify".to_owned(), None));
    // The path: start → t~start-1 → t → t~end-1 → end.
    let next = |id: &str| -> Vec<String> {
        let n = p.node(p.find(id).unwrap());
        n.outgoing
            .iter()
            .map(|f| p.node(p.flow(*f).target).id.clone())
            .collect()
    };
    assert_eq!(next("start"), ["t~start-1"]);
    assert_eq!(next("t~start-1"), ["t"]);
    assert_eq!(next("t"), ["t~end-1"]);
    assert_eq!(next("t~end-1"), ["end"]);
    let notes: Vec<(u32, &str)> = l
        .warnings
        .iter()
        .filter(|d| d.code == "Q951")
        .map(|d| (d.pos.line, d.message.as_str()))
        .collect();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[0]
        .1
        .contains("`audit` runs as the pull task `t~start-1`, before `t`"));
    assert!(notes[1]
        .1
        .contains("`notify` runs as the pull task `t~end-1`, after `t`"));
    assert!(notes[0].0 < notes[1].0, "each note at its listener");
}

#[test]
fn a_refused_execution_listener_is_reported_at_the_listener() {
    let xml = around(
        r#"<serviceTask id="t"><extensionElements>
  <zeebe:taskDefinition type="work"/>
  <zeebe:executionListeners>
    <zeebe:executionListener eventType="start" type="=route"/>
    <zeebe:executionListener eventType="later" type="x"/>
  </zeebe:executionListeners>
</extensionElements></serviceTask>"#,
    );
    let d = load_str(&xml).unwrap_err();
    let q136: Vec<(u32, u32, &str)> = d
        .iter()
        .filter(|d| d.code == "Q136")
        .map(|d| (d.pos.line, d.pos.col, d.message.as_str()))
        .collect();
    let line_of = |needle: &str| xml.lines().position(|l| l.contains(needle)).unwrap() as u32 + 1;
    let col_of = |needle: &str, attr: &str| {
        let l = xml.lines().find(|l| l.contains(needle)).unwrap();
        l.find(attr).unwrap() as u32 + 1
    };
    assert_eq!(
        q136,
        [
            (
                line_of("=route"),
                col_of("=route", "type="),
                "execution listener type `=route` is an expression"
            ),
            (
                line_of("later"),
                col_of("later", "eventType="),
                "execution listener eventType `later` is not supported"
            ),
        ]
    );
    assert!(d.iter().all(|d| d.code != "Q401"), "{d:?}");
}

fn listener_block(items: &[(&str, &str)]) -> String {
    let mut s = String::from("<zeebe:executionListeners>");
    for (event, ty) in items {
        s.push_str(&format!(
            r#"<zeebe:executionListener eventType="{event}" type="{ty}"/>"#
        ));
    }
    s + "</zeebe:executionListeners>"
}

fn errors_of(xml: &str) -> Vec<(&'static str, String)> {
    match load_str(xml) {
        Ok(_) => Vec::new(),
        Err(d) => d
            .into_iter()
            .filter(Diagnostic::is_error)
            .map(|d| (d.code, d.message))
            .collect(),
    }
}

#[test]
fn execution_listeners_in_two_blocks_are_one_list_and_a_sequence_flow_takes_none() {
    let two = around(&format!(
        r#"<task id="t"><extensionElements>{}{}</extensionElements></task>"#,
        listener_block(&[("start", "a")]),
        listener_block(&[("start", "b"), ("start", "a")])
    ));
    let errors = errors_of(&two);
    assert!(
        errors
            .iter()
            .any(|(c, m)| *c == "Q136" && m.contains("a second start listener")),
        "{errors:?}"
    );
    assert!(errors.iter().all(|(c, _)| *c != "Q401"), "{errors:?}");
    let flow = process(&format!(
        r#"<startEvent id="start"/>
<sequenceFlow id="f1" sourceRef="start" targetRef="end"><extensionElements>{}</extensionElements></sequenceFlow>
<endEvent id="end"/>"#,
        listener_block(&[("start", "a")])
    ));
    let errors = errors_of(&flow);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "Q136");
    assert!(errors[0].1.contains("sequence flow `f1`"), "{errors:?}");
}

#[test]
fn a_non_executable_process_s_listeners_are_not_read() {
    let xml = format!(
        r#"{HEAD}
<process id="side" isExecutable="false">
  <startEvent id="s2"/><sequenceFlow id="g" sourceRef="s2" targetRef="e2"/>
  <endEvent id="e2"><extensionElements>{}</extensionElements></endEvent>
</process>
<process id="p" isExecutable="true">
  <startEvent id="start"/><sequenceFlow id="f1" sourceRef="start" targetRef="end"/><endEvent id="end"/>
</process>
</definitions>"#,
        listener_block(&[("end", "x")])
    );
    let l = loads(&xml);
    assert!(
        l.warnings.iter().all(|d| d.code != "Q951"),
        "{:?}",
        l.warnings
    );
}

#[test]
fn an_id_holding_the_mark_is_refused_in_every_file() {
    let errors = errors_of(
        &around(r#"<task id="t~end-1"/>"#)
            .replace(r#"targetRef="t""#, r#"targetRef="t~end-1""#)
            .replace(r#"sourceRef="t""#, r#"sourceRef="t~end-1""#),
    );
    assert!(
        errors
            .iter()
            .any(|(c, m)| *c == "Q137" && m.contains("`t~end-1`")),
        "{errors:?}"
    );
}

#[test]
fn listener_bounds_are_refused_not_built() {
    let many: Vec<(String, String)> = (0..33).map(|i| ("start".into(), format!("t{i}"))).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let errors = errors_of(&around(&format!(
        r#"<task id="t"><extensionElements>{}</extensionElements></task>"#,
        listener_block(&many)
    )));
    assert!(
        errors
            .iter()
            .any(|(c, m)| *c == "Q136" && m.contains("33 execution listeners")),
        "{errors:?}"
    );
    // 30 listeners × (400 inputs + the mapping element) passes 10,000 copies.
    let inputs: String = (0..400)
        .map(|i| format!(r#"<zeebe:input source="=a" target="v{i}"/>"#))
        .collect();
    let thirty: Vec<(String, String)> =
        (0..30).map(|i| ("start".into(), format!("t{i}"))).collect();
    let thirty: Vec<(&str, &str)> = thirty
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let errors = errors_of(&around(&format!(
        r#"<serviceTask id="t"><extensionElements><zeebe:taskDefinition type="w"/><zeebe:ioMapping>{inputs}</zeebe:ioMapping>{}</extensionElements></serviceTask>"#,
        listener_block(&thirty)
    )));
    assert!(
        errors
            .iter()
            .any(|(c, m)| *c == "Q136" && m.contains("more than 10000")),
        "{errors:?}"
    );
}
