//! Reading the scenario file format: the `Deserialize` impls of [`Scenario`], [`Scripted`]
//! and [`ScriptedEvent`], written by hand because the derived ones accept what the format
//! refuses (`docs/simulate.md`).
//!
//! What a derive would let through, and these refuse:
//! - a JSON array read positionally as a scenario or an outcome (derived structs accept
//!   sequences); every object of the format is read from a map and nothing else;
//! - duplicate keys, at every level and inside variable values (a derived map keeps the
//!   last one): refused while the key is read, so a path-tracking deserializer
//!   (`serde_path_to_error`) names the key itself;
//! - fields on an outcome or event kind that does not take them (`{"outcome": "hang",
//!   "after_ms": 5}`: a derived internally tagged unit variant ignores the rest);
//! - variables over the engine's bounds (`crate::limits`) where the step would refuse the
//!   input they come with (`Error::VariablesRefused`) — start variables, an event's
//!   `variables` or `input`, a channel answer's `outputs`: a scenario the engine cannot run
//!   is a bad file, refused with the path of the value, not a run that stops mid-way.
//! - recorded `inputs` beside a field they replace (`tasks`, `variables`, …): refused when
//!   the second of the two is read, at its path; a list of more inputs than a run takes
//!   steps ([`STEPS_LIMIT`]) is refused at the list while it is read, not kept in memory.
//!
//! And where a derived internally tagged enum buffers the whole object first (so that an
//! error can only name the object), these read every field straight from the input: a
//! wrong type names the innermost field (`tasks.pay[0].after_ms`) and its position.
//!
//! Field names follow the serialized form exactly, so a serialized scenario reads back.

use std::collections::BTreeMap;
use std::fmt;

use qflow_loader::model::Variables;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Number, Value};

use super::{
    beside_inputs, combined_with, RecordedInput, Scenario, Scripted, ScriptedAnswer, ScriptedEvent,
    RECORDED_EXCLUDES, STEPS_LIMIT,
};
use crate::delivery::DeliveryCurve;
use crate::limits::{self, VALUE_DEPTH_MAX};
use crate::{Budget, Input, TimerName};

const SCENARIO_FIELDS: &[&str] = &[
    "instance",
    "start_at_ms",
    "variables",
    "start_event",
    "tasks",
    "channels",
    "delivery_curves",
    "events",
    "inputs",
    "horizon_ms",
    "max_steps",
];

impl<'de> Deserialize<'de> for Scenario {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Scenario, D::Error> {
        d.deserialize_map(ScenarioVisitor)
    }
}

struct ScenarioVisitor;

impl<'de> Visitor<'de> for ScenarioVisitor {
    type Value = Scenario;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a scenario object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scenario, A::Error> {
        let mut s = Scenario::default();
        let mut seen = Vec::new();
        while let Some(field) = map.next_key_seed(Field::of(SCENARIO_FIELDS, &mut seen))? {
            // Recorded inputs say what these fields would: the one of the two that comes
            // second is refused, at its own path.
            if field == "inputs" {
                if let Some(given) = RECORDED_EXCLUDES.iter().find(|f| seen.contains(f)) {
                    match map.next_value_seed(Refuse(combined_with(given)))? {}
                }
            } else if RECORDED_EXCLUDES.contains(&field) && seen.contains(&"inputs") {
                let why = format!(
                    "`{field}` cannot be combined with recorded `inputs`: {}",
                    beside_inputs(field)
                );
                match map.next_value_seed(Refuse(why))? {}
            }
            match field {
                "instance" => s.instance = map.next_value()?,
                "start_at_ms" => s.start_at_ms = map.next_value()?,
                "variables" => s.variables = map.next_value_seed(Object::Input)?,
                "start_event" => s.start_event = Some(map.next_value::<String>()?),
                "tasks" => s.tasks = map.next_value_seed(Tasks)?,
                "channels" => s.channels = map.next_value_seed(Channels)?,
                "delivery_curves" => s.delivery_curves = map.next_value_seed(Curves)?,
                "events" => s.events = map.next_value()?,
                "inputs" => s.inputs = Some(map.next_value_seed(Recorded)?),
                "horizon_ms" => s.horizon_ms = map.next_value()?,
                "max_steps" => s.max_steps = map.next_value()?,
                _ => unreachable!("Field only yields names from SCENARIO_FIELDS"),
            }
        }
        Ok(s)
    }
}

/// A value refused whatever it is, with this message: the error is raised where the value
/// starts, so a path-tracking deserializer names its field.
struct Refuse(String);

impl<'de> DeserializeSeed<'de> for Refuse {
    type Value = std::convert::Infallible;

    fn deserialize<D: Deserializer<'de>>(self, _: D) -> Result<Self::Value, D::Error> {
        Err(de::Error::custom(self.0))
    }
}

/// `inputs`: the recorded inputs, at most [`STEPS_LIMIT`] of them (a longer list is
/// refused as soon as its next item is read, at the list's path).
struct Recorded;

impl<'de> DeserializeSeed<'de> for Recorded {
    type Value = Vec<RecordedInput>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Recorded {
    type Value = Vec<RecordedInput>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a list of recorded inputs (`[{\"at_ms\": 0, \"input\": {\"type\": \"start\"}}]`)",
        )
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut inputs = Vec::new();
        while let Some(input) = seq.next_element::<RecordedInput>()? {
            if inputs.len() == STEPS_LIMIT as usize {
                return Err(de::Error::custom(format_args!(
                    "more than {STEPS_LIMIT} inputs; a run takes at most {STEPS_LIMIT} steps"
                )));
            }
            inputs.push(input);
        }
        Ok(inputs)
    }
}

const RECORDED_FIELDS: &[&str] = &["at_ms", "input", "target"];

impl<'de> Deserialize<'de> for RecordedInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RecordedInput, D::Error> {
        d.deserialize_map(RecordedVisitor)
    }
}

struct RecordedVisitor;

impl<'de> Visitor<'de> for RecordedVisitor {
    type Value = RecordedInput;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a recorded input object (`{\"at_ms\": 0, \"input\": {\"type\": \"start\"}}`)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RecordedInput, A::Error> {
        let mut at_ms = None;
        let mut input = None;
        let mut target = None;
        let mut seen = Vec::new();
        while let Some(field) = map.next_key_seed(Field::of(RECORDED_FIELDS, &mut seen))? {
            match field {
                "at_ms" => at_ms = Some(map.next_value::<i64>()?),
                // Held to the engine's bounds as an event's `input` is.
                "input" => input = Some(map.next_value_seed(BoundedInput)?),
                "target" => target = Some(map.next_value::<String>()?),
                _ => unreachable!("Field only yields names from RECORDED_FIELDS"),
            }
        }
        Ok(RecordedInput {
            at_ms: at_ms.ok_or_else(|| de::Error::missing_field("at_ms"))?,
            input: input.ok_or_else(|| de::Error::missing_field("input"))?,
            target,
        })
    }
}

/// `tasks`: node id → outcomes, one node at most once.
struct Tasks;

impl<'de> DeserializeSeed<'de> for Tasks {
    type Value = BTreeMap<String, Vec<Scripted>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Tasks {
    type Value = BTreeMap<String, Vec<Scripted>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of task node id → list of outcomes")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut tasks = BTreeMap::new();
        loop {
            let node = map.next_key_seed(FreshKey(&|k| tasks.contains_key(k)))?;
            let Some(node) = node else { break };
            let outcomes = map.next_value()?;
            tasks.insert(node, outcomes);
        }
        Ok(tasks)
    }
}

/// `channels`: channel-call node id → answers, one node at most once.
struct Channels;

impl<'de> DeserializeSeed<'de> for Channels {
    type Value = BTreeMap<String, Vec<ScriptedAnswer>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Channels {
    type Value = BTreeMap<String, Vec<ScriptedAnswer>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of channel-call node id → list of answers")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut channels = BTreeMap::new();
        loop {
            let node = map.next_key_seed(FreshKey(&|k| channels.contains_key(k)))?;
            let Some(node) = node else { break };
            let answers = map.next_value()?;
            channels.insert(node, answers);
        }
        Ok(channels)
    }
}

/// `delivery_curves`: channel name → curve, one channel at most once.
struct Curves;

impl<'de> DeserializeSeed<'de> for Curves {
    type Value = BTreeMap<String, DeliveryCurve>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Curves {
    type Value = BTreeMap<String, DeliveryCurve>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of channel name → delivery curve")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut curves = BTreeMap::new();
        loop {
            let name = map.next_key_seed(FreshKey(&|k| curves.contains_key(k)))?;
            let Some(name) = name else { break };
            let curve = map.next_value_seed(Curve)?;
            curves.insert(name, curve);
        }
        Ok(curves)
    }
}

/// One delivery curve: the fields of `[channels.<name>.delivery]`, each defaulted as
/// there (`DeliveryCurve::default`); `ceiling` may be `null` (no ceiling).
struct Curve;

const CURVE_FIELDS: &[&str] = &["initial_ms", "multiplier_milli", "max_ms", "ceiling"];

impl<'de> DeserializeSeed<'de> for Curve {
    type Value = DeliveryCurve;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<DeliveryCurve, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Curve {
    type Value = DeliveryCurve;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a delivery curve object (`{\"initial_ms\": 500, \"ceiling\": 8}`)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DeliveryCurve, A::Error> {
        let mut curve = DeliveryCurve::default();
        let mut seen = Vec::new();
        while let Some(field) = map.next_key_seed(Field::of(CURVE_FIELDS, &mut seen))? {
            match field {
                "initial_ms" => curve.initial_ms = map.next_value()?,
                "multiplier_milli" => curve.multiplier_milli = map.next_value()?,
                "max_ms" => curve.max_ms = map.next_value()?,
                "ceiling" => curve.ceiling = map.next_value()?,
                _ => unreachable!("Field only yields names from CURVE_FIELDS"),
            }
        }
        Ok(curve)
    }
}

/// A map key, refused if the object already has it. The check runs while the key is
/// read, so the error names the key's path.
struct FreshKey<'a>(&'a dyn Fn(&str) -> bool);

impl<'de> DeserializeSeed<'de> for FreshKey<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for FreshKey<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<String, E> {
        if (self.0)(key) {
            Err(E::custom(format_args!(
                "duplicate key `{key}`; each key may appear once"
            )))
        } else {
            Ok(key.to_owned())
        }
    }
}

/// A field name of a struct-like object: one of `allowed`, each at most once (`seen`
/// holds the ones read so far). Unknown and duplicate fields are refused while the key is
/// read, so the error names the key's path.
struct Field<'a> {
    /// Every name this object can hold, whatever its kind turns out to be.
    known: &'static [&'static str],
    /// The names allowed now besides the tag: the kind's fields once the tag is read,
    /// `known` before.
    allowed: &'static [&'static str],
    /// The kind tag (`outcome`, `event`), allowed once whatever the kind.
    tag: Option<&'static str>,
    /// The kind, once its tag is read: named in the refusal of a field it does not take.
    kind: Option<&'static str>,
    seen: &'a mut Vec<&'static str>,
}

impl<'a> Field<'a> {
    /// A field of a plain struct: one of `fields`.
    fn of(fields: &'static [&'static str], seen: &'a mut Vec<&'static str>) -> Field<'a> {
        Field {
            known: fields,
            allowed: fields,
            tag: None,
            kind: None,
            seen,
        }
    }

    /// A field of a tagged object whose kind is `kind` (`None`: its tag is not read yet).
    fn tagged(
        tag: &'static str,
        known: &'static [&'static str],
        kinds: &'static [Kind],
        kind: Option<usize>,
        seen: &'a mut Vec<&'static str>,
    ) -> Field<'a> {
        Field {
            known,
            allowed: kind.map_or(known, |k| kinds[k].fields),
            tag: Some(tag),
            kind: kind.map(|k| kinds[k].name),
            seen,
        }
    }
}

/// One kind of a tagged object: its tag value and the fields it takes.
struct Kind {
    name: &'static str,
    fields: &'static [&'static str],
}

impl<'de> DeserializeSeed<'de> for Field<'_> {
    type Value = &'static str;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<&'static str, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for Field<'_> {
    type Value = &'static str;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<&'static str, E> {
        let found = self.known.iter().copied().find(|f| *f == key);
        match found {
            Some(name) if self.tag == Some(name) || self.allowed.contains(&name) => {
                if self.seen.contains(&name) {
                    return Err(E::duplicate_field(name));
                }
                self.seen.push(name);
                Ok(name)
            }
            _ => match (self.tag, self.kind) {
                // A field of another kind, or of none: say what this kind takes.
                (Some(tag), Some(kind)) => Err(E::custom(format_args!(
                    "unknown field `{key}`: {tag} `{kind}` takes {}",
                    Takes(self.allowed)
                ))),
                _ => Err(E::unknown_field(key, self.allowed)),
            },
        }
    }
}

/// A kind tag's value (`"outcome": "fail"`): one of `kinds`, as a string. Fields read
/// before the tag must belong to the kind it names.
struct Tag<'a> {
    tag: &'static str,
    kinds: &'static [Kind],
    seen: &'a [&'static str],
}

impl<'de> DeserializeSeed<'de> for Tag<'_> {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Tag<'_> {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the name of the {}", self.tag)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<usize, E> {
        let Some(i) = self.kinds.iter().position(|k| k.name == value) else {
            let names: Vec<&str> = self.kinds.iter().map(|k| k.name).collect();
            return Err(E::custom(format_args!(
                "unknown variant `{value}`, expected {}",
                OneOf(&names)
            )));
        };
        let fields = self.kinds[i].fields;
        let stray = self
            .seen
            .iter()
            .find(|f| **f != self.tag && !fields.contains(f));
        match stray {
            Some(field) => Err(E::custom(format_args!(
                "{} `{value}` does not take the field `{field}` given before it: it takes {}",
                self.tag,
                Takes(fields)
            ))),
            None => Ok(i),
        }
    }
}

/// What a kind takes besides its tag: "`a`, `b` or `c`", or "no other fields".
struct Takes(&'static [&'static str]);

impl fmt::Display for Takes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("no other fields")
        } else {
            OneOf(self.0).fmt(f)
        }
    }
}

/// "`a`, `b` or `c`", as serde lists expected names.
struct OneOf<'a>(&'a [&'a str]);

impl fmt::Display for OneOf<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, name) in self.0.iter().enumerate() {
            match i {
                0 => {}
                _ if i + 1 == self.0.len() => f.write_str(" or ")?,
                _ => f.write_str(", ")?,
            }
            write!(f, "`{name}`")?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Scripted: `{"outcome": ..., fields}`.

const OUTCOME: &str = "outcome";
const OUTCOME_FIELDS: &[&str] = &["outcome", "outputs", "after_ms", "code", "message"];
const OUTCOMES: &[Kind] = &[
    Kind {
        name: "ok",
        fields: &["outputs", "after_ms"],
    },
    Kind {
        name: "fail",
        fields: &["code", "message", "after_ms"],
    },
    Kind {
        name: "panic",
        fields: &["message", "after_ms"],
    },
    Kind {
        name: "bpmn_error",
        fields: &["code", "message", "after_ms"],
    },
    Kind {
        name: "time_limit",
        fields: &["after_ms"],
    },
    Kind {
        name: "hang",
        fields: &[],
    },
];

impl<'de> Deserialize<'de> for Scripted {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Scripted, D::Error> {
        d.deserialize_map(ScriptedVisitor)
    }
}

struct ScriptedVisitor;

impl<'de> Visitor<'de> for ScriptedVisitor {
    type Value = Scripted;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an outcome object (`{\"outcome\": \"ok\", ...}`)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scripted, A::Error> {
        let mut kind = None;
        let mut outputs = None;
        let mut after_ms = None;
        let mut code = None;
        let mut message = None;
        let mut seen = Vec::new();
        loop {
            let field = Field::tagged(OUTCOME, OUTCOME_FIELDS, OUTCOMES, kind, &mut seen);
            let Some(name) = map.next_key_seed(field)? else {
                break;
            };
            match name {
                OUTCOME => {
                    kind = Some(map.next_value_seed(Tag {
                        tag: OUTCOME,
                        kinds: OUTCOMES,
                        seen: &seen,
                    })?)
                }
                "outputs" => outputs = Some(map.next_value_seed(Object::Outputs)?),
                "after_ms" => after_ms = Some(map.next_value::<u64>()?),
                "code" => code = Some(map.next_value::<String>()?),
                "message" => message = Some(map.next_value::<String>()?),
                _ => unreachable!("Field only yields names from OUTCOME_FIELDS"),
            }
        }
        let kind = kind.ok_or_else(|| de::Error::missing_field(OUTCOME))?;
        let after_ms = after_ms.unwrap_or(0);
        let message = message.unwrap_or_default();
        let required_code = || code.clone().ok_or_else(|| de::Error::missing_field("code"));
        Ok(match OUTCOMES[kind].name {
            "ok" => Scripted::Ok {
                outputs: outputs.unwrap_or_default(),
                after_ms,
            },
            "fail" => Scripted::Fail {
                code: required_code()?,
                message,
                after_ms,
            },
            "panic" => Scripted::Panic { message, after_ms },
            "bpmn_error" => Scripted::BpmnError {
                code: required_code()?,
                message,
                after_ms,
            },
            "time_limit" => Scripted::TimeLimit { after_ms },
            _ => Scripted::Hang,
        })
    }
}

// ---------------------------------------------------------------------------------------
// ScriptedAnswer: `{"answer": ..., fields}`.

const ANSWER: &str = "answer";
const ANSWER_FIELDS: &[&str] = &[
    "answer",
    "outputs",
    "after_ms",
    "code",
    "message",
    "wake",
    "delivery_fails",
];
const ANSWERS: &[Kind] = &[
    Kind {
        name: "ok",
        fields: &["outputs", "after_ms", "delivery_fails"],
    },
    Kind {
        name: "bpmn_error",
        fields: &["code", "message", "after_ms", "delivery_fails"],
    },
    // A poison is the outbox giving up by itself: it takes no scripted failures (a
    // ceiling reached by `delivery_fails` poisons the row the same way).
    Kind {
        name: "poison",
        fields: &["message", "after_ms", "wake"],
    },
    Kind {
        name: "never",
        fields: &["delivery_fails"],
    },
];

impl<'de> Deserialize<'de> for ScriptedAnswer {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ScriptedAnswer, D::Error> {
        d.deserialize_map(AnswerVisitor)
    }
}

struct AnswerVisitor;

impl<'de> Visitor<'de> for AnswerVisitor {
    type Value = ScriptedAnswer;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an answer object (`{\"answer\": \"ok\", ...}`)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ScriptedAnswer, A::Error> {
        let mut kind = None;
        let mut outputs = None;
        let mut after_ms = None;
        let mut code = None;
        let mut message = None;
        let mut wake = None;
        let mut delivery_fails = None;
        let mut seen = Vec::new();
        loop {
            let field = Field::tagged(ANSWER, ANSWER_FIELDS, ANSWERS, kind, &mut seen);
            let Some(name) = map.next_key_seed(field)? else {
                break;
            };
            match name {
                ANSWER => {
                    kind = Some(map.next_value_seed(Tag {
                        tag: ANSWER,
                        kinds: ANSWERS,
                        seen: &seen,
                    })?)
                }
                "outputs" => outputs = Some(map.next_value_seed(Object::Input)?),
                "after_ms" => after_ms = Some(map.next_value::<u64>()?),
                "code" => code = Some(map.next_value::<String>()?),
                "message" => message = Some(map.next_value::<String>()?),
                "wake" => wake = Some(map.next_value::<bool>()?),
                "delivery_fails" => delivery_fails = Some(map.next_value::<u32>()?),
                _ => unreachable!("Field only yields names from ANSWER_FIELDS"),
            }
        }
        let kind = kind.ok_or_else(|| de::Error::missing_field(ANSWER))?;
        let after_ms = after_ms.unwrap_or(0);
        let message = message.unwrap_or_default();
        let delivery_fails = delivery_fails.unwrap_or(0);
        Ok(match ANSWERS[kind].name {
            "ok" => ScriptedAnswer::Ok {
                outputs: outputs.unwrap_or_default(),
                after_ms,
                delivery_fails,
            },
            "bpmn_error" => ScriptedAnswer::BpmnError {
                code: code.ok_or_else(|| de::Error::missing_field("code"))?,
                message,
                after_ms,
                delivery_fails,
            },
            "poison" => ScriptedAnswer::Poison {
                message,
                after_ms,
                wake: wake.unwrap_or(true),
            },
            _ => ScriptedAnswer::Never { delivery_fails },
        })
    }
}

// ---------------------------------------------------------------------------------------
// ScriptedEvent: `{"event": ..., "at_ms": ..., fields}`.

const EVENT: &str = "event";
const EVENT_FIELDS: &[&str] = &[
    "event",
    "at_ms",
    "node",
    "variables",
    "name",
    "incarnation",
    "budget",
    "input",
    "correlation_key",
    "target",
    "mapping",
    "assignee",
    "force",
    "code",
    "message",
];
const EVENTS: &[Kind] = &[
    Kind {
        name: "complete_user_task",
        fields: &["at_ms", "node", "variables", "assignee"],
    },
    Kind {
        name: "message",
        fields: &["at_ms", "name", "correlation_key", "variables"],
    },
    Kind {
        name: "cancel",
        fields: &["at_ms"],
    },
    Kind {
        name: "fire_timer",
        fields: &["at_ms", "name", "incarnation"],
    },
    Kind {
        name: "resume",
        fields: &["at_ms", "budget"],
    },
    Kind {
        name: "retry_now",
        fields: &["at_ms", "node"],
    },
    Kind {
        name: "migrate",
        fields: &["at_ms", "target", "mapping"],
    },
    Kind {
        name: "pull",
        fields: &["at_ms", "input"],
    },
    Kind {
        name: "channel",
        fields: &["at_ms", "input"],
    },
    Kind {
        name: "claim_user_task",
        fields: &["at_ms", "node", "assignee", "force"],
    },
    Kind {
        name: "unclaim_user_task",
        fields: &["at_ms", "node", "assignee"],
    },
    Kind {
        name: "signal",
        fields: &["at_ms", "name", "variables"],
    },
    Kind {
        name: "user_task_bpmn_error",
        fields: &["at_ms", "node", "code", "message", "variables"],
    },
    Kind {
        name: "escalate_user_task",
        fields: &["at_ms", "node", "code", "variables"],
    },
    Kind {
        name: "child",
        fields: &["at_ms", "input"],
    },
];
const FIRE_TIMER: usize = 3;
const RETRY_NOW: usize = 5;

impl<'de> Deserialize<'de> for ScriptedEvent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ScriptedEvent, D::Error> {
        d.deserialize_map(EventVisitor)
    }
}

struct EventVisitor;

/// `name` as read: typed as a timer name when the event was known to be `fire_timer`
/// when the field came, else kept as text and typed once the kind is known.
enum NameField {
    Text(String),
    Timer(TimerName),
}

impl<'de> Visitor<'de> for EventVisitor {
    type Value = ScriptedEvent;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an event object (`{\"event\": \"cancel\", \"at_ms\": 0}`)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ScriptedEvent, A::Error> {
        let mut kind = None;
        let mut at_ms = None;
        let mut node: Option<Option<String>> = None;
        let mut variables = None;
        let mut name = None;
        let mut incarnation = None;
        let mut budget = None;
        let mut input: Option<Input> = None;
        let mut correlation_key = None;
        let mut target = None;
        let mut mapping = None;
        let mut assignee: Option<String> = None;
        let mut force = None;
        let mut code: Option<String> = None;
        let mut message: Option<String> = None;
        let mut seen = Vec::new();
        loop {
            let field = Field::tagged(EVENT, EVENT_FIELDS, EVENTS, kind, &mut seen);
            let Some(field) = map.next_key_seed(field)? else {
                break;
            };
            match field {
                EVENT => {
                    kind = Some(map.next_value_seed(Tag {
                        tag: EVENT,
                        kinds: EVENTS,
                        seen: &seen,
                    })?)
                }
                "at_ms" => at_ms = Some(map.next_value::<i64>()?),
                // Only `retry_now` takes `null` ("every task in a backoff window").
                "node" => {
                    node = Some(match kind {
                        Some(RETRY_NOW) | None => map.next_value::<Option<String>>()?,
                        Some(_) => Some(map.next_value::<String>()?),
                    })
                }
                "variables" => variables = Some(map.next_value_seed(Object::Input)?),
                "name" => {
                    name = Some(match kind {
                        Some(FIRE_TIMER) => NameField::Timer(map.next_value()?),
                        _ => NameField::Text(map.next_value()?),
                    })
                }
                "incarnation" => incarnation = Some(map.next_value::<u32>()?),
                "budget" => budget = Some(map.next_value::<Budget>()?),
                "input" => input = Some(map.next_value_seed(BoundedInput)?),
                "correlation_key" => correlation_key = map.next_value::<Option<String>>()?,
                "target" => target = Some(map.next_value::<String>()?),
                "mapping" => mapping = Some(map.next_value_seed(Renames)?),
                "assignee" => assignee = Some(map.next_value::<String>()?),
                "force" => force = Some(map.next_value::<bool>()?),
                "code" => code = Some(map.next_value::<String>()?),
                "message" => message = Some(map.next_value::<String>()?),
                _ => unreachable!("Field only yields names from EVENT_FIELDS"),
            }
        }
        let kind = kind.ok_or_else(|| de::Error::missing_field(EVENT))?;
        let at_ms = at_ms.ok_or_else(|| de::Error::missing_field("at_ms"))?;
        let variables = variables.unwrap_or_default();
        let user_task = |node: Option<Option<String>>| match node {
            Some(Some(node)) => Ok(node),
            Some(None) => Err(de::Error::invalid_type(
                de::Unexpected::Option,
                &"a user task's node id",
            )),
            None => Err(de::Error::missing_field("node")),
        };
        Ok(match EVENTS[kind].name {
            "complete_user_task" => ScriptedEvent::CompleteUserTask {
                at_ms,
                node: user_task(node)?,
                variables,
                assignee,
            },
            "claim_user_task" => ScriptedEvent::ClaimUserTask {
                at_ms,
                node: user_task(node)?,
                assignee: assignee.ok_or_else(|| de::Error::missing_field("assignee"))?,
                force: force.unwrap_or(false),
            },
            "unclaim_user_task" => ScriptedEvent::UnclaimUserTask {
                at_ms,
                node: user_task(node)?,
                assignee,
            },
            "message" => ScriptedEvent::Message {
                at_ms,
                name: match name {
                    Some(NameField::Text(name)) => name,
                    Some(NameField::Timer(timer)) => timer.as_str().to_owned(),
                    None => return Err(de::Error::missing_field("name")),
                },
                correlation_key,
                variables,
            },
            "user_task_bpmn_error" => ScriptedEvent::UserTaskBpmnError {
                at_ms,
                node: user_task(node)?,
                code: code.ok_or_else(|| de::Error::missing_field("code"))?,
                message: message.unwrap_or_default(),
                variables,
            },
            "escalate_user_task" => ScriptedEvent::EscalateUserTask {
                at_ms,
                node: user_task(node)?,
                code: code.ok_or_else(|| de::Error::missing_field("code"))?,
                variables,
            },
            "signal" => ScriptedEvent::Signal {
                at_ms,
                name: match name {
                    Some(NameField::Text(name)) => name,
                    Some(NameField::Timer(timer)) => timer.as_str().to_owned(),
                    None => return Err(de::Error::missing_field("name")),
                },
                variables,
            },
            "cancel" => ScriptedEvent::Cancel { at_ms },
            "fire_timer" => ScriptedEvent::FireTimer {
                at_ms,
                name: match name {
                    Some(NameField::Timer(timer)) => timer,
                    Some(NameField::Text(text)) => text.parse().map_err(de::Error::custom)?,
                    None => return Err(de::Error::missing_field("name")),
                },
                incarnation: incarnation.ok_or_else(|| de::Error::missing_field("incarnation"))?,
            },
            "resume" => ScriptedEvent::Resume {
                at_ms,
                budget: budget.unwrap_or_default(),
            },
            "pull" => ScriptedEvent::Pull {
                at_ms,
                input: input.ok_or_else(|| de::Error::missing_field("input"))?,
            },
            "channel" => ScriptedEvent::Channel {
                at_ms,
                input: input.ok_or_else(|| de::Error::missing_field("input"))?,
            },
            "child" => ScriptedEvent::Child {
                at_ms,
                input: input.ok_or_else(|| de::Error::missing_field("input"))?,
            },
            "retry_now" => ScriptedEvent::RetryNow {
                at_ms,
                node: node.flatten(),
            },
            _ => ScriptedEvent::Migrate {
                at_ms,
                target: target.ok_or_else(|| de::Error::missing_field("target"))?,
                mapping: mapping.unwrap_or_default(),
            },
        })
    }
}

/// A migration's node mapping: an object of old node id → new node id, no id twice.
struct Renames;

impl<'de> DeserializeSeed<'de> for Renames {
    type Value = BTreeMap<String, String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Renames {
    type Value = BTreeMap<String, String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of old node id → new node id")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut renames = BTreeMap::new();
        loop {
            let key = map.next_key_seed(FreshKey(&|k| renames.contains_key(k)))?;
            let Some(key) = key else { break };
            let value = map.next_value::<String>()?;
            renames.insert(key, value);
        }
        Ok(renames)
    }
}

// ---------------------------------------------------------------------------------------
// Variables: JSON objects whose keys are unique at every depth.

/// A JSON object read into [`Variables`]; no key twice, here or in any value inside.
#[derive(Clone, Copy)]
enum Object {
    /// The variables one input brings (start variables, an event's, a channel answer's):
    /// the step refuses an input over the bounds of [`limits`], so they are refused here,
    /// with the path of the value — a value nested too deep while it is read, a total
    /// over [`limits::INPUT_BYTES_MAX`] once the object is read (the path is the object's
    /// then; the message names the value where the total was crossed).
    Input,
    /// A scripted handler's or called instance's outputs. Over the bounds they are not a
    /// refused input but a result the engine fails the attempt for (`OUTPUTS_REFUSED`),
    /// as it does when a real handler returns one: a scenario may script that, so only
    /// the JSON reader's own nesting limit applies.
    Outputs,
}

impl<'de> DeserializeSeed<'de> for Object {
    type Value = Variables;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Variables, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Object {
    type Value = Variables;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of variable name → value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Variables, A::Error> {
        let bounded = matches!(self, Object::Input);
        let mut vars = Variables::new();
        loop {
            let key = map.next_key_seed(FreshKey(&|k| vars.contains_key(k)))?;
            let Some(key) = key else { break };
            let value = map.next_value_seed(StrictValue { depth: 1, bounded })?;
            vars.insert(key, value);
        }
        if bounded {
            // The one judgement the step makes of the same variables (depth again, which
            // cannot fail here, and the size of the whole input).
            limits::check_variables(&vars).map_err(de::Error::custom)?;
        }
        Ok(vars)
    }
}

/// An event's `input` (`pull`, `channel`, `child`), read as the engine's [`Input`]; the
/// variables of the inputs the step bounds are held to [`limits`] here. The input is read
/// whole first (its tagged form is buffered), so the path is the input's and the message
/// names the value inside `variables`.
struct BoundedInput;

impl<'de> DeserializeSeed<'de> for BoundedInput {
    type Value = Input;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Input, D::Error> {
        let input = Input::deserialize(d)?;
        if let Some(vars) = input.bounded_variables() {
            limits::check_variables(vars)
                .map_err(|why| de::Error::custom(format_args!("in its `variables`, {why}")))?;
        }
        Ok(input)
    }
}

/// Any JSON value, built exactly as `serde_json::Value` builds it except that an object
/// with a key twice is refused and, when `bounded`, a value nested deeper than
/// [`VALUE_DEPTH_MAX`] is refused where it starts: the error's path is the value's own
/// (`variables.order.lines[0]…`). `depth` counts as [`limits`] does: a variable's value
/// is at depth 1, an item of it at 2.
struct StrictValue {
    depth: usize,
    bounded: bool,
}

impl StrictValue {
    /// The seed of an item of this value: one level deeper.
    fn inner(&self) -> StrictValue {
        StrictValue {
            depth: self.depth.saturating_add(1),
            bounded: self.bounded,
        }
    }
}

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        if self.bounded && self.depth > VALUE_DEPTH_MAX {
            return Err(de::Error::custom(format_args!(
                "nested {} levels deep; a variable may nest {VALUE_DEPTH_MAX} levels at most \
                 (a scalar is one level, `[1]` two)",
                self.depth
            )));
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        Number::deserialize(de::value::I128Deserializer::<E>::new(v)).map(Value::Number)
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        Number::deserialize(de::value::U128Deserializer::<E>::new(v)).map(Value::Number)
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.inner())? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        loop {
            let key = map.next_key_seed(FreshKey(&|k| object.contains_key(k)))?;
            let Some(key) = key else { break };
            let value = map.next_value_seed(self.inner())?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}
