//! The table of every diagnostic code the loader can emit, with a one-line summary.
//!
//! Codes are stable: once published, a code keeps its meaning forever (tests, docs and
//! users' CI filters refer to them). New rules get new codes; a retired rule's code is
//! never reused. `docs/diagnostics.md` documents each code with an example fix.

/// Every rule code and its one-line summary, in code order.
pub fn rules() -> &'static [(&'static str, &'static str)] {
    RULES
}

const RULES: &[(&str, &str)] = &[
    ("Q001", "the input is not well-formed XML (includes truncated input)"),
    ("Q002", "a DOCTYPE, DTD or entity declaration is present; they are refused, never expanded"),
    ("Q003", "the input exceeds the size limit"),
    ("Q004", "elements nest deeper than the depth limit, or the file has too many elements or attributes"),
    ("Q005", "the input is not valid UTF-8"),
    ("Q006", "the document is not a BPMN 2.0 `definitions` document"),
    ("Q007", "the file contains no process with flow nodes"),
    ("Q008", "the input contains a character XML does not allow (a control character other than tab, line feed and carriage return), raw or as a character reference"),
    ("Q101", "two elements share one id"),
    ("Q102", "a required attribute or child element is missing or empty"),
    ("Q103", "an executable BPMN element outside the supported subset"),
    ("Q104", "a sequence flow references a node that does not exist"),
    ("Q105", "a sequence flow connects nodes in different scopes (sub-processes)"),
    ("Q106", "a process or sub-process has no none start event"),
    ("Q107", "a node cannot be reached from any start event"),
    ("Q108", "a gateway has no outgoing sequence flow (dead end); before 2026-12 also any other node, which is now an implicit end (Q905)"),
    ("Q109", "a gateway's default flow is invalid (more than one, or not one of its outgoing flows)"),
    ("Q110", "a default flow on a node that is not an exclusive or inclusive gateway"),
    ("Q111", "a boundary event is attached to a missing node or to a node that is not an activity"),
    ("Q112", "an errorRef names no declared error"),
    ("Q113", "a messageRef names no declared message"),
    ("Q114", "a serviceTask does not say how it runs (q:task, q:channel or q:topic), or is bound to Java code no topic can be derived from"),
    ("Q115", "a serviceTask names more than one way to run"),
    ("Q116", "a start event has incoming flows, or an end event has outgoing flows"),
    ("Q117", "a callActivity has no calledElement"),
    ("Q118", "an event-based gateway leads to something other than a catch event or receive task"),
    ("Q119", "a condition on a sequence flow that does not leave an exclusive or inclusive gateway"),
    ("Q120", "an event has more than one event definition"),
    ("Q121", "a link throw event names a link no link catch event of its scope has"),
    ("Q122", "two link catch events of one scope share a link name"),
    ("Q123", "a link catch event has incoming sequence flows, or a link throw event has outgoing ones"),
    ("Q124", "a link throw event names a link whose catch event is in another scope (a link never crosses a sub-process boundary)"),
    ("Q125", "an escalationRef names no declared escalation"),
    ("Q126", "warning (an error before 2026-12): an escalation boundary event is attached to a task other than a user task or call activity, which can never throw an escalation, so it never fires"),
    ("Q127", "a signalRef names no declared <signal>"),
    ("Q128", "an event sub-process has no start event, more than one, or a start event without a trigger"),
    ("Q129", "a sequence flow enters or leaves an event sub-process, or a boundary event is attached to one"),
    ("Q130", "an error start event of an event sub-process is marked non-interrupting"),
    ("Q131", "a multi-instance activity has neither a loopCardinality nor an input collection, or both"),
    ("Q132", "a multi-instance form qflow does not run: on an element other than a task or embedded sub-process, a parallel multi-instance sub-process, a compensation event inside a multi-instance sub-process, data-association inputs and outputs (loopDataInputRef, inputDataItem, ...), complexBehaviorDefinition, a behavior other than All, an unknown attribute or extension, a Zeebe collection that is not an expression, an element or output element without its collection"),
    ("Q133", "a compensation boundary or handler of the wrong shape: a boundary with flows, with no association or several, naming a node that is not marked isForCompensation, a second compensation boundary on one activity; a handler no boundary names, named twice, not a task, with flows or boundary events, or outside its activity's scope"),
    ("Q134", "a compensation throw or end event qflow cannot run as written: waitForCompletion=\"false\", or an activityRef naming no activity with a compensation boundary in the scope the event compensates"),
    ("Q135", "an ad-hoc sub-process qflow cannot run as written: a start or end event inside it, no element, ordering=\"Sequential\", the job-worker implementation (zeebe:taskDefinition), Zeebe's outputCollection/outputElement, an activeElementsCollection that is not a FEEL expression, an unknown zeebe:adHoc attribute or attribute value"),
    ("Q136", "a Zeebe execution listener qflow cannot run as written: Zeebe's own refusals (a start listener on a start or boundary event, an end listener on a gateway or error end event, one on a compensation boundary, two listeners of one eventType and type), a type or retries that is no literal, and placements qflow has no token path for (a process's listeners, an end event's end listener, a multi-instance activity, an event sub-process, a compensation handler, inside an ad-hoc sub-process, a link throw's end listener)"),
    ("Q137", "an element or sequence flow id holds `~`, which no XML id (an NCName) may hold; qflow names the tasks it adds beside an element with it"),
    ("Q201", "a condition or mapping expression does not compile (CEL)"),
    ("Q202", "a condition is written in an unsupported language (JUEL `${...}`, JavaScript, ...)"),
    ("Q203", "a Zeebe FEEL condition uses more than the supported comparison/boolean subset"),
    ("Q204", "an ISO-8601 duration does not parse"),
    ("Q205", "an ISO-8601 date-time does not parse"),
    ("Q206", "an ISO-8601 repeating interval (cycle) does not parse"),
    ("Q207", "a timer does not define exactly one of timeDuration, timeDate, timeCycle"),
    ("Q208", "an input/output mapping is invalid (missing or malformed target or source)"),
    ("Q209", "an expression's estimated cost at the documented input caps is far over the evaluation budget"),
    ("Q210", "a user task's assignee, candidate groups or candidate users is an expression outside the supported JUEL or FEEL subset"),
    ("Q211", "a user task's assignment is malformed or over a bound: an empty name, a name over 128 characters or with a control character, more than 32 candidate groups or users, or a part given twice"),
    ("Q301", "a q:retry attribute is missing a value or out of range"),
    ("Q302", "q:retry initialInterval is larger than maxInterval"),
    ("Q303", "nonRetryableCodes names a code that can never occur"),
    ("Q304", "q:retry on a pull task (q:topic): the pull surface has its own budget"),
    ("Q305", "a channel call has no timeout (q:timeout or a routed timer boundary)"),
    ("Q306", "a channel call has q:retry beside a routed timer boundary: the policy could never fire"),
    ("Q307", "a q: extension on an element that does not support it (e.g. q:retry on a user task)"),
    ("Q308", "q:retry or q:timeout appears more than once on one task"),
    ("Q309", "an unknown element or attribute in the q: namespace"),
    ("Q310", "q:respond is neither true nor false"),
    ("Q311", "q:respond on a task where no token waits (pass-through or send)"),
    ("Q312", "a message has two correlation keys (q:correlationKey and zeebe:subscription, or two declarations of one name)"),
    ("Q401", "a vendor (Camunda/Zeebe) construct whose meaning qflow cannot keep"),
    ("Q901", "warning: a process marked isExecutable=\"false\" was loaded because the file has no executable process"),
    ("Q902", "warning: a vendor extension was ignored"),
    ("Q903", "warning: a process without flow nodes was skipped"),
    ("Q904", "warning: a sequence flow without an id was given a derived one"),
    ("Q905", "warning: an activity or event has no outgoing sequence flow: its token ends there (implicit end, BPMN 2.0 §13.2)"),
    ("Q906", "warning: q:retry or q:timeout on a task bound to Java code, which apply only when [delegates] routes it to a handler"),
    ("Q907", "warning: two different Java bindings of one process derive the same pull topic, so one worker serves both"),
    ("Q908", "note: something the model says about how a task runs is not used because something else says it (a Java binding beside a way to run, the other engine's binding in a file that names its engine, a messageRef beside a worker)"),
    ("Q909", "warning: a message throw or end event names no message and no worker: it sends nothing and the token goes on (or ends), as Camunda 7 runs it"),
    ("Q950", "note: a service task bound to Java code (camunda:class, camunda:delegateExpression, camunda:expression) runs as a pull task; the note names its topic"),
    ("Q951", "note: a Zeebe execution listener runs as a pull task of its job type before or after its element; the note names the task"),
];

/// A generic "what to change" line for diagnostics raised where no specific advice exists
/// (mostly the XML layer), so that every error carries one.
pub(crate) fn default_help(code: &str) -> Option<&'static str> {
    Some(match code {
        "Q001" => "fix the XML at this position; a truncated file must be exported again",
        "Q002" => "remove the <!DOCTYPE ...> declaration",
        "Q003" => "split the file, or raise LoadOptions::max_bytes for a genuine model",
        "Q004" => "check what produced this file; real models are far below these limits",
        "Q005" => "save the file as UTF-8",
        "Q008" => {
            "remove the control character; XML allows none but tab, line feed and carriage return"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_sorted() {
        let codes: Vec<&str> = RULES.iter().map(|r| r.0).collect();
        let mut sorted = codes.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(codes, sorted);
    }
}
