//! ISO-8601 durations, date-times and repeating intervals, as timers and `q:` attributes
//! use them.
//!
//! Only forms with one exact meaning are accepted. Years and months are refused in
//! durations (their length depends on the calendar); a date-time must carry a UTC offset
//! (the engine has no local time zone); a cycle is `R[n]/<duration>` (cycles with a start or end
//! instant are refused; cron expressions are read by `crate::cron`). Nothing here reads the clock.

use crate::model::DurationMs;

/// Parses `PnW`, `PnDTnHnMnS` (fractional seconds allowed, down to milliseconds).
pub fn parse_duration(s: &str) -> Result<DurationMs, String> {
    let t = s.trim();
    let body = t.strip_prefix('P').ok_or_else(|| {
        format!("`{t}` is not an ISO-8601 duration (it must start with P, e.g. PT30S)")
    })?;
    if body.is_empty() || body == "T" {
        return Err(format!("`{t}` has no components (e.g. PT30S, P1D)"));
    }
    let (date, time) = match body.split_once('T') {
        Some((d, tm)) => {
            if tm.is_empty() {
                return Err(format!("`{t}` has a T without time components"));
            }
            (d, Some(tm))
        }
        None => (body, None),
    };
    let mut total: u128 = 0;
    for (num, unit) in components(date, t)? {
        let ms_per: u128 = match unit {
            'W' => 7 * 86_400_000,
            'D' => 86_400_000,
            'Y' | 'M' => {
                return Err(format!(
                    "`{t}` uses calendar years or months, which have no fixed length; use days (e.g. P30D)"
                ))
            }
            _ => return Err(format!("`{t}`: unknown date unit `{unit}`")),
        };
        total += whole(num, t)? * ms_per;
    }
    if let Some(time) = time {
        for (num, unit) in components(time, t)? {
            total += match unit {
                'H' => whole(num, t)? * 3_600_000,
                'M' => whole(num, t)? * 60_000,
                'S' => seconds_ms(num, t)?,
                _ => return Err(format!("`{t}`: unknown time unit `{unit}`")),
            };
        }
    }
    u64::try_from(total)
        .ok()
        .filter(|ms| *ms <= i64::MAX as u64)
        .map(DurationMs)
        .ok_or_else(|| format!("`{t}` is too long"))
}

/// Splits `12D3H` into `[("12", 'D'), ("3", 'H')]`, refusing repeated or misordered units.
fn components<'a>(s: &'a str, whole_text: &str) -> Result<Vec<(&'a str, char)>, String> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in s.char_indices() {
        if c.is_ascii_digit() || c == '.' || c == ',' {
            continue;
        }
        let num = &s[start..i];
        if num.is_empty() {
            return Err(format!(
                "`{whole_text}`: unit `{c}` has no number before it"
            ));
        }
        if out.iter().any(|(_, u)| *u == c) {
            return Err(format!("`{whole_text}`: unit `{c}` appears twice"));
        }
        out.push((num, c));
        start = i + c.len_utf8();
    }
    if start != s.len() {
        return Err(format!("`{whole_text}`: a number has no unit after it"));
    }
    Ok(out)
}

fn whole(num: &str, t: &str) -> Result<u128, String> {
    if num.len() > 12 {
        return Err(format!("`{t}`: the number {num} is too large"));
    }
    num.parse::<u128>()
        .map_err(|_| format!("`{t}`: only seconds may have a fraction"))
}

fn seconds_ms(num: &str, t: &str) -> Result<u128, String> {
    let num = num.replace(',', ".");
    let (int, frac) = num.split_once('.').unwrap_or((&num, ""));
    if int.is_empty() || frac.contains('.') {
        return Err(format!("`{t}`: malformed seconds"));
    }
    if frac.len() > 3 && frac[3..].bytes().any(|b| b != b'0') {
        return Err(format!(
            "`{t}`: seconds have more precision than milliseconds"
        ));
    }
    let ms: u128 = format!("{:0<3}", &frac[..frac.len().min(3)])
        .parse()
        .map_err(|_| format!("`{t}`: malformed seconds"))?;
    Ok(whole(int, t)? * 1000 + ms)
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fff](Z|±HH:MM)` into milliseconds since the Unix epoch.
pub fn parse_date_time(s: &str) -> Result<i64, String> {
    let t = s.trim();
    let bad =
        || format!("`{t}` is not an ISO-8601 date-time with offset (e.g. 2026-03-01T09:00:00Z)");
    let b = t.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || (b[10] != b'T' && b[10] != b't') {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        let part = t.get(r).ok_or_else(bad)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        part.parse::<i64>().map_err(|_| bad())
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if b[13] != b':' || b[16] != b':' {
        return Err(bad());
    }
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &t[19..];
    let mut millis = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let f = &frac[..digits];
        millis = format!("{:0<3}", &f[..digits.min(3)])
            .parse()
            .map_err(|_| bad())?;
        rest = &frac[digits..];
    }
    let offset_min = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && (rest.starts_with('+') || rest.starts_with('-')) => {
            let rb = rest.as_bytes();
            if rb[3] != b':' {
                return Err(bad());
            }
            let h: i64 = rest[1..3].parse().map_err(|_| bad())?;
            let m: i64 = rest[4..6].parse().map_err(|_| bad())?;
            if h > 23 || m > 59 {
                return Err(bad());
            }
            let sign = if rb[0] == b'-' { -1 } else { 1 };
            sign * (h * 60 + m)
        }
        "" => {
            return Err(format!(
                "`{t}` has no UTC offset; add Z or ±HH:MM (the engine has no local time zone)"
            ))
        }
        _ => return Err(bad()),
    };
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return Err(format!("`{t}` is not a valid calendar date-time"));
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_min * 60;
    Ok(secs * 1000 + millis)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(y) => 29,
        _ => 28,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date (year, month 1–12, day 1–31) of a day count since
/// 1970-01-01 (Howard Hinnant's algorithm; the inverse of the date-time parser's).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Parses a repeating interval `R[n]/<duration>` into (repetitions, interval).
/// `R/PT1M` (no count) repeats without bound.
pub fn parse_cycle(s: &str) -> Result<(Option<u32>, DurationMs), String> {
    let t = s.trim();
    let rest = t.strip_prefix('R').ok_or_else(|| {
        format!("`{t}` is not an ISO-8601 repeating interval (e.g. R3/PT10M) or a cron expression (six fields, e.g. 0 0 9 ? * MON-FRI)")
    })?;
    let parts: Vec<&str> = rest.split('/').collect();
    if parts.len() != 2 {
        return Err(format!(
            "`{t}`: only `R[n]/<duration>` is supported (no start or end instant)"
        ));
    }
    let reps = if parts[0].is_empty() {
        None
    } else {
        Some(
            parts[0]
                .parse::<u32>()
                .map_err(|_| format!("`{t}`: the repetition count must be a whole number"))?,
        )
    };
    let interval = parse_duration(parts[1])?;
    if interval.0 == 0 {
        return Err(format!("`{t}`: the interval must be longer than zero"));
    }
    Ok((reps, interval))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let ok = [
            ("PT30S", 30_000),
            ("PT1M", 60_000),
            ("PT1H30M", 5_400_000),
            ("P1D", 86_400_000),
            ("P2W", 14 * 86_400_000),
            ("P1DT1S", 86_401_000),
            ("PT0.5S", 500),
            ("PT1,25S", 1_250),
            ("PT0S", 0),
            (" PT5S ", 5_000),
        ];
        for (s, ms) in ok {
            assert_eq!(parse_duration(s), Ok(DurationMs(ms)), "{s}");
        }
        for s in [
            "",
            "P",
            "PT",
            "30S",
            "PT30",
            "P1Y",
            "P1M",
            "PT1S1S",
            "PTS",
            "PT1.5M",
            "PT0.0001S",
            "P99999999999999D",
            "PT-1S",
            "pt1s",
        ] {
            assert!(parse_duration(s).is_err(), "{s} should be refused");
        }
    }

    #[test]
    fn date_times() {
        assert_eq!(parse_date_time("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(
            parse_date_time("2026-03-01T09:00:00Z"),
            Ok(1_772_355_600_000)
        );
        assert_eq!(
            parse_date_time("2026-03-01T10:00:00.250+01:00"),
            Ok(1_772_355_600_250)
        );
        assert_eq!(
            parse_date_time("2024-02-29T00:00:00Z"),
            Ok(1_709_164_800_000)
        );
        for s in [
            "2026-03-01T09:00:00",
            "2026-02-30T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-03-01 09:00:00Z",
            "2026-03-01T25:00:00Z",
            "not a date",
            "2026-03-01T09:00:00+0100",
        ] {
            assert!(parse_date_time(s).is_err(), "{s} should be refused");
        }
    }

    #[test]
    fn cycles() {
        assert_eq!(parse_cycle("R3/PT10M"), Ok((Some(3), DurationMs(600_000))));
        assert_eq!(parse_cycle("R/PT1M"), Ok((None, DurationMs(60_000))));
        for s in [
            "0 0 * * *",
            "R3/2026-03-01T09:00:00Z/PT1H",
            "R3",
            "Rx/PT1M",
            "R3/PT0S",
        ] {
            assert!(parse_cycle(s).is_err(), "{s} should be refused");
        }
    }
}
