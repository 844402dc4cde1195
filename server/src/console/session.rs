//! Console sessions: a sign-in with a token becomes a random session id in an HttpOnly,
//! SameSite=Strict cookie, and a CSRF token that every state-changing form carries.
//!
//! The server keeps sessions in memory (a restart signs everyone out), keyed by the
//! SHA-256 of the id, so the map never holds the secret the cookie carries. Their number
//! is bounded (`sessions_max`): a sign-in beyond it first drops expired sessions, then the
//! one closest to expiry. A session expires `session_ttl_ms` after sign-in, whatever is
//! done with it. Session ids and CSRF tokens are never logged.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::auth::Scope;

/// What a session lets its holder do, copied from the token it was made with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The token's configured name: what the audit log calls the operator.
    pub name: String,
    pub scopes: BTreeSet<Scope>,
    /// The per-session CSRF token every form posts back.
    pub csrf: String,
    expires: Instant,
}

impl Session {
    pub fn can(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }

    /// Whether `presented` is this session's CSRF token, compared in constant time.
    pub fn csrf_matches(&self, presented: &str) -> bool {
        bool::from(self.csrf.as_bytes().ct_eq(presented.as_bytes()))
    }
}

/// The live sessions of one server.
#[derive(Debug)]
pub struct Sessions {
    live: Mutex<BTreeMap<[u8; 32], Session>>,
    ttl: Duration,
    max: usize,
}

fn key(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

fn random_hex() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes)?;
    Ok(hex::encode(bytes))
}

impl Sessions {
    /// Sessions that live `ttl_ms` after sign-in, at most `max` at once (at least 1).
    pub fn new(ttl_ms: u64, max: usize) -> Sessions {
        Sessions {
            live: Mutex::new(BTreeMap::new()),
            ttl: Duration::from_millis(ttl_ms),
            max: max.max(1),
        }
    }

    /// How long a session lives, for the cookie's `Max-Age`.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A new session for the token `name` with `scopes`: its id (the cookie's value)
    /// and the session.
    pub fn create(
        &self,
        name: &str,
        scopes: &BTreeSet<Scope>,
    ) -> Result<(String, Session), getrandom::Error> {
        let id = random_hex()?;
        let session = Session {
            name: name.to_owned(),
            scopes: scopes.clone(),
            csrf: random_hex()?,
            expires: Instant::now() + self.ttl,
        };
        let mut live = self.live.lock().expect("sessions lock");
        let now = Instant::now();
        if live.len() >= self.max {
            live.retain(|_, s| s.expires > now);
        }
        while live.len() >= self.max {
            let oldest = live
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| *k)
                .expect("a full map has a first entry");
            live.remove(&oldest);
        }
        live.insert(key(&id), session.clone());
        Ok((id, session))
    }

    /// The live session with this id, if any (an expired one is dropped).
    pub fn get(&self, id: &str) -> Option<Session> {
        let k = key(id);
        let mut live = self.live.lock().expect("sessions lock");
        match live.get(&k) {
            Some(s) if s.expires > Instant::now() => Some(s.clone()),
            Some(_) => {
                live.remove(&k);
                None
            }
            None => None,
        }
    }

    /// Ends the session with this id (signing out).
    pub fn remove(&self, id: &str) {
        self.live.lock().expect("sessions lock").remove(&key(id));
    }

    /// How many sessions are held (live or not yet pruned).
    pub fn len(&self) -> usize {
        self.live.lock().expect("sessions lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read() -> BTreeSet<Scope> {
        BTreeSet::from([Scope::Read])
    }

    #[test]
    fn a_session_is_found_by_its_id_only() {
        let sessions = Sessions::new(60_000, 10);
        let (id, s) = sessions.create("ops", &read()).unwrap();
        assert_eq!(id.len(), 64);
        assert_eq!(sessions.get(&id).unwrap().name, "ops");
        assert!(sessions.get(&id[..63]).is_none());
        assert!(sessions.get(&s.csrf).is_none());
        assert!(s.csrf_matches(&s.csrf.clone()));
        assert!(!s.csrf_matches(""));
        assert!(!s.csrf_matches(&id));
        sessions.remove(&id);
        assert!(sessions.get(&id).is_none());
    }

    #[test]
    fn the_number_of_sessions_is_bounded() {
        let sessions = Sessions::new(60_000, 3);
        let ids: Vec<String> = (0..5)
            .map(|i| sessions.create(&format!("t{i}"), &read()).unwrap().0)
            .collect();
        assert_eq!(sessions.len(), 3);
        // The oldest went first.
        assert!(sessions.get(&ids[0]).is_none());
        assert!(sessions.get(&ids[1]).is_none());
        assert!(sessions.get(&ids[4]).is_some());
    }

    #[test]
    fn an_expired_session_is_gone() {
        let sessions = Sessions::new(0, 3);
        let (id, _) = sessions.create("ops", &read()).unwrap();
        assert!(sessions.get(&id).is_none());
        assert!(sessions.is_empty());
    }
}
