//! Messages, signals and channel answers: delivering a message to one instance,
//! correlating one by name and key (waiting instances first, message start events when
//! none waits), broadcasting a signal, and relaying a counterpart's answer to a channel
//! call (SPEC C5) with the engine's verdict.

use qflow_core::Input;
use qflow_store::InstanceId;
use serde::Serialize;

use crate::{check_text, check_variables, no_runtime, runtime_of, Applied, Error, Ops, Result};

/// A counterpart's answer to a channel call (SPEC C5), as the relay endpoint takes it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelAnswerRequest {
    /// The `Idempotency-Key` of the request this answers (`<instance>/<call>/<attempt>`).
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub idempotency_key: String,
    /// The answer's variables (the task's output mappings see them as `result`).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: qflow_core::Variables,
    /// Answer with a BPMN error instead: it routes to the task's error boundary and
    /// spends no retry budget.
    #[serde(default)]
    pub bpmn_error: Option<ChannelBpmnError>,
}

/// A BPMN error a counterpart answers with.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelBpmnError {
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub code: String,
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub message: String,
}

/// What became of a relayed answer: the engine's verdict, decided under the instance's
/// claim from durable facts (`docs/channels.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RelayVerdict {
    /// `resumed` (taken), `superseded` (that attempt is dead; a retry is pending or in
    /// flight, whose answer will be taken), `already_completed`, `instance_failed` or
    /// `unknown`.
    pub verdict: &'static str,
    pub reason: String,
}

/// The longest idempotency key a relay takes (an instance id, two numbers, two `/`).
pub const IDEMPOTENCY_KEY_CHARS_MAX: usize = 256;
/// The longest BPMN error message a relay takes.
pub const BPMN_MESSAGE_CHARS_MAX: usize = 4096;

/// A message to correlate by name and key (O1).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageRequest {
    /// The message name (the `name` of its `<message>` declaration).
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub name: String,
    /// The value the waiting instance's correlation key evaluated to.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub correlation_key: String,
    /// Merged into the instance's variables (or mapped by the wait's output mappings).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: qflow_core::Variables,
    /// Deliver to every matching subscription instead of requiring exactly one.
    #[serde(default)]
    pub all: bool,
    /// Keep the message this long, in milliseconds, for waits that open later under its
    /// name and key (`docs/messages.md` "Time to live"). 0 (the default): the message
    /// reaches the waits open now, or is refused when none is.
    #[serde(default, deserialize_with = "crate::json::optional_integer")]
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 9_007_199_254_740_991_i64)]
    pub time_to_live_ms: Option<i64>,
    /// With a time to live: a second message with this id, name and key is refused
    /// while the first is kept. Without one nothing is kept to compare with, and it is
    /// not used (as Camunda 8 takes it).
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub message_id: Option<String>,
}

/// The longest message id the API takes, in characters.
pub const MESSAGE_ID_CHARS_MAX: usize = 256;

/// The longest time to live a message takes, in milliseconds: 2^53 − 1, the largest
/// integer every JSON reader holds exactly (some 285,000 years).
pub const TIME_TO_LIVE_MS_MAX: i64 = (1 << 53) - 1;

/// A message kept for waits that open later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct BufferedView {
    /// Its Camunda 8 key.
    pub key: i64,
    /// The first instant (ms since the epoch) at which it no longer reaches a wait.
    pub expires_at_ms: i64,
}

/// What a correlation did: one delivery per subscription it reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Correlated {
    pub name: String,
    pub correlation_key: String,
    pub deliveries: Vec<Delivery>,
    /// With `all`: as many subscriptions matched as one request delivers to (1,000), so
    /// there may be more; waits that took the message and ended no longer match.
    pub truncated: bool,
    /// With a time to live: the message as kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buffered: Option<BufferedView>,
}

/// The message reaching (or failing to reach) one subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Delivery {
    pub instance: String,
    /// The node that waited.
    pub node: String,
    /// `delivered`, `refused` (the wait ended before the message reached it),
    /// `started` (no instance waited: the message started one at its message start
    /// event, `node`, with the correlation key as business key) or `already_started`
    /// (an instance of the deployment holds that business key: a repeated publication
    /// starts nothing new).
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied: Option<Applied>,
}

impl Delivery {
    fn of(s: qflow_store::SubscriptionRecord, outcome: Result<Applied>) -> Delivery {
        let (outcome, reason, applied) = match outcome {
            Ok(applied) => ("delivered", None, Some(applied)),
            Err(e) => ("refused", Some(e.to_string()), None),
        };
        Delivery {
            instance: s.instance.to_string(),
            node: s.node,
            outcome,
            reason,
            applied,
        }
    }
}

/// A signal to broadcast (`POST /v1/signals`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// The signal name (the `name` of its `<signal>` declaration).
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub name: String,
    /// Merged into each catching instance's variables; the start variables of each
    /// instance a signal start event starts.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: qflow_core::Variables,
    /// Names the broadcast, so that repeating it (an answer lost) starts no instance
    /// twice. Default: a fresh id, returned.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub id: Option<String>,
}

/// Longest broadcast id the API takes, in characters.
pub const SIGNAL_ID_CHARS_MAX: usize = 128;

/// What a broadcast reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SignalBroadcast {
    pub name: String,
    /// The broadcast's id: the one given, or the one drawn.
    pub id: String,
    /// The waits that caught it, in the order they were reached.
    pub caught: Vec<SignalCatch>,
    /// The instances signal start events started (or had started, for a repeated id).
    pub started: Vec<SignalStart>,
    /// Subscriptions whose wait had ended before the signal reached it.
    pub ended_waits: u32,
    /// Waits the signal did not reach because their instance kept changing under the
    /// step (rare; logged). Broadcasting again would reach them — and every
    /// non-interrupting boundary again.
    pub missed: Vec<SignalCatch>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SignalCatch {
    pub instance: String,
    pub node: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SignalStart {
    pub deployment: i64,
    pub instance: String,
}

impl Ops {
    /// Delivers the message `name` to an instance: the first receive task or message
    /// catch event waiting for it there completes with `variables`. Refused when nothing
    /// of the instance waits for it.
    pub async fn deliver_message(
        &self,
        id: InstanceId,
        name: &str,
        variables: qflow_core::Variables,
    ) -> Result<Applied> {
        check_variables(&variables)?;
        let detail = format!("name={name} variables={}", variables.len());
        let input = Input::MessageReceived {
            name: name.to_owned(),
            correlation_key: None,
            node: None,
            variables,
        };
        self.apply(id, input, "message", detail).await
    }

    /// Hands a counterpart's answer to the channel call it answers (C5), and says what
    /// became of it. Every verdict but `resumed` changed nothing.
    pub async fn relay_answer(&self, answer: ChannelAnswerRequest) -> Result<RelayVerdict> {
        let runtime = self.shared.runtime.as_ref().ok_or_else(no_runtime)?;
        check_text(
            "idempotency_key",
            &answer.idempotency_key,
            IDEMPOTENCY_KEY_CHARS_MAX,
        )?;
        check_variables(&answer.variables)?;
        let bpmn_error = match answer.bpmn_error {
            Some(e) => {
                check_text("bpmn_error", &e.code, MESSAGE_NAME_CHARS_MAX)?;
                if e.message.chars().count() > BPMN_MESSAGE_CHARS_MAX {
                    return Err(Error::Invalid {
                        field: "bpmn_error",
                        why: format!("message is longer than {BPMN_MESSAGE_CHARS_MAX} characters"),
                    });
                }
                Some(qflow_channels::BpmnError {
                    code: e.code,
                    message: e.message,
                })
            }
            None => None,
        };
        let relayed = qflow_channels::relay(
            runtime,
            &answer.idempotency_key,
            qflow_channels::Answer {
                variables: answer.variables,
                bpmn_error,
            },
        )
        .await
        .map_err(|e| match e {
            qflow_channels::RelayError::Refused(why) => Error::Invalid {
                field: "variables",
                why,
            },
            qflow_channels::RelayError::Runtime(e) => Error::from(e),
        })?;
        Ok(RelayVerdict {
            verdict: relayed.verdict.as_str(),
            reason: relayed.reason,
        })
    }

    /// Publishes the message `name` with a correlation key (O1): it reaches the instance
    /// whose open subscription for `name` has this key — a receive task or message catch
    /// whose message declares `q:correlationKey` (or a Zeebe subscription) — and
    /// completes that wait with `variables`. Exactly one waiting subscription must match
    /// unless `all` is set, which delivers to every one (at most
    /// [`qflow_store::SUBSCRIPTIONS_LIMIT_MAX`]). Nothing matching is `NotFound` — unless
    /// the message has a time to live: then it is kept for the waits that open later
    /// (`docs/messages.md`, "Time to live").
    pub async fn correlate(&self, message: MessageRequest) -> Result<Correlated> {
        check_variables(&message.variables)?;
        check_text("name", &message.name, MESSAGE_NAME_CHARS_MAX)?;
        check_text(
            "correlation_key",
            &message.correlation_key,
            qflow_core::CORRELATION_KEY_CHARS_MAX,
        )?;
        if let Some(id) = &message.message_id {
            check_text("message_id", id, MESSAGE_ID_CHARS_MAX)?;
        }
        match message.time_to_live_ms {
            Some(ttl) if !(0..=TIME_TO_LIVE_MS_MAX).contains(&ttl) => {
                return Err(Error::Invalid {
                    field: "time_to_live_ms",
                    why: format!("is 0 to {TIME_TO_LIVE_MS_MAX} milliseconds, this one is {ttl}"),
                })
            }
            Some(ttl) if ttl > 0 => return self.publish_buffered(message, ttl).await,
            _ => {}
        }
        let (name, key) = (message.name.as_str(), message.correlation_key.as_str());
        let detail = format!(
            "name={name} key={key} variables={}",
            message.variables.len()
        );
        // Each delivery names the subscription's node, so the wait that takes the message
        // is the one the row named (an instance may wait twice under one key).
        let input = |node: &str| Input::MessageReceived {
            name: name.to_owned(),
            correlation_key: Some(key.to_owned()),
            node: Some(node.to_owned()),
            variables: message.variables.clone(),
        };
        let mut delivered = Vec::new();
        if message.all {
            let subscribers = self.store().subscriptions(name, key, 0).await?;
            if subscribers.is_empty() {
                // Nothing waits: the message starts an instance of every process whose
                // newest live deployment has a message start event for it.
                if self.shared.runtime.is_none() {
                    return Err(no_subscriber(name, key));
                }
                let started = self.message_starts(&message).await?;
                if started.is_empty() {
                    return Err(no_subscriber(name, key));
                }
                return Ok(Correlated {
                    name: message.name,
                    correlation_key: message.correlation_key,
                    deliveries: started,
                    truncated: false,
                    buffered: None,
                });
            }
            let truncated = subscribers.len() as u32 >= qflow_store::SUBSCRIPTIONS_LIMIT_MAX;
            for s in subscribers {
                let outcome = self.apply(s.instance, input(&s.node), "correlate", detail.clone());
                match outcome.await {
                    // Deliveries so far are committed; the rest are not tried. A retry
                    // of the request reaches only the waits still open.
                    Err(e @ Error::Store(_)) => return Err(e),
                    outcome => delivered.push(Delivery::of(s, outcome)),
                }
            }
            return Ok(Correlated {
                name: message.name,
                correlation_key: message.correlation_key,
                deliveries: delivered,
                truncated,
                buffered: None,
            });
        }
        // One subscriber. A wait that ends between the lookup and the step (its message
        // came, a timer won the race) is looked past: the next lookup no longer lists it.
        for _ in 0..CORRELATE_ROUNDS_MAX {
            // One instance may wait more than once under the key (a receive task and a
            // boundary): the oldest of its waits takes the message.
            let subscribers = self.store().subscriptions(name, key, 16).await?;
            let other = subscribers
                .iter()
                .find(|s| s.instance != subscribers[0].instance);
            match (subscribers.first(), other) {
                (None, _) => {
                    // Nothing waits: a message start event takes it, when exactly one
                    // process has one for it (`all` starts each).
                    // Without a runtime here (the CLI on a store) nothing could run
                    // a started instance: no start, as before message starts.
                    let Some(runtime) = &self.shared.runtime else {
                        return Err(no_subscriber(name, key));
                    };
                    let starts = runtime.message_starts(name).await?;
                    if starts.len() > 1 {
                        return Err(Error::Refused(format!(
                            "no instance waits for message `{name}` with key `{key}`, and \
                             {} processes start on it (deployments {}); set `all` to start \
                             each",
                            starts.len(),
                            starts
                                .iter()
                                .map(|(d, _)| d.0.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )));
                    }
                    let started = self.message_starts(&message).await?;
                    if started.is_empty() {
                        return Err(no_subscriber(name, key));
                    }
                    return Ok(Correlated {
                        name: message.name,
                        correlation_key: message.correlation_key,
                        deliveries: started,
                        truncated: false,
                        buffered: None,
                    });
                }
                (Some(one), None) => {
                    let outcome =
                        self.apply(one.instance, input(&one.node), "correlate", detail.clone());
                    match outcome.await {
                        Err(Error::Refused(_)) | Err(Error::Conflict(_)) => continue,
                        other => {
                            delivered.push(Delivery::of(one.clone(), other));
                            return Ok(Correlated {
                                name: message.name,
                                correlation_key: message.correlation_key,
                                deliveries: delivered,
                                truncated: false,
                                buffered: None,
                            });
                        }
                    }
                }
                (Some(a), Some(b)) => {
                    return Err(Error::Refused(format!(
                        "message `{name}` with key `{key}` matches more than one waiting \
                         instance ({} at `{}`, {} at `{}`, ...); set `all` to deliver it to \
                         each, or give the waits distinct keys",
                        a.instance, a.node, b.instance, b.node
                    )))
                }
            }
        }
        Err(Error::Conflict(format!(
            "the waits for message `{name}` with key `{key}` kept ending under the \
             correlation; try again"
        )))
    }

    /// Publishes `message` with its time to live (`docs/messages.md` "Time to live"):
    /// buffers it, then delivers it to the waits open now, oldest first and each process
    /// at most once (the store refuses a second take); when none is open, it starts
    /// instances at message start events as a publication of every wait does. Kept
    /// either way until it expires, for the waits of other processes that open later —
    /// the runtime's buffer task delivers it there. A message id already kept under the
    /// name and key is refused (`Conflict`), and nothing is delivered.
    async fn publish_buffered(&self, message: MessageRequest, ttl: i64) -> Result<Correlated> {
        let now = (self.shared.now_ms)();
        let new = qflow_store::NewBufferedMessage {
            key: crate::keys::minted_key(),
            name: message.name.clone(),
            correlation_key: message.correlation_key.clone(),
            message_id: message.message_id.clone(),
            variables: serde_json::to_string(&message.variables)
                .map_err(|e| Error::Store(format!("variables: {e}")))?,
            published_at_ms: now,
            expires_at_ms: now.saturating_add(ttl),
        };
        let id = match self.store().buffer_message(&new).await? {
            qflow_store::BufferOutcome::Buffered { id } => id,
            qflow_store::BufferOutcome::Duplicate { key } => {
                return Err(Error::Conflict(format!(
                    "message `{}` with key `{}` and id `{}` is kept already (key {key}): \
                     it is published once while it is kept",
                    new.name,
                    new.correlation_key,
                    new.message_id.as_deref().unwrap_or_default()
                )))
            }
        };
        let (name, key) = (message.name.as_str(), message.correlation_key.as_str());
        let detail = format!(
            "name={name} key={key} variables={} ttl_ms={ttl}",
            message.variables.len(),
        );
        let audit = self.audit_entry("correlate", detail);
        // Older kept messages of the name and key first: a wait open now takes the
        // oldest one its process has not taken (Zeebe's order), then this one goes on to
        // the waits left.
        let kept = self
            .store()
            .buffered_messages(qflow_store::BufferQuery {
                name_and_key: Some((name, key)),
                after: 0,
                now_ms: now,
                limit: 0,
            })
            .await?;
        let fresh = qflow_store::BufferedMessage {
            id,
            key: new.key,
            name: new.name.clone(),
            correlation_key: new.correlation_key.clone(),
            message_id: new.message_id.clone(),
            variables: new.variables.clone(),
            published_at_ms: new.published_at_ms,
            expires_at_ms: new.expires_at_ms,
            takers: Vec::new(),
        };
        let deliver = |m: &qflow_store::BufferedMessage| {
            let audit = &audit;
            let m = m.clone();
            async move {
                qflow_runtime::buffer::offer(
                    self.store(),
                    &m,
                    |instance, input, current| async move {
                        self.step_taking(instance, input, audit, Some(&current))
                            .await
                    },
                )
                .await
            }
        };
        for older in kept.iter().filter(|m| m.id < id) {
            deliver(older).await?;
        }
        let mut deliveries: Vec<Delivery> = deliver(&fresh)
            .await?
            .iter()
            .map(|(instance, node, stepped)| Delivery {
                instance: instance.to_string(),
                node: node.clone(),
                outcome: "delivered",
                reason: None,
                applied: Some(crate::applied_of(*instance, stepped)),
            })
            .collect();
        // No wait took it (none open, or all of processes that took it): message start
        // events start instances, as for a message without a time to live.
        if deliveries.is_empty() && self.shared.runtime.is_some() {
            let waiting = self.store().subscriptions(name, key, 1).await?;
            if waiting.is_empty() {
                deliveries = self.message_starts(&message).await?;
            }
        }
        Ok(Correlated {
            name: message.name,
            correlation_key: message.correlation_key,
            deliveries,
            truncated: false,
            buffered: Some(BufferedView {
                key: fresh.key,
                expires_at_ms: fresh.expires_at_ms,
            }),
        })
    }

    /// Starts an instance at each message start event `message` reaches (per process,
    /// its newest live deployment's), the correlation key as its business key: a
    /// deployment already holding an instance under that key starts nothing new
    /// (`already_started`), so a publication repeated after a lost answer does not start
    /// a second instance.
    async fn message_starts(&self, message: &MessageRequest) -> Result<Vec<Delivery>> {
        let runtime = runtime_of(self)?;
        let (name, key) = (message.name.as_str(), message.correlation_key.as_str());
        let mut started = Vec::new();
        for (deployment, node) in runtime.message_starts(name).await? {
            let outcome = runtime
                .start_triggered(
                    None,
                    deployment,
                    &node,
                    message.variables.clone(),
                    Some(key.to_owned()),
                )
                .await;
            let (instance, outcome, reason) = match outcome {
                Ok(id) => (id.to_string(), "started", None),
                Err(qflow_runtime::Error::DuplicateBusinessKey { existing }) => (
                    existing.to_string(),
                    "already_started",
                    Some(format!(
                        "deployment {} already has instance {existing} under business key \
                         `{key}`",
                        deployment.0
                    )),
                ),
                // Retired since it was listed.
                Err(qflow_runtime::Error::Refused { why, .. }) => {
                    (String::new(), "refused", Some(why))
                }
                Err(e) => return Err(e.into()),
            };
            started.push(Delivery {
                instance,
                node,
                outcome,
                reason,
                applied: None,
            });
        }
        Ok(started)
    }

    /// Broadcasts a signal (BPMN's "to whom it may concern"): every instance waiting for
    /// it catches it — a signal catch event, a signal boundary event, a catch racing
    /// after an event-based gateway — and every process whose newest live deployment has
    /// a signal start event for it starts an instance. `id` names the broadcast: the
    /// same id again starts no instance twice, so a caller that lost the answer repeats
    /// the request with its id (the waits that caught the first are no longer waiting;
    /// a non-interrupting boundary still open catches the repetition too). Without an id
    /// the engine draws one.
    pub async fn broadcast_signal(&self, signal: SignalRequest) -> Result<SignalBroadcast> {
        let runtime = runtime_of(self)?;
        check_text(
            "name",
            &signal.name,
            qflow_runtime::signals::SIGNAL_NAME_CHARS_MAX,
        )?;
        check_variables(&signal.variables)?;
        let id = match signal.id {
            Some(id) => {
                check_text("id", &id, SIGNAL_ID_CHARS_MAX)?;
                id
            }
            None => uuid::Uuid::new_v4().to_string(),
        };
        let done = runtime
            .broadcast_signal(&signal.name, &signal.variables, &format!("api/{id}"))
            .await?;
        Ok(SignalBroadcast {
            name: signal.name,
            id,
            caught: done
                .caught
                .into_iter()
                .map(|(instance, node)| SignalCatch {
                    instance: instance.to_string(),
                    node,
                })
                .collect(),
            started: done
                .started
                .into_iter()
                .map(|(deployment, instance)| SignalStart {
                    deployment: deployment.0,
                    instance: instance.to_string(),
                })
                .collect(),
            ended_waits: done.stale,
            missed: done
                .missed
                .into_iter()
                .map(|(instance, node)| SignalCatch {
                    instance: instance.to_string(),
                    node,
                })
                .collect(),
        })
    }
}

/// How often a single-subscriber correlation looks the subscription up again after the
/// wait it found ended before the message reached it.
const CORRELATE_ROUNDS_MAX: usize = 3;

fn no_subscriber(name: &str, key: &str) -> Error {
    Error::NotFound {
        what: "subscription",
        id: format!("for message `{name}` with key `{key}`"),
    }
}

/// Longest message name the API takes, in characters.
pub const MESSAGE_NAME_CHARS_MAX: usize = 256;
