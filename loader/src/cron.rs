//! Cron expressions in `timeCycle`, as Zeebe 8 and Camunda 7 both accept them beside
//! ISO-8601 repeating intervals: six fields, `second minute hour day-of-month month
//! day-of-week` (Spring's `CronExpression`, which Zeebe uses, and the first six of
//! Quartz's, which Camunda 7's is derived from), or one of Spring's macros (`@hourly`,
//! `@daily`/`@midnight`, `@weekly`, `@monthly`, `@yearly`/`@annually`).
//!
//! Evaluated in UTC. Both vendors evaluate cron in the JVM's default zone; the engine has
//! no local zone (as for date-times, which must carry an offset), so a schedule means
//! the same on every replica and in every replay. `docs/timers.md` says so.
//!
//! Each field is a comma list of `*`, `?` (day fields), a value, a range `a-b`, or any of
//! those with a step (`*/15`, `5/10`, `1-30/2`); months and days of the week may be
//! written as names (`JAN`, `MON-FRI`; a range ending at `SUN`, `FRI-SUN`, ends the
//! week, as both vendors read it). Refused, each with its reason:
//! - a numeric day of the week: Spring (Zeebe) counts `1` as Monday and `0`/`7` as
//!   Sunday, Quartz (Camunda 7) counts `1` as Sunday; the same model would fire on other
//!   days in the two vendors, so qflow asks for names, which mean one thing;
//! - a day-of-month and a day-of-week both restricted: Quartz refuses it, Spring takes
//!   days that match both, cron(8) days that match either. (Quartz, so Camunda 7, wants
//!   `?` in exactly one day field and refuses `*` beside a restricted one; Spring, so
//!   Zeebe, takes `*` there as "any", and so does qflow: `0 0 9 * * MON-FRI` is read as
//!   `0 0 9 ? * MON-FRI`, which both vendors run. The macros are Spring's only.)
//! - `L`, `W` and `#` (last day, nearest weekday, nth weekday), and Quartz's seventh
//!   field (the year): not implemented;
//! - a schedule that never fires (`0 0 0 30 2 *`).
//!
//! Nothing here reads the clock: [`Cron::next_after`] takes the instant to start from.

use std::fmt;

use crate::iso8601::civil_from_days;

/// A parsed cron schedule: the allowed values of each field as a bit set.
#[derive(Clone, PartialEq, Eq)]
pub struct Cron {
    text: String,
    /// Bits 0–59.
    seconds: u64,
    /// Bits 0–59.
    minutes: u64,
    /// Bits 0–23.
    hours: u32,
    /// Bits 1–31.
    days: u32,
    /// Bits 1–12.
    months: u16,
    /// Bits 0–6, 0 = Sunday.
    weekdays: u8,
}

impl fmt::Debug for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cron({:?})", self.text)
    }
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// How far [`Cron::next_after`] looks: a February 29th can be eight years away (2096 to
/// 2104), and every schedule that parses fires at least once in any eight years.
const SEARCH_DAYS: i64 = 8 * 366 + 7;

/// 10000-01-01T00:00:00Z in seconds: the end of the instants ISO-8601 date-times write.
const END_SECS: i64 = 253_402_300_800;

/// Whether `text` is written as a cron expression rather than an ISO-8601 interval: what
/// the loader tries it as when it is not `R…/…`.
pub fn looks_like_cron(text: &str) -> bool {
    let t = text.trim();
    t.starts_with('@') || t.split_whitespace().count() >= 5
}

/// Parses a cron expression (see the module's documentation for what is accepted).
pub fn parse(text: &str) -> Result<Cron, String> {
    let t = text.trim();
    let expanded = match t.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 0 1 1 *",
        "@monthly" => "0 0 0 1 * *",
        "@weekly" => "0 0 0 * * SUN",
        "@daily" | "@midnight" => "0 0 0 * * *",
        "@hourly" => "0 0 * * * *",
        m if m.starts_with('@') => {
            return Err(format!(
                "`{t}` is not a cron macro (@yearly, @monthly, @weekly, @daily, @hourly)"
            ))
        }
        _ => t,
    };
    let fields: Vec<&str> = expanded.split_whitespace().collect();
    match fields.len() {
        6 => {}
        7 => {
            return Err(format!(
                "`{t}` has a seventh field (a year, Quartz's): not supported; write six fields, \
                 second minute hour day-of-month month day-of-week"
            ))
        }
        n => {
            return Err(format!(
                "`{t}` has {n} fields; a cron expression has six: second minute hour \
                 day-of-month month day-of-week (e.g. `0 0 9 ? * MON-FRI`)"
            ))
        }
    }
    let field = |i: usize, name: &str, min: u32, max: u32, names: &[&str]| {
        parse_field(fields[i], min, max, names, i == 3 || i == 5)
            .map_err(|why| format!("`{t}`, {name} field `{}`: {why}", fields[i]))
    };
    let seconds = field(0, "second", 0, 59, &[])?;
    let minutes = field(1, "minute", 0, 59, &[])?;
    let hours = field(2, "hour", 0, 23, &[])?;
    let days = field(3, "day-of-month", 1, 31, &[])?;
    let months = field(4, "month", 1, 12, &MONTHS)?;
    if fields[5].contains('/') {
        return Err(format!(
            "`{t}`: the day-of-week field `{}` has a step; Zeebe counts the days from \
             Monday and Camunda 7 from Sunday, so list the days by name (e.g. MON,WED,FRI)",
            fields[5]
        ));
    }
    if fields[5].split([',', '-']).any(|piece| {
        piece
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_digit() || b == b'+')
    }) {
        return Err(format!(
            "`{t}`: the day-of-week field `{}` is numeric; Zeebe counts 1 as Monday and \
             Camunda 7 counts 1 as Sunday, so write day names (SUN, MON … SAT, e.g. MON-FRI)",
            fields[5]
        ));
    }
    let weekdays = field(5, "day-of-week", 0, 6, &WEEKDAYS)?;
    let unrestricted = |f: &str| f == "*" || f == "?";
    if !unrestricted(fields[3]) && !unrestricted(fields[5]) {
        return Err(format!(
            "`{t}` restricts both the day of the month and the day of the week, which the \
             vendors read differently; restrict one and write `?` in the other"
        ));
    }
    let cron = Cron {
        text: t.to_owned(),
        seconds,
        minutes,
        hours: hours as u32,
        days: days as u32,
        months: months as u16,
        weekdays: weekdays as u8,
    };
    if !cron.ever_fires() {
        return Err(format!(
            "`{t}` never fires: no month it names has the days it names"
        ));
    }
    Ok(cron)
}

/// One field's allowed values, `min..=max`, as a bit set (bit `v` for value `v`).
fn parse_field(field: &str, min: u32, max: u32, names: &[&str], day: bool) -> Result<u64, String> {
    let mut bits = 0u64;
    for part in field.split(',') {
        if part.is_empty() {
            return Err("an empty list item".to_owned());
        }
        if part.contains(['L', 'W', '#', 'l', 'w']) && !names_contain_letters(part, names) {
            return Err("`L`, `W` and `#` are not supported".to_owned());
        }
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step
                    .parse()
                    .ok()
                    .filter(|&s| s >= 1 && s <= max)
                    .ok_or_else(|| format!("`{step}` is not a step from 1 to {max}"))?;
                (range, Some(step))
            }
            None => (part, None),
        };
        let (from, to) = if range == "*" || (range == "?" && day) {
            (min, max)
        } else if range == "?" {
            return Err("`?` is only for the day fields".to_owned());
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, mut b) = (value(a, min, max, names)?, value(b, min, max, names)?);
            if names == WEEKDAYS && b == 0 && a > 0 {
                // `FRI-SUN`: Sunday ends the week here, as both vendors read it.
                b = 7;
            }
            if a > b {
                return Err(format!("the range `{range}` runs backwards"));
            }
            (a, b)
        } else {
            let a = value(range, min, max, names)?;
            // `5/10`: from 5 to the end, every 10.
            (a, if step.is_some() { max } else { a })
        };
        let step = step.unwrap_or(1);
        let mut v = from;
        while v <= to {
            // Day 7 (a range's Sunday end) is day 0.
            bits |= 1 << (if names == WEEKDAYS { v % 7 } else { v });
            v += step;
        }
    }
    Ok(bits)
}

/// Whether every letter in `part` belongs to a name of this field (`WED`, `JUL`), not
/// to `L`, `W` or `#`.
fn names_contain_letters(part: &str, names: &[&str]) -> bool {
    part.split(['-', '/'])
        .filter(|p| p.bytes().any(|b| b.is_ascii_alphabetic()))
        .all(|p| names.iter().any(|n| n.eq_ignore_ascii_case(p)))
        && !part.contains('#')
}

fn value(text: &str, min: u32, max: u32, names: &[&str]) -> Result<u32, String> {
    if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
        // Months are named from 1, days of the week from 0 (SUN).
        return Ok(i as u32 + min);
    }
    // Digits only: `u32::from_str` would take `+5` too.
    Some(text)
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse::<u32>().ok())
        .filter(|v| (min..=max).contains(v))
        .ok_or_else(|| {
            if names.is_empty() {
                format!("`{text}` is not a number from {min} to {max}")
            } else {
                format!(
                    "`{text}` is not a number from {min} to {max} or a name ({}–{})",
                    names[0],
                    names[names.len() - 1]
                )
            }
        })
}

impl Cron {
    /// The expression as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The first instant the schedule fires strictly after `after_ms` (milliseconds
    /// since the Unix epoch, UTC), in whole seconds; `None` when that is after the year
    /// 9999 or `after_ms` is before 1970 — where no timer of this engine is armed.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        // The first whole second after `after_ms`.
        let start = after_ms.div_euclid(1000).checked_add(1)?;
        if !(0..END_SECS).contains(&start) {
            return None;
        }
        let (mut day, mut second_of_day) = (start.div_euclid(86_400), start.rem_euclid(86_400));
        for _ in 0..=SEARCH_DAYS {
            let (_, month, dom) = civil_from_days(day);
            let weekday = (day + 4).rem_euclid(7) as u32; // 1970-01-01 was a Thursday.
            if self.months & (1 << month) != 0
                && self.days & (1 << dom) != 0
                && self.weekdays & (1 << weekday) != 0
            {
                if let Some(s) = self.first_time_from(second_of_day as u32) {
                    let secs = day.checked_mul(86_400)?.checked_add(i64::from(s))?;
                    return (secs < END_SECS).then_some(secs * 1000);
                }
            }
            day += 1;
            second_of_day = 0;
        }
        None
    }

    /// The first second of the day at or after `from` (seconds since midnight) whose
    /// hour, minute and second are allowed.
    fn first_time_from(&self, from: u32) -> Option<u32> {
        let (h0, m0, s0) = (from / 3600, from / 60 % 60, from % 60);
        for h in h0..24 {
            if self.hours & (1 << h) == 0 {
                continue;
            }
            let m_start = if h == h0 { m0 } else { 0 };
            for m in m_start..60 {
                if self.minutes & (1 << m) == 0 {
                    continue;
                }
                let s_start = if h == h0 && m == m0 { s0 } else { 0 };
                if let Some(s) = (s_start..60).find(|&s| self.seconds & (1 << s) != 0) {
                    return Some(h * 3600 + m * 60 + s);
                }
            }
        }
        None
    }

    /// Whether some month of the schedule has one of its days (February counting 29).
    fn ever_fires(&self) -> bool {
        (1..=12u32).any(|month| {
            self.months & (1 << month) != 0
                && (1..=max_days(month)).any(|d| self.days & (1 << d) != 0)
        }) && self.seconds != 0
            && self.minutes != 0
            && self.hours != 0
            && self.weekdays != 0
    }
}

fn max_days(month: u32) -> u32 {
    match month {
        2 => 29,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iso8601::parse_date_time;

    fn at(text: &str) -> i64 {
        parse_date_time(text).unwrap()
    }

    fn next(cron: &str, after: &str) -> String {
        let ms = parse(cron).unwrap().next_after(at(after)).unwrap();
        format_utc(ms)
    }

    fn format_utc(ms: i64) -> String {
        let secs = ms / 1000;
        let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
        let s = secs.rem_euclid(86_400);
        format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
            s / 3600,
            s / 60 % 60,
            s % 60
        )
    }

    #[test]
    fn the_civil_calendar_matches_the_parser_s() {
        for day in [-1, 0, 59, 365, 11_016, 19_782, 47_541, 2_932_896] {
            let (y, m, d) = civil_from_days(day);
            let text = format!("{y:04}-{m:02}-{d:02}T00:00:00Z");
            if y >= 0 {
                assert_eq!(at(&text), day * 86_400_000, "{text}");
            }
        }
    }

    #[test]
    fn next_instants_follow_spring_s_fields_in_utc() {
        // Every weekday at 09:00.
        let weekdays = "0 0 9 * * MON-FRI";
        assert_eq!(
            next(weekdays, "2026-12-04T08:59:59Z"),
            "2026-12-04T09:00:00Z"
        );
        // Strictly after: at 09:00:00 exactly, the next is Monday's (the 4th is a Friday).
        assert_eq!(
            next(weekdays, "2026-12-04T09:00:00Z"),
            "2026-12-07T09:00:00Z"
        );
        assert_eq!(
            next(weekdays, "2026-12-04T09:00:00.5Z"),
            "2026-12-07T09:00:00Z"
        );
        // Every 15 minutes, and steps from a start.
        assert_eq!(
            next("0 */15 * * * *", "2026-12-04T10:14:00Z"),
            "2026-12-04T10:15:00Z"
        );
        assert_eq!(
            next("0 */15 * * * *", "2026-12-04T23:59:00Z"),
            "2026-12-05T00:00:00Z"
        );
        assert_eq!(
            next("5/20 * * * * *", "2026-12-04T10:00:05Z"),
            "2026-12-04T10:00:25Z"
        );
        assert_eq!(
            next("0 0 1-7/3 * * ?", "2026-12-04T02:00:00Z"),
            "2026-12-04T04:00:00Z"
        );
        // Lists, names and `?`.
        assert_eq!(
            next("30 0 12 1,15 * ?", "2026-12-02T00:00:00Z"),
            "2026-12-15T12:00:30Z"
        );
        assert_eq!(
            next("0 0 0 1 JAN,jul ?", "2026-12-04T00:00:00Z"),
            "2027-01-01T00:00:00Z"
        );
        // Month and year ends, a leap day.
        assert_eq!(
            next("0 0 0 31 * ?", "2026-11-01T00:00:00Z"),
            "2026-12-31T00:00:00Z"
        );
        assert_eq!(
            next("0 0 0 29 2 ?", "2026-12-04T00:00:00Z"),
            "2028-02-29T00:00:00Z"
        );
        assert_eq!(
            next("0 0 0 29 FEB ?", "2096-03-01T00:00:00Z"),
            "2104-02-29T00:00:00Z"
        );
        // A range that ends at Sunday ends the week: Friday, Saturday, Sunday.
        assert_eq!(
            next("0 0 9 ? * FRI-SUN", "2026-12-04T09:00:00Z"),
            "2026-12-05T09:00:00Z"
        );
        assert_eq!(
            next("0 0 9 ? * FRI-SUN", "2026-12-06T09:00:00Z"),
            "2026-12-11T09:00:00Z"
        );
        // Macros.
        assert_eq!(
            next("@daily", "2026-12-04T10:00:00Z"),
            "2026-12-05T00:00:00Z"
        );
        assert_eq!(
            next("@weekly", "2026-12-04T10:00:00Z"),
            "2026-12-06T00:00:00Z"
        );
        assert_eq!(
            next("@hourly", "2026-12-04T10:00:00Z"),
            "2026-12-04T11:00:00Z"
        );
        assert_eq!(
            next("@yearly", "2026-12-04T10:00:00Z"),
            "2027-01-01T00:00:00Z"
        );
    }

    #[test]
    fn what_the_vendors_read_differently_or_qflow_does_not_run_is_refused_with_why() {
        for (text, why) in [
            ("0 0 9 * * 1-5", "day names"),
            ("0 0 9 * * 0", "day names"),
            ("0 0 9 1 * MON", "restricts both"),
            ("0 0 9 L * ?", "not supported"),
            ("0 0 9 ? * MON#2", "not supported"),
            ("0 0 9 15W * ?", "not supported"),
            ("0 0 9 * * ? 2027", "seventh field"),
            ("0 9 * * *", "5 fields"),
            ("0 0 0 30 2 ?", "never fires"),
            ("60 * * * * *", "from 0 to 59"),
            ("0 0 24 * * *", "from 0 to 23"),
            ("0 0 0 0 * *", "from 1 to 31"),
            ("0 0 0 * 13 *", "from 1 to 12"),
            ("0 0 0 * FOO *", "or a name (JAN–DEC)"),
            ("0 0 5-1 * * *", "backwards"),
            ("*/0 * * * * *", "not a step"),
            ("0 ? * * * *", "only for the day fields"),
            ("0 0,,1 * * * ?", "empty list item"),
            ("0 0 9 ? * */2", "step"),
            // Numbers hidden after a name, or with a sign, are numbers all the same.
            ("0 0 9 ? * MON-5", "day names"),
            ("0 0 9 ? * SUN-6", "day names"),
            ("0 0 9 ? * +1", "day names"),
            ("+5 * * * * *", "not a number"),
            ("@often", "not a cron macro"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
        }
    }

    #[test]
    fn nothing_before_1970_or_after_9999_is_scheduled() {
        let every = parse("* * * * * *").unwrap();
        assert_eq!(every.next_after(-5_000), None);
        assert_eq!(every.next_after(at("9999-12-31T23:59:59Z")), None);
        assert_eq!(every.next_after(i64::MAX), None);
        assert_eq!(every.next_after(i64::MIN), None);
        assert_eq!(every.next_after(0), Some(1_000));
    }

    #[test]
    fn looks_like_cron_tells_cron_from_iso_8601() {
        assert!(looks_like_cron("0 0 9 * * MON-FRI"));
        assert!(looks_like_cron(" @daily "));
        assert!(!looks_like_cron("R3/PT10M"));
        assert!(!looks_like_cron("PT5M"));
    }
}
