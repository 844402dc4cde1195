//! `qflow.toml`: where the server listens, its limits and its tokens.
//!
//! ```toml
//! listen = "127.0.0.1:8080"
//!
//! [limits]
//! body_bytes = 4194304          # 413 past this
//! request_timeout_ms = 30000    # 408 past this
//! requests_in_flight = 1024     # more wait
//!
//! [[tokens]]
//! name = "ops-team"             # what logs and the audit log call the caller
//! sha256 = "9f86d081…"          # `qflow token hash`: the token itself is never stored
//! scopes = ["read", "operate"]
//! ```
//!
//! Unknown keys are refused with their position, so a misspelt limit is never silently
//! the default. The store is chosen on the command line (`--db`, `--database-url`), and
//! a PostgreSQL URL with a password comes from the environment, never from this file.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use serde::Deserialize;

use crate::auth::{Scope, Token};
pub use crate::console::ConsoleConfig;

/// The server's settings. Every field states its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Where to listen. Default `127.0.0.1:8080` (loopback only).
    pub listen: SocketAddr,
    pub limits: Limits,
    pub tokens: Vec<Token>,
    /// `[console]`: the session cookie and session bounds.
    pub console: ConsoleConfig,
}

/// Request limits, applied to every endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest request body. Default 4 MiB (the engine's own input cap).
    pub body_bytes: usize,
    /// Longest time to answer one request. Default 30,000 ms.
    pub request_timeout_ms: u64,
    /// Most requests served at once; more wait their turn. Default 1,024.
    pub requests_in_flight: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_bytes: 4 << 20,
            request_timeout_ms: 30_000,
            requests_in_flight: 1_024,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            limits: Limits::default(),
            tokens: Vec::new(),
            console: ConsoleConfig::default(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    listen: Option<String>,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    tokens: Vec<TokenEntry>,
    #[serde(default)]
    console: ConsoleConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    name: String,
    sha256: String,
    scopes: Vec<Scope>,
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

impl ServerConfig {
    /// Parses `qflow.toml` text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<ServerConfig, ConfigError> {
        let file: File = toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|span| {
                    let before = &text[..span.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                    format!("{origin}:{line}:{col}")
                })
                .unwrap_or_else(|| origin.to_owned());
            ConfigError(format!("{at}: {}", e.message()))
        })?;
        let mut config = ServerConfig::default();
        if let Some(listen) = file.listen {
            config.listen = listen.parse().map_err(|e| {
                ConfigError(format!(
                    "{origin}: listen: `{listen}` is not an address and port: {e}"
                ))
            })?;
        }
        let l = &file.limits;
        if l.body_bytes == 0 || l.request_timeout_ms == 0 || l.requests_in_flight == 0 {
            return Err(ConfigError(format!(
                "{origin}: limits: body_bytes, request_timeout_ms and requests_in_flight must \
                 be positive"
            )));
        }
        config.limits = file.limits;
        config.console = file.console;
        let mut names = BTreeSet::new();
        for (i, t) in file.tokens.into_iter().enumerate() {
            let field = format!("{origin}: tokens[{i}]");
            let mut sha256 = [0u8; 32];
            hex::decode_to_slice(t.sha256.trim(), &mut sha256).map_err(|_| {
                ConfigError(format!(
                    "{field}.sha256: expected the 64 hex digits of the token's SHA-256 \
                     (`qflow token hash`), not the token itself"
                ))
            })?;
            if t.name.is_empty() || !names.insert(t.name.clone()) {
                return Err(ConfigError(format!(
                    "{field}.name: `{}` is empty or used by another token",
                    t.name
                )));
            }
            if t.scopes.is_empty() {
                return Err(ConfigError(format!(
                    "{field}.scopes: give at least one scope"
                )));
            }
            config.tokens.push(Token {
                name: t.name,
                sha256,
                scopes: t.scopes.into_iter().collect(),
            });
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_parses() {
        let hash = crate::auth::hash_token("s3cret");
        let text = format!(
            "listen = \"127.0.0.1:9000\"\n[limits]\nbody_bytes = 1024\n\n[[tokens]]\nname = \
             \"ci\"\nsha256 = \"{hash}\"\nscopes = [\"read\", \"deploy\"]\n"
        );
        let c = ServerConfig::from_toml(&text, "qflow.toml").unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.limits.body_bytes, 1024);
        assert_eq!(c.limits.request_timeout_ms, 30_000);
        assert_eq!(
            c.tokens[0].scopes,
            BTreeSet::from([Scope::Read, Scope::Deploy])
        );
    }

    #[test]
    fn mistakes_are_refused_with_their_place() {
        let e = ServerConfig::from_toml("[limits]\nbody_byte = 1\n", "q.toml").unwrap_err();
        assert!(
            e.0.starts_with("q.toml:2:1: unknown field `body_byte`"),
            "{e}"
        );
        let e = ServerConfig::from_toml(
            "[[tokens]]\nname = \"a\"\nsha256 = \"plain-token\"\nscopes = [\"read\"]\n",
            "q.toml",
        )
        .unwrap_err();
        assert!(e.0.contains("tokens[0].sha256"), "{e}");
        let e = ServerConfig::from_toml(
            "[[tokens]]\nname = \"a\"\nsha256 = \"00\"\nscopes = [\"admin\"]\n",
            "q.toml",
        )
        .unwrap_err();
        assert!(e.0.contains("unknown variant `admin`"), "{e}");
        let e = ServerConfig::from_toml("listen = \"localhost\"\n", "q.toml").unwrap_err();
        assert!(e.0.contains("listen"), "{e}");
    }
}
