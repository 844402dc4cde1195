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
//!
//! [retention]                   # how long ended instances are kept (O7)
//! default = "P7D"               # an ISO-8601 duration, or "forever"
//! processes = { audit-trail = "forever", quote = "PT6H" }
//! deployments = { "12" = "P30D" }  # by version; wins over `processes`
//! batch = 1000                  # instances per purge transaction
//! interval_ms = 60000           # between purge rounds
//!
//! [delegates]                   # Camunda 7 Java bindings (docs/vendor-mappings.md)
//! "com.acme.ChargeCard" = { topic = "payments" }   # another pull topic
//! "${mailer}" = { task = "send-mail" }             # a handler the host registered
//!
//! [journal]                     # the input journal replay checks (docs/replay.md)
//! enabled = true                # every process's instances; or instead:
//! processes = ["order", "refund"]  # these processes' instances only
//! ```
//!
//! Unknown keys are refused with their position, so a misspelt limit is never silently
//! the default. The store is chosen on the command line (`--db`, `--database-url`), and
//! a PostgreSQL URL with a password comes from the environment, never from this file.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use std::collections::BTreeMap;

use qflow_runtime::retention::RetentionConfig;
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
    /// When ended instances are purged. Default: after 7 days.
    pub retention: RetentionConfig,
    /// `[channels.<name>]`: the channels channel-call tasks may name (docs/channels.md).
    /// Default none: a model with a channel call is refused at deploy.
    pub channels: BTreeMap<String, qflow_channels::ChannelSettings>,
    /// `lifecycle_channel`: the channel (one of `channels`) that receives every
    /// instance's retry lifecycle events (C10). Default none.
    pub lifecycle_channel: Option<String>,
    /// `[delegates]`: where Camunda 7 Java bindings run instead of their derived pull
    /// topics, by binding text. Default none.
    pub delegates: qflow_runtime::delegates::DelegateRoutes,
    /// `[journal]`: which instances' steps write the input journal (SPEC G3,
    /// `docs/replay.md`). Default off.
    pub journal: qflow_runtime::journal::JournalPolicy,
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
            retention: RetentionConfig::default(),
            channels: BTreeMap::new(),
            lifecycle_channel: None,
            delegates: BTreeMap::new(),
            journal: qflow_runtime::journal::JournalPolicy::Off,
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
    retention: Option<RetentionEntry>,
    #[serde(default)]
    channels: BTreeMap<String, qflow_channels::ChannelSettings>,
    lifecycle_channel: Option<String>,
    #[serde(default)]
    delegates: BTreeMap<String, DelegateEntry>,
    journal: Option<JournalEntry>,
}

/// `[journal]`: `enabled` for every process, or `processes` for some.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JournalEntry {
    enabled: Option<bool>,
    processes: Option<Vec<String>>,
}

/// One `[delegates]` route: exactly one of its fields.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DelegateEntry {
    topic: Option<String>,
    task: Option<String>,
}

/// The longest route target (topic or handler name), in characters: the loader's bound on
/// a pull topic, which a routed topic must keep too.
const ROUTE_NAME_CHARS_MAX: usize = qflow_loader::model::PULL_TOPIC_CHARS_MAX;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RetentionEntry {
    default: Option<String>,
    #[serde(default)]
    processes: BTreeMap<String, String>,
    #[serde(default)]
    deployments: BTreeMap<String, String>,
    batch: Option<u32>,
    interval_ms: Option<u64>,
}

/// A retention as configured: an ISO-8601 duration of days, hours, minutes and seconds
/// (`P7D`, `PT12H`), or `forever`. In milliseconds; `forever` is `i64::MAX`.
pub fn parse_retention(text: &str) -> Result<i64, String> {
    if text.trim() == "forever" {
        return Ok(i64::MAX);
    }
    let d = qflow_loader::iso8601::parse_duration(text)
        .map_err(|e| format!("{e}; or write \"forever\""))?;
    i64::try_from(d.0).map_err(|_| format!("`{text}` is longer than this engine can count"))
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
        for name in file.channels.keys() {
            if name.is_empty() || name.chars().count() > 256 || name.chars().any(char::is_control) {
                return Err(ConfigError(format!(
                    "{origin}: channels.{name:?}: a channel name is 1 to 256 characters \
                     without control characters"
                )));
            }
        }
        config.channels = file.channels;
        if let Some(name) = &file.lifecycle_channel {
            if !config.channels.contains_key(name) {
                return Err(ConfigError(format!(
                    "{origin}: lifecycle_channel: `{name}` is not one of the [channels.<name>] \
                     tables"
                )));
            }
        }
        config.lifecycle_channel = file.lifecycle_channel;
        for (binding, entry) in file.delegates {
            use qflow_runtime::delegates::DelegateRoute;
            let at = format!("{origin}: delegates.{binding:?}");
            let route = match (entry.topic, entry.task) {
                (Some(t), None) => DelegateRoute::Topic(t),
                (None, Some(t)) => DelegateRoute::Task(t),
                _ => {
                    return Err(ConfigError(format!(
                        "{at}: give exactly one of `topic` (a pull topic) and `task` (a \
                         registered handler)"
                    )))
                }
            };
            let (DelegateRoute::Topic(name) | DelegateRoute::Task(name)) = &route;
            let name_ok = |n: &str| {
                !n.trim().is_empty()
                    && n.trim() == n
                    && n.chars().count() <= ROUTE_NAME_CHARS_MAX
                    && !n.chars().any(char::is_control)
            };
            if !name_ok(name) {
                return Err(ConfigError(format!(
                    "{at}: `{name}` is not a name: 1 to {ROUTE_NAME_CHARS_MAX} characters, no \
                     control characters, no spaces around it"
                )));
            }
            if binding.trim() != binding || binding.is_empty() {
                return Err(ConfigError(format!(
                    "{at}: write the binding as the model does, without spaces around it \
                     (`com.acme.ChargeCard`, `${{chargeCard}}`)"
                )));
            }
            config.delegates.insert(binding, route);
        }
        if let Some(j) = file.journal {
            use qflow_runtime::journal::JournalPolicy;
            let at = format!("{origin}: journal");
            config.journal = match (j.enabled, j.processes) {
                (Some(true), None) => JournalPolicy::All,
                (Some(false), None) | (None, None) => JournalPolicy::Off,
                (None, Some(ids)) => {
                    if ids.is_empty() {
                        return Err(ConfigError(format!(
                            "{at}.processes: name at least one process (or leave [journal] out \
                             to keep it off)"
                        )));
                    }
                    let mut set = BTreeSet::new();
                    for id in ids {
                        if id.trim().is_empty()
                            || id.trim() != id
                            || id.chars().any(char::is_control)
                        {
                            return Err(ConfigError(format!(
                                "{at}.processes: `{id}` is not a BPMN process id"
                            )));
                        }
                        if !set.insert(id.clone()) {
                            return Err(ConfigError(format!(
                                "{at}.processes: `{id}` is named twice"
                            )));
                        }
                    }
                    JournalPolicy::Processes(set)
                }
                (Some(_), Some(_)) => {
                    return Err(ConfigError(format!(
                        "{at}: give `enabled` (every process) or `processes` (these), not both"
                    )))
                }
            };
        }
        if let Some(r) = file.retention {
            let field = format!("{origin}: retention");
            if let Some(d) = &r.default {
                config.retention.default_ms =
                    parse_retention(d).map_err(|e| ConfigError(format!("{field}.default: {e}")))?;
            }
            for (process, text) in &r.processes {
                let ms = parse_retention(text)
                    .map_err(|e| ConfigError(format!("{field}.processes.{process}: {e}")))?;
                config.retention.per_process.insert(process.clone(), ms);
            }
            for (version, text) in &r.deployments {
                let at = format!("{field}.deployments.{version}");
                let id: i64 = version.parse().ok().filter(|v| *v >= 1).ok_or_else(|| {
                    ConfigError(format!("{at}: `{version}` is not a deployment version"))
                })?;
                let ms = parse_retention(text).map_err(|e| ConfigError(format!("{at}: {e}")))?;
                config
                    .retention
                    .per_deployment
                    .insert(qflow_store::DeploymentId(id), ms);
            }
            match r.batch {
                Some(0) => {
                    return Err(ConfigError(format!(
                        "{field}.batch: must be positive (at most {})",
                        qflow_store::PURGE_LIMIT_MAX
                    )))
                }
                Some(b) => config.retention.batch_max = b.min(qflow_store::PURGE_LIMIT_MAX),
                None => {}
            }
            match r.interval_ms {
                Some(0) => {
                    return Err(ConfigError(format!(
                        "{field}.interval_ms: must be positive"
                    )))
                }
                Some(i) => config.retention.interval_ms = i,
                None => {}
            }
        }
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
    fn the_journal_is_off_unless_switched_on_for_all_or_for_named_processes() {
        use qflow_runtime::journal::JournalPolicy;
        let parse = |t: &str| ServerConfig::from_toml(t, "q.toml");
        assert_eq!(parse("").unwrap().journal, JournalPolicy::Off);
        assert_eq!(
            parse("[journal]\nenabled = true\n").unwrap().journal,
            JournalPolicy::All
        );
        assert_eq!(
            parse("[journal]\nenabled = false\n").unwrap().journal,
            JournalPolicy::Off
        );
        assert_eq!(
            parse("[journal]\nprocesses = [\"order\", \"refund\"]\n")
                .unwrap()
                .journal,
            JournalPolicy::Processes(["order".to_owned(), "refund".to_owned()].into())
        );
        for (text, says) in [
            (
                "[journal]\nenabled = true\nprocesses = [\"a\"]\n",
                "q.toml: journal: give `enabled`",
            ),
            (
                "[journal]\nprocesses = []\n",
                "q.toml: journal.processes: name at least one",
            ),
            (
                "[journal]\nprocesses = [\"a\", \"a\"]\n",
                "`a` is named twice",
            ),
            (
                "[journal]\nprocesses = [\" a\"]\n",
                "is not a BPMN process id",
            ),
            ("[journal]\nenable = true\n", "unknown field `enable`"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn retention_is_configured_by_duration_or_forever() {
        let text = "[retention]\ndefault = \"PT12H\"\nprocesses = { audit = \"forever\", quote = \"P2D\" }\ndeployments = { \"3\" = \"PT1M\" }\nbatch = 50\n";
        let c = ServerConfig::from_toml(text, "q.toml").unwrap();
        assert_eq!(c.retention.default_ms, 12 * 3_600_000);
        assert_eq!(c.retention.per_process["audit"], i64::MAX);
        assert_eq!(c.retention.per_process["quote"], 2 * 86_400_000);
        assert_eq!(
            c.retention.per_deployment[&qflow_store::DeploymentId(3)],
            60_000
        );
        assert_eq!(c.retention.batch_max, 50);
        assert_eq!(c.retention.interval_ms, 60_000, "the default stays");
        assert_eq!(
            ServerConfig::from_toml("", "q.toml").unwrap().retention,
            RetentionConfig::default()
        );
        for (bad, field) in [
            ("[retention]\ndefault = \"P1M\"\n", "retention.default"),
            ("[retention]\ndefault = \"7 days\"\n", "retention.default"),
            (
                "[retention]\nprocesses = { a = \"x\" }\n",
                "retention.processes.a",
            ),
            ("[retention]\nbatch = 0\n", "retention.batch"),
            (
                "[retention]\ndeployments = { v3 = \"P1D\" }\n",
                "retention.deployments.v3",
            ),
            ("[retention]\ninterval_ms = 0\n", "retention.interval_ms"),
        ] {
            let e = ServerConfig::from_toml(bad, "q.toml").unwrap_err();
            assert!(e.0.contains(field), "{bad}: {e}");
        }
        let e = ServerConfig::from_toml("[retention]\nkeep = \"P1D\"\n", "q.toml").unwrap_err();
        assert!(e.0.contains("unknown field `keep`"), "{e}");
    }

    #[test]
    fn delegate_routes_name_one_target_each() {
        use qflow_runtime::delegates::DelegateRoute;
        let c = ServerConfig::from_toml(
            "[delegates]\n\"com.acme.ChargeCard\" = { topic = \"payments\" }\n\"${mailer}\" = { task = \"send-mail\" }\n",
            "q.toml",
        )
        .unwrap();
        assert_eq!(
            c.delegates["com.acme.ChargeCard"],
            DelegateRoute::Topic("payments".into())
        );
        assert_eq!(
            c.delegates["${mailer}"],
            DelegateRoute::Task("send-mail".into())
        );
        for (bad, why) in [
            (
                "[delegates]\n\"a.B\" = { topic = \"x\", task = \"y\" }\n",
                "exactly one",
            ),
            ("[delegates]\n\"a.B\" = {}\n", "exactly one"),
            ("[delegates]\n\"a.B\" = { topic = \"\" }\n", "is not a name"),
            (
                "[delegates]\n\" a.B\" = { topic = \"x\" }\n",
                "without spaces",
            ),
            (
                "[delegates]\n\"a.B\" = { channel = \"x\" }\n",
                "unknown field `channel`",
            ),
        ] {
            let e = ServerConfig::from_toml(bad, "q.toml").unwrap_err();
            assert!(e.0.contains(why), "{bad}: {e}");
            assert!(e.0.starts_with("q.toml"), "{e}");
        }
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
        let e = ServerConfig::from_toml("[console]\nsecure = true\n", "q.toml").unwrap_err();
        assert!(e.0.starts_with("q.toml:2:1: unknown field `secure`"), "{e}");
    }

    #[test]
    fn channels_are_read_with_their_settings_and_mistakes_name_the_field() {
        let c = ServerConfig::from_toml(
            "[channels.payments]\nurl = \"https://pay.example/q\"\nsecret_env = \"PAY\"\n\
             [channels.payments.delivery]\nceiling = 5\n",
            "q.toml",
        )
        .unwrap();
        let p = &c.channels["payments"];
        assert_eq!(p.url.as_deref(), Some("https://pay.example/q"));
        assert_eq!(p.delivery.ceiling, Some(5));
        let e =
            ServerConfig::from_toml("[channels.p]\nurl = \"x\"\nsecret = \"inline\"\n", "q.toml")
                .unwrap_err();
        assert!(e.0.starts_with("q.toml:3:1: unknown field `secret`"), "{e}");
        let e =
            ServerConfig::from_toml("[channels.p.delivery]\nceilin = 1\n", "q.toml").unwrap_err();
        assert!(e.0.contains("unknown field `ceilin`"), "{e}");
    }

    #[test]
    fn the_console_section_sets_the_cookie_and_session_bounds() {
        let c = ServerConfig::from_toml(
            "[console]\nsecure_cookie = true\nsessions_max = 5\n",
            "q.toml",
        )
        .unwrap();
        assert!(c.console.secure_cookie);
        assert_eq!(c.console.sessions_max, 5);
        assert_eq!(
            c.console.session_ttl_ms,
            ConsoleConfig::default().session_ttl_ms
        );
        assert_eq!(
            ServerConfig::from_toml("", "q.toml").unwrap().console,
            ConsoleConfig::default()
        );
    }
}
