//! Channels as the configuration file names them (`[channels.<name>]` in `qflow.toml`):
//! the adapter, its URL and timeouts, the delivery curve, extra root certificates for a
//! counterpart behind a private CA, and where the signing secret comes from — an
//! environment variable or a file, never the file itself, so that a configuration can be
//! shown or logged without leaking it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::adapter::{ExtraRoots, CONNECT_TIMEOUT_MS_DEFAULT};
use crate::curve::DeliveryCurve;
use crate::signature::Secret;
use crate::{Channel, Webhook, RESPONSE_TIMEOUT_MS_DEFAULT};

/// The largest `ca_file` read: a bundle of a hundred certificates fits many times over.
pub const CA_FILE_BYTES_MAX: u64 = 1 << 20;

/// One `[channels.<name>]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelSettings {
    /// `webhook` (the default and, in a configuration file, the only one: an in-process
    /// channel is registered by the host's code).
    #[serde(default = "webhook")]
    pub adapter: String,
    /// Where requests are POSTed: `http://` or `https://`.
    pub url: Option<String>,
    /// Default 2,000 ms.
    #[serde(default = "connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Default 10,000 ms.
    #[serde(default = "response_timeout_ms")]
    pub response_timeout_ms: u64,
    /// The environment variable holding the signing secret.
    pub secret_env: Option<String>,
    /// The file holding the signing secret.
    pub secret_file: Option<PathBuf>,
    /// A PEM file of root certificates to trust beside the web PKI's, for a counterpart
    /// whose certificate a private CA issued; read at start. Only for an `https://` url.
    /// Default: none.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    #[serde(default)]
    pub delivery: DeliveryCurve,
}

fn webhook() -> String {
    "webhook".to_owned()
}

fn connect_timeout_ms() -> u64 {
    CONNECT_TIMEOUT_MS_DEFAULT
}

fn response_timeout_ms() -> u64 {
    RESPONSE_TIMEOUT_MS_DEFAULT
}

/// A channel the configuration does not describe well enough; `field` is its path
/// (`channels.payments.url`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    pub field: String,
    pub message: String,
}

/// The longest response timeout a channel may have: the dispatcher's lease must outlast
/// it (`DispatcherConfig::lease_ms`, 60 s by default).
pub const RESPONSE_TIMEOUT_MS_MAX: u64 = 50_000;

impl ChannelSettings {
    /// Builds the channel `name`, reading its secret through `env` (the process
    /// environment, in production). The secret's text never appears in an error.
    pub fn build(
        &self,
        name: &str,
        env: &dyn Fn(&str) -> Option<String>,
        now_s: Arc<dyn Fn() -> i64 + Send + Sync>,
    ) -> Result<Channel, ConfigError> {
        let err = |field: &str, message: String| ConfigError {
            field: format!("channels.{name}.{field}"),
            message,
        };
        if name.starts_with("qflow:") {
            return Err(ConfigError {
                field: format!("channels.{name}"),
                message: "channel names starting with `qflow:` are the engine's own (signal \
                          throws travel as `qflow:signal`, call activities as `qflow:call`); choose another name"
                    .to_owned(),
            });
        }
        if self.adapter != "webhook" {
            return Err(err(
                "adapter",
                format!(
                    "`{}` is not an adapter a configuration file can name: `webhook` is; an \
                     in-process channel is registered by the host's code",
                    self.adapter
                ),
            ));
        }
        let url = self
            .url
            .as_deref()
            .ok_or_else(|| err("url", "a webhook channel needs a url".to_owned()))?;
        self.delivery.validate().map_err(|m| err("delivery", m))?;
        if self.connect_timeout_ms == 0 {
            return Err(err("connect_timeout_ms", "must be at least 1".to_owned()));
        }
        if self.response_timeout_ms == 0 || self.response_timeout_ms > RESPONSE_TIMEOUT_MS_MAX {
            return Err(err(
                "response_timeout_ms",
                format!("must be in 1..={RESPONSE_TIMEOUT_MS_MAX}"),
            ));
        }
        let secret = match (&self.secret_env, &self.secret_file) {
            (Some(_), Some(_)) => {
                return Err(err(
                    "secret_env",
                    "give the secret through secret_env or secret_file, not both".to_owned(),
                ))
            }
            (Some(var), None) => {
                let text = env(var).ok_or_else(|| {
                    err(
                        "secret_env",
                        format!("the environment variable `{var}` is not set"),
                    )
                })?;
                Some(Secret::parse(&text).map_err(|m| err("secret_env", m))?)
            }
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    err(
                        "secret_file",
                        format!("`{}` cannot be read: {e}", path.display()),
                    )
                })?;
                Some(Secret::parse(&text).map_err(|m| err("secret_file", m))?)
            }
            (None, None) => None,
        };
        let mut webhook = Webhook::builder(url)
            .connect_timeout(Duration::from_millis(self.connect_timeout_ms))
            .response_timeout(Duration::from_millis(self.response_timeout_ms))
            .secret(secret)
            .clock(now_s);
        if let Some(path) = &self.ca_file {
            if !url.starts_with("https://") {
                return Err(err(
                    "ca_file",
                    "extra root certificates are for an https:// url; this channel's is not"
                        .to_owned(),
                ));
            }
            webhook = webhook.trust(read_roots(path).map_err(|m| err("ca_file", m))?);
        }
        let adapter = webhook.build().map_err(|m| err("url", m))?;
        Ok(Channel {
            name: name.to_owned(),
            adapter: Arc::new(adapter),
            curve: self.delivery.clone(),
            response_timeout_ms: self.response_timeout_ms,
        })
    }
}

/// Reads and checks a `ca_file`; the message names the file.
fn read_roots(path: &std::path::Path) -> Result<ExtraRoots, String> {
    use std::io::Read;
    let shown = path.display();
    let mut pem = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(CA_FILE_BYTES_MAX + 1).read_to_end(&mut pem))
        .map_err(|e| format!("`{shown}` cannot be read: {e}"))?;
    if pem.len() as u64 > CA_FILE_BYTES_MAX {
        return Err(format!(
            "`{shown}` is longer than {CA_FILE_BYTES_MAX} bytes"
        ));
    }
    ExtraRoots::from_pem(&pem).map_err(|m| format!("`{shown}` {m}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(toml_text: &str) -> ChannelSettings {
        toml::from_str(toml_text).unwrap()
    }

    fn build(s: &ChannelSettings) -> Result<Channel, ConfigError> {
        let env = |k: &str| {
            (k == "PAY_SECRET").then(|| "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned())
        };
        s.build("payments", &env, Arc::new(|| 0))
    }

    #[test]
    fn a_webhook_channel_builds_with_its_secret_from_the_environment() {
        let s = settings(
            r#"url = "https://pay.example/qflow"
               secret_env = "PAY_SECRET"
               [delivery]
               ceiling = 8"#,
        );
        let c = build(&s).unwrap();
        assert_eq!(c.curve.ceiling, Some(8));
        assert_eq!(c.response_timeout_ms, 10_000);
    }

    #[test]
    fn bad_settings_name_their_field_and_never_the_secret() {
        let cases = [
            (r#"adapter = "in_process""#, "channels.payments.adapter"),
            (r#"secret_env = "PAY_SECRET""#, "channels.payments.url"),
            (r#"url = "ftp://x""#, "channels.payments.url"),
            (
                r#"url = "http://x"
                secret_env = "NOPE""#,
                "channels.payments.secret_env",
            ),
            (
                r#"url = "http://x"
                secret_env = "PAY_SECRET"
                secret_file = "/x""#,
                "channels.payments.secret_env",
            ),
            (
                r#"url = "http://x"
                secret_file = "/nonexistent/secret""#,
                "channels.payments.secret_file",
            ),
            (
                r#"url = "http://x"
                response_timeout_ms = 0"#,
                "channels.payments.response_timeout_ms",
            ),
            (
                r#"url = "http://x"
                [delivery]
                ceiling = 0"#,
                "channels.payments.delivery",
            ),
        ];
        for (text, field) in cases {
            let e = match build(&settings(text)) {
                Ok(_) => panic!("{text} built"),
                Err(e) => e,
            };
            assert_eq!(e.field, field, "{text}: {e}");
            assert!(!e.to_string().contains("MfKQ9r8"), "{e}");
        }
        assert!(toml::from_str::<ChannelSettings>("url = \"http://x\"\nsecrett = 1").is_err());
    }

    /// Builds `payments` with `ca_file` holding `pem` (`None`: a path that does not
    /// exist) and `url`.
    fn with_ca_file(url: &str, pem: Option<&str>) -> Result<Channel, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        if let Some(pem) = pem {
            std::fs::write(&path, pem).unwrap();
        }
        let text = format!(
            "url = \"{url}\"\nca_file = {:?}",
            path.display().to_string()
        );
        build(&settings(&text))
    }

    #[test]
    fn a_ca_file_of_a_generated_ca_builds() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = params.self_signed(&key).unwrap();
        // A key beside the certificate is skipped, as in a combined PEM file.
        let pem = format!("{}{}", key.serialize_pem(), ca.pem());
        assert!(with_ca_file("https://pay.example/qflow", Some(&pem)).is_ok());
        assert_eq!(ExtraRoots::from_pem(pem.as_bytes()).unwrap().len(), 1);
    }

    #[test]
    fn a_bad_ca_file_is_refused_with_its_field_and_what_is_wrong() {
        let not_der = "-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n";
        let not_base64 = "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
        let cases = [
            ("https://x", None, "cannot be read"),
            (
                "https://x",
                Some("no certificate here\n"),
                "holds no PEM `CERTIFICATE` block",
            ),
            ("https://x", Some(""), "holds no PEM `CERTIFICATE` block"),
            ("https://x", Some(not_base64), "is not PEM certificates"),
            (
                "https://x",
                Some(not_der),
                "holds a certificate rustls cannot take as a root",
            ),
            ("http://x", Some(not_der), "for an https:// url"),
        ];
        for (url, pem, says) in cases {
            let e = match with_ca_file(url, pem) {
                Ok(_) => panic!("{pem:?} built"),
                Err(e) => e,
            };
            assert_eq!(e.field, "channels.payments.ca_file", "{e}");
            assert!(e.message.contains(says), "{pem:?}: {e}");
        }
    }
}
