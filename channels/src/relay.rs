//! The relay (SPEC C5): the one library call that hands a counterpart's answer to the
//! engine, with an honest verdict. The dispatcher calls it for synchronous answers; the
//! HTTP relay endpoint (`POST /v1/channel-answers`, through `qflow-ops`) for answers that
//! come later.

use qflow_core::{CallKey, Input, Verdict};
use qflow_runtime::Runtime;
use uuid::Uuid;

use crate::adapter::Answer;

/// What a relay came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relayed {
    pub verdict: Verdict,
    /// Why, in words: which attempt is live, what is pending.
    pub reason: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The answer cannot be taken as it is (its variables are over the engine's bounds);
    /// nothing changed. The counterpart must not send it again unchanged.
    #[error("the answer is refused: {0}")]
    Refused(String),
    /// The engine could not decide (the store failed, the runtime is shutting down);
    /// nothing changed, and the relay may be tried again.
    #[error(transparent)]
    Runtime(qflow_runtime::Error),
}

/// Hands `answer` to the attempt whose idempotency key is `key`. The input is stepped
/// under the instance's claim; an answer the step refuses is judged again on the state
/// that refused it, so the verdict is the engine's, not a guess made before the step.
pub async fn relay(runtime: &Runtime, key: &str, answer: Answer) -> Result<Relayed, RelayError> {
    let unknown = |why: String| {
        Ok(Relayed {
            verdict: Verdict::Unknown,
            reason: why,
        })
    };
    let Some(k) = CallKey::parse(key) else {
        return unknown(format!(
            "`{key}` is not an idempotency key this engine issued"
        ));
    };
    let Ok(instance) = Uuid::parse_str(&k.instance) else {
        return unknown(format!("`{key}` names no instance of this engine"));
    };
    let input = match answer.bpmn_error {
        Some(e) => Input::ChannelBpmnError {
            call: k.call,
            attempt: k.attempt,
            code: e.code,
            message: e.message,
            variables: answer.variables,
        },
        None => Input::ChannelAnswered {
            call: k.call,
            attempt: k.attempt,
            variables: answer.variables,
        },
    };
    match runtime.send(instance, input).await {
        Ok(()) => Ok(Relayed {
            verdict: Verdict::Resumed,
            reason: format!("attempt {} of call {} took the answer", k.attempt, k.call),
        }),
        Err(qflow_runtime::Error::UnknownInstance(_)) => unknown(format!("no instance {instance}")),
        Err(qflow_runtime::Error::Refused { why, .. }) => {
            judge(runtime, instance, &k).await.map(|judged| {
                judged.unwrap_or(Relayed {
                    verdict: Verdict::Unknown,
                    reason: why,
                })
            })
        }
        Err(qflow_runtime::Error::Core(qflow_core::Error::VariablesRefused(why))) => {
            Err(RelayError::Refused(why.to_string()))
        }
        Err(e) => Err(RelayError::Runtime(e)),
    }
}

/// The verdict of the stored state on attempt `k`, read under no claim (the step that
/// refused the answer already had it; this only puts its refusal into words). Read
/// through the runtime, so the definition comes from its cache instead of being parsed
/// again for every refused answer.
async fn judge(
    runtime: &Runtime,
    instance: Uuid,
    k: &CallKey,
) -> Result<Option<Relayed>, RelayError> {
    let claim = match runtime.claim(instance).await {
        Ok(claim) => claim,
        Err(qflow_runtime::Error::UnknownInstance(_)) => return Ok(None),
        Err(e) => return Err(RelayError::Runtime(e)),
    };
    let (verdict, reason) = qflow_core::verdict(&claim.def, &claim.snapshot, k.call, k.attempt);
    if verdict == Verdict::Resumed {
        // Not possible for a state the step refused (attempts only move forward and a
        // call number is never reused); say so rather than claim the answer was taken.
        return Ok(None);
    }
    Ok(Some(Relayed { verdict, reason }))
}
