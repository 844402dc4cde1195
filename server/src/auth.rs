//! Bearer tokens with scopes.
//!
//! The server keeps only the SHA-256 of each token (the configuration holds hashes, never
//! tokens). A presented token is hashed and compared with every configured hash in
//! constant time, without stopping at a match, so neither the comparison nor the loop
//! tells an attacker how close a guess was. Tokens are never logged: the caller is named
//! in logs and the audit log by the token's configured `name`.

use std::collections::BTreeSet;
use std::marker::PhantomData;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::problem::Problem;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Read deployments, instances, history, incidents, the audit log and metrics.
    Read,
    /// Start, resume, retry-now, cancel and migrate instances.
    Operate,
    /// Deploy and retire models.
    Deploy,
    /// Fetch and complete pull tasks (external workers), and relay channel-call answers
    /// (counterparts).
    Worker,
}

impl Scope {
    pub const ALL: [Scope; 4] = [Scope::Read, Scope::Operate, Scope::Deploy, Scope::Worker];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Operate => "operate",
            Scope::Deploy => "deploy",
            Scope::Worker => "worker",
        }
    }
}

/// A configured token: its name, the SHA-256 of its secret, its scopes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub name: String,
    pub sha256: [u8; 32],
    pub scopes: BTreeSet<Scope>,
}

/// The SHA-256 of a token, as the configuration stores it (lowercase hex).
pub fn hash_token(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// A fresh random token: `qf_` and 32 random bytes in hex.
pub fn generate_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes)?;
    Ok(format!("qf_{}", hex::encode(bytes)))
}

/// The configured tokens.
#[derive(Debug, Default)]
pub struct Tokens(Vec<Token>);

impl Tokens {
    pub fn new(tokens: Vec<Token>) -> Tokens {
        Tokens(tokens)
    }

    /// The token whose hash matches `secret`'s, looked up in constant time per entry.
    pub fn find(&self, secret: &str) -> Option<&Token> {
        let presented: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        let mut found = None;
        for token in &self.0 {
            if bool::from(token.sha256.ct_eq(&presented)) {
                found = Some(token);
            }
        }
        found
    }
}

/// Names a scope at the type level, so a handler states what it needs in its signature.
pub trait Needs: Send + Sync + 'static {
    const SCOPE: Scope;
}

pub struct ReadScope;
pub struct OperateScope;
pub struct DeployScope;
pub struct WorkerScope;

impl Needs for ReadScope {
    const SCOPE: Scope = Scope::Read;
}
impl Needs for OperateScope {
    const SCOPE: Scope = Scope::Operate;
}
impl Needs for DeployScope {
    const SCOPE: Scope = Scope::Deploy;
}
impl Needs for WorkerScope {
    const SCOPE: Scope = Scope::Worker;
}

/// The authenticated caller of a request that needs scope `S`: 401 without a valid
/// bearer token, 403 when the token lacks the scope.
pub struct Caller<S: Needs> {
    pub name: String,
    _scope: PhantomData<S>,
}

/// What the extractor needs from the server state.
pub trait HasTokens {
    fn tokens(&self) -> &Arc<Tokens>;
}

impl<St, S> FromRequestParts<St> for Caller<S>
where
    St: HasTokens + Send + Sync,
    S: Needs,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &St) -> Result<Self, Problem> {
        let token = bearer_token(parts, state.tokens())?;
        if !token.scopes.contains(&S::SCOPE) {
            return Err(Problem::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "token `{}` lacks the `{}` scope this operation needs",
                    token.name,
                    S::SCOPE.as_str()
                ),
            ));
        }
        Ok(Caller {
            name: token.name.clone(),
            _scope: PhantomData,
        })
    }
}

/// The configured token the request's `Authorization: Bearer` header presents: 401
/// without the header, with another scheme, or with a secret no token has.
fn bearer_token<'t>(parts: &Parts, tokens: &'t Tokens) -> Result<&'t Token, Problem> {
    let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
        return Err(Problem::unauthorized(
            "this endpoint needs a bearer token: `Authorization: Bearer <token>`",
        ));
    };
    let secret = value
        .to_str()
        .ok()
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
        .ok_or_else(|| {
            Problem::unauthorized("the Authorization header must be `Bearer <token>`")
        })?;
    tokens
        .find(secret)
        .ok_or_else(|| Problem::unauthorized("the bearer token is not valid"))
}

/// The caller of a request any valid token may make, whatever its scopes (the Camunda 8
/// probes a client calls on start, `GET /v2/topology` and `/v2/license`): 401 without
/// one.
pub struct Authenticated {
    pub name: String,
}

impl<St> FromRequestParts<St> for Authenticated
where
    St: HasTokens + Send + Sync,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &St) -> Result<Self, Problem> {
        let token = bearer_token(parts, state.tokens())?;
        Ok(Authenticated {
            name: token.name.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(name: &str, secret: &str) -> Token {
        let mut sha256 = [0u8; 32];
        hex::decode_to_slice(hash_token(secret), &mut sha256).unwrap();
        Token {
            name: name.to_owned(),
            sha256,
            scopes: BTreeSet::from([Scope::Read]),
        }
    }

    #[test]
    fn a_token_is_found_by_its_hash_only() {
        let tokens = Tokens::new(vec![token("a", "alpha"), token("b", "beta")]);
        assert_eq!(tokens.find("beta").map(|t| t.name.as_str()), Some("b"));
        assert!(tokens.find("bet").is_none());
        assert!(tokens.find("").is_none());
        // The hash itself is not a token.
        assert!(tokens.find(&hash_token("alpha")).is_none());
    }

    #[test]
    fn generated_tokens_differ_and_hash_to_hex() {
        let a = generate_token().unwrap();
        let b = generate_token().unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with("qf_") && a.len() == 67, "{a}");
        assert_eq!(hash_token(&a).len(), 64);
    }
}
