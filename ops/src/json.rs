//! JSON input helpers shared by the front ends.

use serde::de::{Deserializer, Error, Visitor};

/// An `i64` given as a JSON number with no fractional part: `7` and also `7.0`,
/// which JSON Schema (2020-12) counts as an integer and some clients send.
pub fn integer<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    d.deserialize_any(IntegerVisitor { strings: false })
}

/// Reads an integer; with `strings`, also one in decimal in a JSON string.
struct IntegerVisitor {
    strings: bool,
}

impl Visitor<'_> for IntegerVisitor {
    type Value = i64;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.strings {
            f.write_str("an integer, or one in decimal in a string")
        } else {
            f.write_str("an integer")
        }
    }
    fn visit_i64<E: Error>(self, v: i64) -> Result<i64, E> {
        Ok(v)
    }
    fn visit_u64<E: Error>(self, v: u64) -> Result<i64, E> {
        i64::try_from(v).map_err(|_| E::custom(format!("{v} is out of range")))
    }
    fn visit_f64<E: Error>(self, v: f64) -> Result<i64, E> {
        // 2^63 is exactly representable; everything below it in magnitude and
        // integral converts exactly. −2^63 itself is refused as a float: it is
        // also the nearest float to integers just below i64's range
        // (-9223372036854775809 parses to it), which must not be taken as in
        // range; i64::MIN written as an integer is read by `visit_i64`.
        if v.fract() == 0.0 && v > -9_223_372_036_854_775_808.0 && v < 9_223_372_036_854_775_808.0 {
            Ok(v as i64)
        } else {
            Err(E::custom(format!("{v} is not an integer in range")))
        }
    }
    fn visit_str<E: Error>(self, text: &str) -> Result<i64, E> {
        if !self.strings {
            return Err(E::invalid_type(serde::de::Unexpected::Str(text), &self));
        }
        let digits = text.strip_prefix('-').unwrap_or(text);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(E::custom(format!("{text:?} is not an integer in decimal")));
        }
        text.parse()
            .map_err(|_| E::custom(format!("{text} is out of range")))
    }
}

/// [`integer`] for an optional field (`null` or absent is `None`).
pub fn optional_integer<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    #[derive(serde::Deserialize)]
    struct Wrapped(#[serde(deserialize_with = "integer")] i64);
    Option::<Wrapped>::deserialize(d).map(|w| w.map(|Wrapped(n)| n))
}

/// An `i64` as Camunda 8 reads its `int64` fields: [`integer`]'s numbers, or the
/// integer in decimal in a string (`"20000"`), which Camunda's REST gateway accepts
/// and its official TypeScript client sends in strict mode.
pub fn long<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    d.deserialize_any(IntegerVisitor { strings: true })
}

/// [`long`] for an optional field (`null` or absent is `None`).
pub fn optional_long<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    #[derive(serde::Deserialize)]
    struct Wrapped(#[serde(deserialize_with = "long")] i64);
    Option::<Wrapped>::deserialize(d).map(|w| w.map(|Wrapped(n)| n))
}

use serde::Deserialize;

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize)]
    struct N {
        #[serde(deserialize_with = "super::integer")]
        n: i64,
    }

    fn n(text: &str) -> Result<i64, String> {
        serde_json::from_str::<N>(text)
            .map(|v| v.n)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn integral_numbers_in_any_spelling_are_integers() {
        assert_eq!(n(r#"{"n": 7}"#), Ok(7));
        assert_eq!(n(r#"{"n": -288.0}"#), Ok(-288));
        assert_eq!(n(r#"{"n": -9223372036854775808}"#), Ok(i64::MIN));
        assert!(n(r#"{"n": 1.5}"#).is_err());
        assert!(n(r#"{"n": 9223372036854775808}"#).is_err());
        assert!(n(r#"{"n": 1e300}"#).is_err());
        assert!(n(r#"{"n": "7"}"#).is_err());
        // Parsed exactly (serde_json's `float_roundtrip`), so a long integral decimal
        // stays integral.
        assert_eq!(n(r#"{"n": 2220513835735369.0}"#), Ok(2_220_513_835_735_369));
        // Just outside i64's range, written as integers: refused, though the nearest
        // float to the first is −2^63; i64::MIN itself as an integer is in range.
        assert!(n(r#"{"n": -9223372036854775809}"#).is_err());
        assert!(n(r#"{"n": 9223372036854775808}"#).is_err());
        assert_eq!(n(r#"{"n": -9223372036854775808}"#), Ok(i64::MIN));
    }

    #[derive(serde::Deserialize)]
    struct L {
        #[serde(default, deserialize_with = "super::optional_long")]
        n: Option<i64>,
    }

    fn l(text: &str) -> Result<Option<i64>, String> {
        serde_json::from_str::<L>(text)
            .map(|v| v.n)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn longs_are_integers_or_decimal_strings() {
        assert_eq!(l(r#"{"n": 7}"#), Ok(Some(7)));
        assert_eq!(l(r#"{"n": 7.0}"#), Ok(Some(7)));
        assert_eq!(l(r#"{"n": "20000"}"#), Ok(Some(20_000)));
        assert_eq!(l(r#"{"n": "-1"}"#), Ok(Some(-1)));
        assert_eq!(l(r#"{"n": null}"#), Ok(None));
        assert_eq!(l(r#"{}"#), Ok(None));
        for bad in [
            r#"{"n": ""}"#,
            r#"{"n": "-"}"#,
            r#"{"n": " 7"}"#,
            r#"{"n": "7.0"}"#,
            r#"{"n": "+7"}"#,
            r#"{"n": "1e3"}"#,
            r#"{"n": "9223372036854775808"}"#,
            r#"{"n": 1.5}"#,
            r#"{"n": true}"#,
        ] {
            assert!(l(bad).is_err(), "{bad}");
        }
    }
}
