//! Lenient decoders for tool arguments: models often quote booleans and
//! numbers, send `0`/`1` for a flag or `null` for "not given", and a refused
//! call costs a round trip. One set of rules for every tool, so a spelling
//! `edit_file` accepts is accepted by `grep` too. Knows nothing of the tools.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// A flag sent as a boolean, `"true"`/`"false"` (any case; `""` is false),
/// 0/1, or null (not given).
pub fn optional_flag<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<bool>, D::Error> {
    match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(flag)) => Ok(Some(flag)),
        Some(Value::String(text)) if text.eq_ignore_ascii_case("true") => Ok(Some(true)),
        Some(Value::String(text)) if text.eq_ignore_ascii_case("false") || text.is_empty() => Ok(Some(false)),
        Some(Value::Number(number)) if number.as_u64() == Some(0) => Ok(Some(false)),
        Some(Value::Number(number)) if number.as_u64() == Some(1) => Ok(Some(true)),
        Some(other) => Err(D::Error::custom(format!("expected true or false, got {other}"))),
    }
}

/// [`optional_flag`], false when not given.
pub fn flag<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    Ok(optional_flag(deserializer)?.unwrap_or(false))
}

/// A line number or count sent as a number (a whole float too), a numeric
/// string, or null / `""` (not given).
pub fn count<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<usize>, D::Error> {
    let whole = |value: f64| value >= 0.0 && value.fract() == 0.0;
    match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(number)) => match (number.as_u64(), number.as_f64()) {
            (Some(value), _) => Ok(Some(usize::try_from(value).unwrap_or(usize::MAX))),
            (None, Some(value)) if whole(value) => Ok(Some(value as usize)),
            _ => Err(D::Error::custom(format!("expected a positive whole number, got {number}"))),
        },
        Some(Value::String(text)) if text.trim().is_empty() => Ok(None),
        Some(Value::String(text)) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| D::Error::custom(format!("expected a positive whole number, got \"{text}\""))),
        Some(other) => Err(D::Error::custom(format!("expected a positive whole number, got {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    struct Args {
        #[serde(default, deserialize_with = "super::flag")]
        flag: bool,
        #[serde(default, deserialize_with = "super::optional_flag")]
        maybe: Option<bool>,
        #[serde(default, deserialize_with = "super::count")]
        count: Option<usize>,
    }

    fn parse(value: serde_json::Value) -> Result<Args, serde_json::Error> {
        serde_json::from_value(value)
    }

    #[test]
    fn flags_accept_the_usual_spellings() {
        for (sent, meant) in [
            (json!(true), true),
            (json!("TRUE"), true),
            (json!(1), true),
            (json!(false), false),
            (json!("false"), false),
            (json!(""), false),
            (json!(0), false),
            (json!(null), false),
        ] {
            assert_eq!(parse(json!({ "flag": sent })).unwrap().flag, meant, "{sent}");
        }
        assert!(!parse(json!({})).unwrap().flag);
        assert_eq!(parse(json!({})).unwrap().maybe, None);
        assert_eq!(parse(json!({ "maybe": null })).unwrap().maybe, None);
        assert_eq!(parse(json!({ "maybe": 1 })).unwrap().maybe, Some(true));
        for bad in [json!(2), json!("yes"), json!([true])] {
            assert!(parse(json!({ "flag": bad })).is_err(), "{bad}");
        }
    }

    #[test]
    fn counts_accept_numbers_and_their_spellings() {
        for (sent, meant) in [
            (json!(3), Some(3)),
            (json!(3.0), Some(3)),
            (json!(" 12 "), Some(12)),
            (json!(""), None),
            (json!(null), None),
        ] {
            assert_eq!(parse(json!({ "count": sent })).unwrap().count, meant, "{sent}");
        }
        for bad in [json!(-1), json!(2.5), json!("many"), json!(true)] {
            assert!(parse(json!({ "count": bad })).is_err(), "{bad}");
        }
    }
}
