//! Granule identity: the unit of work and the rules an id must obey before it is used
//! in an S3 key or a Batch job name.

use chrono::NaiveDate;
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The column granary's inventories name granule ids in (an inventory from elsewhere may name
/// another: `GRANARY_INVENTORY_ID_COLUMN`).
pub const INVENTORY_ID_COLUMN: &str = "granule_id";

/// Longest granule id we accept. Keys and job names are derived from it, and S3 keys cap at 1024 bytes.
pub const MAX_GRANULE_ID_BYTES: usize = 200;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidGranuleId {
    #[error("granule id is empty")]
    Empty,
    #[error("granule id is {0} bytes long; the limit is {MAX_GRANULE_ID_BYTES}")]
    TooLong(usize),
    #[error("granule id {0:?} contains '/', which would split its S3 key")]
    Slash(String),
    #[error("granule id {0:?} contains '=', which would break hive partitioning")]
    Equals(String),
    #[error("granule id {0:?} contains '..', which could escape its prefix")]
    DotDot(String),
    #[error("granule id {0:?} contains whitespace or a control character")]
    Whitespace(String),
}

/// One row's id cell as an inventory holds it. A Parquet string column is not bound to hold
/// UTF-8 (the reader checks it and refuses the whole read), so a cell that is not is a value of
/// its own: its row is rejected like any invalid id, and the rest of its window goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdCell {
    Text(String),
    Null,
    NotUtf8,
}

impl IdCell {
    pub fn text(&self) -> Option<&str> {
        match self {
            IdCell::Text(t) => Some(t),
            IdCell::Null | IdCell::NotUtf8 => None,
        }
    }

    /// The granule the row names, or why it names none (the reason a rejected row is filed with).
    pub fn granule(&self) -> Result<GranuleId, UnusableIdCell> {
        match self {
            IdCell::Text(t) => Ok(GranuleId::parse(t)?),
            IdCell::Null => Err(UnusableIdCell::Null),
            IdCell::NotUtf8 => Err(UnusableIdCell::NotUtf8),
        }
    }
}

/// Why an inventory row's id cell names no granule; its text is the reason the row is filed with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnusableIdCell {
    #[error(transparent)]
    Invalid(#[from] InvalidGranuleId),
    #[error("granule id is null")]
    Null,
    #[error("granule id is not valid UTF-8")]
    NotUtf8,
}

/// A validated granule id. Constructing one is the only way to get one, so every key and job
/// name built from it is safe.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct GranuleId(String);

impl GranuleId {
    pub fn parse(raw: &str) -> Result<Self, InvalidGranuleId> {
        if raw.is_empty() {
            return Err(InvalidGranuleId::Empty);
        }
        if raw.len() > MAX_GRANULE_ID_BYTES {
            return Err(InvalidGranuleId::TooLong(raw.len()));
        }
        if raw.contains('/') {
            return Err(InvalidGranuleId::Slash(raw.to_owned()));
        }
        if raw.contains('=') {
            return Err(InvalidGranuleId::Equals(raw.to_owned()));
        }
        if raw.contains("..") {
            return Err(InvalidGranuleId::DotDot(raw.to_owned()));
        }
        if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(InvalidGranuleId::Whitespace(raw.to_owned()));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for GranuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for GranuleId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        GranuleId::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// The message that travels between feeder, monitor, requeuer and the queues: one unit of work.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GranuleProcessingEvent {
    pub granule_id: GranuleId,
    pub attempt: u32,
}

impl GranuleProcessingEvent {
    pub fn first(granule_id: GranuleId) -> Self {
        Self {
            granule_id,
            attempt: 1,
        }
    }

    pub fn next_attempt(&self) -> Self {
        Self {
            granule_id: self.granule_id.clone(),
            attempt: self.attempt.saturating_add(1),
        }
    }
}

/// What an id tells us about the granule: the hive partitions its logs go under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GranuleFacts {
    /// e.g. L30 or S30; `None` when the id does not say.
    pub platform: Option<String>,
    pub acquisition_date: Option<NaiveDate>,
}

impl GranuleFacts {
    pub const UNKNOWN: &'static str = "unknown";

    pub fn platform_label(&self) -> &str {
        self.platform.as_deref().unwrap_or(Self::UNKNOWN)
    }

    pub fn date_label(&self) -> String {
        self.acquisition_date
            .map(|d| d.format("%Y-%m-%d").to_string())
            .unwrap_or_else(|| Self::UNKNOWN.to_owned())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IdParserError {
    #[error("granule id pattern is not a valid regular expression: {0}")]
    BadPattern(#[from] regex::Error),
    #[error("granule id pattern must have named groups `platform` and `date`")]
    MissingGroups,
}

/// Extracts platform and acquisition date from granule ids. The default understands HLS ids
/// (`HLS.S30.T01GBH.2022226T214921.v2.0`); campaigns over other products configure their own
/// pattern (named groups `platform` and `date`) and chrono date format.
#[derive(Debug, Clone)]
pub struct IdParser {
    pattern: Regex,
    date_format: String,
}

impl IdParser {
    pub const HLS_PATTERN: &'static str =
        r"^HLS\.(?P<platform>[A-Z]\d{2})\.T[0-9A-Z]{5}\.(?P<date>\d{7}T\d{6})\.v\d+\.\d+$";
    pub const HLS_DATE_FORMAT: &'static str = "%Y%jT%H%M%S";

    pub fn new(pattern: &str, date_format: &str) -> Result<Self, IdParserError> {
        let pattern = super::pattern::compiled(pattern)?;
        let names: Vec<_> = pattern.capture_names().flatten().collect();
        if !names.contains(&"platform") || !names.contains(&"date") {
            return Err(IdParserError::MissingGroups);
        }
        Ok(Self {
            pattern,
            date_format: date_format.to_owned(),
        })
    }

    pub fn hls() -> Self {
        // The constant pattern is covered by unit tests; failure here is a programming error.
        Self::new(Self::HLS_PATTERN, Self::HLS_DATE_FORMAT).unwrap_or_else(|e| panic!("{e}"))
    }

    /// When the granule was acquired, as precisely as the id says (midnight when its date has no
    /// time); `None` when the id does not match or its date does not parse.
    pub fn acquired_at(&self, id: &str) -> Option<chrono::NaiveDateTime> {
        let caps = self.pattern.captures(id)?;
        let date = caps.name("date")?.as_str();
        chrono::NaiveDateTime::parse_from_str(date, &self.date_format)
            .ok()
            .or_else(|| {
                NaiveDate::parse_from_str(date, &self.date_format)
                    .ok()
                    .and_then(|d| d.and_hms_opt(0, 0, 0))
            })
    }

    /// Ids that do not match are allowed: they yield unknown platform and date.
    pub fn facts(&self, id: &GranuleId) -> GranuleFacts {
        let Some(caps) = self.pattern.captures(id.as_str()) else {
            return GranuleFacts {
                platform: None,
                acquisition_date: None,
            };
        };
        let platform = caps.name("platform").map(|m| m.as_str().to_owned());
        let acquisition_date = caps.name("date").and_then(|m| {
            chrono::NaiveDateTime::parse_from_str(m.as_str(), &self.date_format)
                .map(|dt| dt.date())
                .or_else(|_| NaiveDate::parse_from_str(m.as_str(), &self.date_format))
                .ok()
        });
        GranuleFacts {
            platform,
            acquisition_date,
        }
    }
}

impl Default for IdParser {
    fn default() -> Self {
        Self::hls()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquisition_time_to_the_second_or_the_day() {
        let hls = IdParser::hls();
        assert_eq!(
            hls.acquired_at("HLS.S30.T01GBH.2022226T214921.v2.0")
                .map(|t| t.to_string())
                .as_deref(),
            Some("2022-08-14 21:49:21")
        );
        assert_eq!(hls.acquired_at("not-hls"), None);
        let daily = IdParser::new(r"^(?P<platform>[A-Z]+)_(?P<date>\d{8})$", "%Y%m%d").unwrap();
        assert_eq!(
            daily
                .acquired_at("ABC_20240131")
                .map(|t| t.to_string())
                .as_deref(),
            Some("2024-01-31 00:00:00")
        );
    }

    #[test]
    fn accepts_hls_ids() {
        let id = GranuleId::parse("HLS.S30.T01GBH.2022226T214921.v2.0").unwrap();
        assert_eq!(id.as_str(), "HLS.S30.T01GBH.2022226T214921.v2.0");
    }

    #[test]
    fn rejects_each_unsafe_shape() {
        assert_eq!(GranuleId::parse(""), Err(InvalidGranuleId::Empty));
        assert!(matches!(
            GranuleId::parse("a/b"),
            Err(InvalidGranuleId::Slash(_))
        ));
        assert!(matches!(
            GranuleId::parse("a=b"),
            Err(InvalidGranuleId::Equals(_))
        ));
        assert!(matches!(
            GranuleId::parse("a..b"),
            Err(InvalidGranuleId::DotDot(_))
        ));
        assert!(matches!(
            GranuleId::parse(".."),
            Err(InvalidGranuleId::DotDot(_))
        ));
        assert!(matches!(
            GranuleId::parse("a b"),
            Err(InvalidGranuleId::Whitespace(_))
        ));
        assert!(matches!(
            GranuleId::parse("a\tb"),
            Err(InvalidGranuleId::Whitespace(_))
        ));
        assert!(matches!(
            GranuleId::parse("a\u{7}b"),
            Err(InvalidGranuleId::Whitespace(_))
        ));
        assert!(matches!(
            GranuleId::parse("ab\n"),
            Err(InvalidGranuleId::Whitespace(_))
        ));
        assert_eq!(
            GranuleId::parse(&"x".repeat(201)),
            Err(InvalidGranuleId::TooLong(201))
        );
        assert!(GranuleId::parse(&"x".repeat(200)).is_ok());
    }

    #[test]
    fn rejects_unsafe_ids_when_deserialized() {
        let err =
            serde_json::from_str::<GranuleProcessingEvent>(r#"{"granule_id":"a/b","attempt":1}"#);
        assert!(err.is_err());
        let ok: GranuleProcessingEvent =
            serde_json::from_str(r#"{"granule_id":"ab","attempt":2}"#).unwrap();
        assert_eq!(ok.next_attempt().attempt, 3);
    }

    #[test]
    fn hls_ids_yield_platform_and_date() {
        let p = IdParser::hls();
        let facts = p.facts(&GranuleId::parse("HLS.S30.T01GBH.2022226T214921.v2.0").unwrap());
        assert_eq!(facts.platform.as_deref(), Some("S30"));
        assert_eq!(facts.acquisition_date, NaiveDate::from_ymd_opt(2022, 8, 14));
        assert_eq!(facts.date_label(), "2022-08-14");
        let l30 = p.facts(&GranuleId::parse("HLS.L30.T18TYN.2020001T153012.v2.0").unwrap());
        assert_eq!(l30.platform_label(), "L30");
        assert_eq!(l30.date_label(), "2020-01-01");
    }

    #[test]
    fn other_shapes_are_unknown() {
        let p = IdParser::hls();
        let facts = p.facts(&GranuleId::parse("my-granule-42").unwrap());
        assert_eq!(facts.platform_label(), "unknown");
        assert_eq!(facts.date_label(), "unknown");
        // right shape, impossible day of year
        let bad_day = p.facts(&GranuleId::parse("HLS.S30.T01GBH.2022400T214921.v2.0").unwrap());
        assert_eq!(bad_day.platform_label(), "S30");
        assert_eq!(bad_day.acquisition_date, None);
    }

    #[test]
    fn custom_parser() {
        let p = IdParser::new(r"^(?P<platform>[A-Z]+)_(?P<date>\d{8})_", "%Y%m%d").unwrap();
        let facts = p.facts(&GranuleId::parse("MODIS_20210305_x").unwrap());
        assert_eq!(facts.platform_label(), "MODIS");
        assert_eq!(facts.date_label(), "2021-03-05");
        assert!(matches!(
            IdParser::new("^(?P<x>.)$", "%Y"),
            Err(IdParserError::MissingGroups)
        ));
        assert!(matches!(
            IdParser::new("(", "%Y"),
            Err(IdParserError::BadPattern(_))
        ));
    }
}
