//! Timestamps as the API server writes them (RFC 3339, UTC, seconds).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn secs(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

pub fn rfc3339(t: SystemTime) -> String {
    let s = secs(t);
    let (y, mo, d) = civil_from_days(s.div_euclid(86_400));
    let rem = s.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// RFC 3339 with microseconds, as Events' `eventTime` and leases use.
pub fn rfc3339_micro(t: SystemTime) -> String {
    let base = rfc3339(t);
    let micros = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_micros())
        .unwrap_or(0);
    format!("{}.{micros:06}Z", &base[..base.len() - 1])
}

pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, se) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    let days = days_from_civil(y, mo as u32, d as u32);
    let total = days * 86_400 + h * 3600 + mi * 60 + se;
    if total < 0 {
        return None;
    }
    Some(UNIX_EPOCH + Duration::from_secs(total as u64))
}

pub fn http_date(t: SystemTime) -> String {
    let s = secs(t);
    let days = s.div_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    let wd = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][days.rem_euclid(7) as usize];
    let mon = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(mo - 1) as usize];
    let rem = s.rem_euclid(86_400);
    format!(
        "{wd}, {d:02} {mon} {y} {:02}:{:02}:{:02} GMT",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A human age as apimachinery's `duration.HumanDuration` prints it (the
/// Age column): 45s, 3m12s, 5h10m, 2d3h, 400d, 6y338d, 9y.
pub fn age(since: SystemTime, now: SystemTime) -> String {
    let s = now.duration_since(since).map(|d| d.as_secs()).unwrap_or(0);
    let (m, h) = (s / 60, s / 3600);
    let (d, y) = (h / 24, h / 24 / 365);
    let with = |big: u64, unit: &str, small: u64, small_unit: &str| match small {
        0 => format!("{big}{unit}"),
        n => format!("{big}{unit}{n}{small_unit}"),
    };
    match h {
        _ if s < 120 => format!("{s}s"),
        _ if m < 10 => with(m, "m", s % 60, "s"),
        _ if m < 180 => format!("{m}m"),
        0..=7 => with(h, "h", m % 60, "m"),
        8..=47 => format!("{h}h"),
        48..=191 => with(d, "d", h % 24, "h"),
        _ if h < 24 * 365 * 2 => format!("{d}d"),
        _ if h < 24 * 365 * 8 => with(y, "y", d % 365, "d"),
        _ => format!("{y}y"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        let s = rfc3339(t);
        assert_eq!(s, "2026-11-18T11:06:40Z");
        assert_eq!(parse_rfc3339(&s), Some(t));
        assert_eq!(http_date(UNIX_EPOCH), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert!(rfc3339_micro(t).starts_with("2026-11-18T11:06:40."));
    }

    /// `duration.HumanDuration`'s steps (apimachinery
    /// `pkg/util/duration`, `TestHumanDuration`).
    #[test]
    fn ages_as_human_duration() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let ago = |s: u64| age(now - Duration::from_secs(s), now);
        let (min, hour, day) = (60, 3600, 86_400);
        for (secs, want) in [
            (1, "1s"),
            (119, "119s"),
            (2 * min, "2m"),
            (2 * min + 30, "2m30s"),
            (10 * min, "10m"),
            (3 * hour, "3h"),
            (3 * hour + 30 * min, "3h30m"),
            (8 * hour, "8h"),
            (47 * hour, "47h"),
            (48 * hour, "2d"),
            (2 * day + 5 * hour, "2d5h"),
            (8 * day, "8d"),
            (729 * day, "729d"),
            (730 * day, "2y"),
            (800 * day, "2y70d"),
            (8 * 365 * day, "8y"),
        ] {
            assert_eq!(ago(secs), want, "{secs} s");
        }
    }
}
