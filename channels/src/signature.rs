//! Request signatures per the Standard Webhooks scheme (SPEC C9): a counterpart verifies
//! that a request came from this engine, unaltered, and recently.
//!
//! Three headers: `webhook-id` (the request's idempotency key), `webhook-timestamp` (Unix
//! seconds) and `webhook-signature: v1,<base64 HMAC-SHA256>` over
//! `"{webhook-id}.{webhook-timestamp}.{body}"`, keyed with the channel's secret. A secret
//! is written as Standard Webhooks writes it, `whsec_` and the base64 of its bytes; any
//! other text is taken as the key bytes themselves.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// A channel's signing secret. Never printed: `Debug` shows only that there is one.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// The fewest key bytes a secret may have (HMAC-SHA256's security rests on the key).
pub const SECRET_BYTES_MIN: usize = 16;

impl Secret {
    /// Reads a secret as text: `whsec_<base64>` or the raw key. Surrounding whitespace
    /// (a trailing newline of a secret file) is dropped.
    pub fn parse(text: &str) -> Result<Secret, String> {
        let text = text.trim();
        let bytes = match text.strip_prefix("whsec_") {
            Some(b64) => STANDARD
                .decode(b64)
                .map_err(|_| "a `whsec_` secret is not valid base64".to_owned())?,
            None => text.as_bytes().to_vec(),
        };
        if bytes.len() < SECRET_BYTES_MIN {
            return Err(format!(
                "the secret has {} bytes; at least {SECRET_BYTES_MIN} are needed",
                bytes.len()
            ));
        }
        Ok(Secret(bytes))
    }

    /// The `webhook-signature` header value for this request.
    pub fn sign(&self, id: &str, timestamp_s: i64, body: &[u8]) -> String {
        format!("v1,{}", STANDARD.encode(self.mac(id, timestamp_s, body)))
    }

    /// Whether `header` (one or more space-separated `v1,<sig>` entries, as the scheme
    /// allows during a key rotation) holds a valid signature of this request. Compared
    /// in constant time.
    pub fn verify(&self, id: &str, timestamp_s: i64, body: &[u8], header: &str) -> bool {
        header.split(' ').any(|entry| {
            let Some(sig) = entry.strip_prefix("v1,") else {
                return false;
            };
            let Ok(sig) = STANDARD.decode(sig) else {
                return false;
            };
            let mut mac = self.keyed();
            mac.update(&Self::message(id, timestamp_s, body));
            mac.verify_slice(&sig).is_ok()
        })
    }

    fn keyed(&self) -> Hmac<Sha256> {
        // HMAC takes a key of any length.
        Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC accepts every key length")
    }

    fn mac(&self, id: &str, timestamp_s: i64, body: &[u8]) -> Vec<u8> {
        let mut mac = self.keyed();
        mac.update(&Self::message(id, timestamp_s, body));
        mac.finalize().into_bytes().to_vec()
    }

    fn message(id: &str, timestamp_s: i64, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::with_capacity(id.len() + body.len() + 24);
        m.extend_from_slice(id.as_bytes());
        m.push(b'.');
        m.extend_from_slice(timestamp_s.to_string().as_bytes());
        m.push(b'.');
        m.extend_from_slice(body);
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification: its secret, id, timestamp
    /// and payload give its published signature.
    #[test]
    fn the_specification_example_verifies() {
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
        let ts = 1614265330;
        let body = br#"{"test": 2432232314}"#;
        let sig = secret.sign(id, ts, body);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert!(secret.verify(id, ts, body, &sig));
        assert!(secret.verify(id, ts, body, &format!("v1,bm90IGl0 {sig}")));
        assert!(!secret.verify(id, ts + 1, body, &sig));
        assert!(!secret.verify(id, ts, b"{}", &sig));
        assert!(!secret.verify(id, ts, body, "v2,abc"));
    }

    #[test]
    fn short_or_malformed_secrets_are_refused_and_never_printed() {
        assert!(Secret::parse("whsec_!!").unwrap_err().contains("base64"));
        assert!(Secret::parse("short").unwrap_err().contains("16"));
        let s = Secret::parse("a-raw-secret-of-enough-bytes\n").unwrap();
        assert_eq!(format!("{s:?}"), "Secret(..)");
    }
}
