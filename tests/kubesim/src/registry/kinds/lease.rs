//! Leases as the real registry strategy validates them (pkg/apis/coordination
//! validation), and the MicroTime their times are written in.

use super::*;

/// `ValidateLeaseSpec` (pkg/apis/coordination/validation), and the decoding
/// of its `MicroTime` fields, which refuses anything but RFC3339 with
/// exactly six fractional digits (`metav1.MicroTime.UnmarshalJSON` parses
/// with `RFC3339Micro`; a layout's `.000000` needs every digit).
pub(super) fn validate_lease(obj: &Value, causes: &mut Vec<Cause>) {
    let spec = &obj["spec"];
    if spec["leaseDurationSeconds"]
        .as_i64()
        .is_some_and(|d| d <= 0)
    {
        let d = &spec["leaseDurationSeconds"];
        causes.push(Cause::invalid(
            "spec.leaseDurationSeconds",
            d,
            "must be greater than 0",
        ));
    }
    if spec["leaseTransitions"].as_i64().is_some_and(|t| t < 0) {
        let t = &spec["leaseTransitions"];
        causes.push(Cause::invalid(
            "spec.leaseTransitions",
            t,
            "must be greater than or equal to 0",
        ));
    }
}

/// A Lease as its JSON decodes into `coordination.Lease`: a field of the
/// wrong type, or a `MicroTime` that `metav1.MicroTime.UnmarshalJSON`
/// cannot parse, is a 400 (the body cannot be handled as a Lease), not a
/// validation error; a MicroTime is kept as `MarshalJSON` writes it again,
/// in UTC.
pub(super) fn decode_lease(obj: &mut Value) -> Result<(), ApiErr> {
    let refuse = |why: String| {
        ApiErr::bad_request(format!(
            "Lease in version \"v1\" cannot be handled as a Lease: {why}"
        ))
    };
    let spec = &mut obj["spec"];
    let wrong_type = |field: &str, v: &Value, want: &str| {
        let got = match v {
            Value::String(_) => "string",
            Value::Number(_) => "number",
            Value::Bool(_) => "bool",
            Value::Array(_) => "array",
            _ => "object",
        };
        refuse(format!(
            "json: cannot unmarshal {got} into Go struct field LeaseSpec.spec.{field} of type {want}"
        ))
    };
    for field in ["leaseDurationSeconds", "leaseTransitions"] {
        let v = &spec[field];
        let int32 = v.as_i64().is_some_and(|n| i32::try_from(n).is_ok());
        if !v.is_null() && !int32 {
            return Err(wrong_type(field, v, "int32"));
        }
    }
    for field in ["holderIdentity", "strategy", "preferredHolder"] {
        let v = &spec[field];
        if !v.is_null() && !v.is_string() {
            return Err(wrong_type(field, v, "string"));
        }
    }
    for field in ["acquireTime", "renewTime"] {
        let v = &spec[field];
        if v.is_null() {
            continue;
        }
        let Some(utc) = v.as_str().and_then(micro_time_utc) else {
            return Err(match v.as_str() {
                Some(t) => refuse(format!(
                    "parsing time {t:?} as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse"
                )),
                None => wrong_type(field, v, "v1.MicroTime"),
            });
        };
        spec[field] = json!(utc);
    }
    Ok(())
}

/// A MicroTime (`2006-01-02T15:04:05.000000Z07:00`) written again in UTC,
/// as `MicroTime.MarshalJSON` writes it; None if it does not parse.
pub fn micro_time_utc(s: &str) -> Option<String> {
    if !is_micro_time(s) {
        return None;
    }
    let (clock, zone) = s.split_at(26);
    let offset = match zone {
        "Z" => 0,
        z => {
            let n = |r: std::ops::Range<usize>| z.get(r)?.parse::<i64>().ok();
            let secs = n(1..3)? * 3600 + n(4..6)? * 60;
            if z.starts_with('-') {
                -secs
            } else {
                secs
            }
        }
    };
    let local = crate::apiserver::time::parse_rfc3339(&format!("{}Z", &clock[..19]))?;
    let utc = if offset >= 0 {
        local.checked_sub(std::time::Duration::from_secs(offset as u64))?
    } else {
        local.checked_add(std::time::Duration::from_secs((-offset) as u64))?
    };
    let base = crate::apiserver::time::rfc3339(utc);
    Some(format!("{}{}Z", &base[..base.len() - 1], &clock[19..26]))
}

/// `2006-01-02T15:04:05.000000Z07:00`: six fractional digits, then `Z` or
/// an offset.
pub fn is_micro_time(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let zone = match b.get(26..) {
        Some(b"Z") => true,
        Some(z) if z.len() == 6 => {
            (z[0] == b'+' || z[0] == b'-') && z[3] == b':' && digits(27..29) && digits(30..32)
        }
        _ => false,
    };
    digits(0..4)
        && at(4, b'-')
        && digits(5..7)
        && at(7, b'-')
        && digits(8..10)
        && at(10, b'T')
        && digits(11..13)
        && at(13, b':')
        && digits(14..16)
        && at(16, b':')
        && digits(17..19)
        && at(19, b'.')
        && digits(20..26)
        && zone
}

#[cfg(test)]
mod lease_tests {
    use super::*;

    /// `metav1.MicroTime.UnmarshalJSON` (`time.Parse(RFC3339Micro, ...)`):
    /// exactly six fractional digits, then `Z` or an offset.
    #[test]
    fn micro_times_as_the_api_server_decodes_them() {
        for ok in [
            "2026-11-30T23:59:01.123456Z",
            "2026-11-30T23:59:01.000000+01:00",
        ] {
            assert!(is_micro_time(ok), "{ok}");
        }
        for bad in [
            "2026-11-30T23:59:01Z",
            "2026-11-30T23:59:01.123Z",
            "2026-11-30T23:59:01.1234567Z",
            "2026-11-30 23:59:01.123456Z",
            "2026-11-30T23:59:01.123456",
            "",
        ] {
            assert!(!is_micro_time(bad), "{bad}");
        }
    }

    /// `ValidateLeaseSpec` (pkg/apis/coordination/validation): duration > 0,
    /// transitions >= 0.
    #[test]
    fn lease_spec_fields_are_validated() {
        let mut causes = Vec::new();
        let lease = json!({"spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1,
            "acquireTime": "2026-11-30T23:59:01.000001Z"}});
        validate_lease(&lease, &mut causes);
        let fields: Vec<String> = causes.iter().map(|c| c.field.clone()).collect();
        assert_eq!(
            fields,
            ["spec.leaseDurationSeconds", "spec.leaseTransitions"]
        );
    }

    /// Decoding into `coordination.Lease`: a bad MicroTime or a field of the
    /// wrong type is a 400, and `MicroTime.MarshalJSON` writes UTC.
    #[test]
    fn a_lease_decodes_as_the_api_server_decodes_it() {
        let bad = |spec: Value| decode_lease(&mut json!({"spec": spec})).map_err(|e| e.code);
        assert_eq!(bad(json!({"renewTime": "2026-11-30T23:59:01Z"})), Err(400));
        assert_eq!(bad(json!({"leaseDurationSeconds": "15"})), Err(400));
        assert_eq!(bad(json!({"leaseDurationSeconds": 1.5})), Err(400));
        assert_eq!(
            bad(json!({"leaseTransitions": 4_294_967_296_i64})),
            Err(400)
        );
        assert_eq!(bad(json!({"holderIdentity": 7})), Err(400));
        assert_eq!(
            bad(json!({"leaseDurationSeconds": 15, "holderIdentity": null})),
            Ok(())
        );
        let mut lease = json!({"spec": {"renewTime": "2026-12-01T01:30:00.000042+02:00",
            "acquireTime": "2026-11-30T23:59:01.123456-00:30"}});
        decode_lease(&mut lease).unwrap();
        assert_eq!(lease["spec"]["renewTime"], "2026-11-30T23:30:00.000042Z");
        assert_eq!(lease["spec"]["acquireTime"], "2026-12-01T00:29:01.123456Z");
    }
}
