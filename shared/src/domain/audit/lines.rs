//! One fact as one line of text, granule id first: the audit sorts these lines on disk, so a
//! granule's facts from the three tables meet however many there are. Free text (a reason, a
//! key) is escaped so a line stays one line and its fields stay apart.

use super::{LogSeen, Seen};
use crate::domain::attempt_budget::Ends;
use crate::domain::classify::Route;

/// A fact and its granule, as the sort carries them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactLine {
    pub granule_id: String,
    pub seen: Seen,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an audit fact line ({why}): {line:?}")]
pub struct BadFactLine {
    pub line: String,
    pub why: &'static str,
}

impl FactLine {
    pub fn new(granule_id: impl Into<String>, seen: Seen) -> Self {
        Self {
            granule_id: granule_id.into(),
            seen,
        }
    }

    /// The line, without its newline.
    pub fn encode(&self) -> String {
        let id = escape(&self.granule_id);
        match &self.seen {
            Seen::Row { fed } => format!("{id}\tR\t{}", u8::from(*fed)),
            Seen::InFlight { attempt } => format!("{id}\tF\t{attempt}"),
            Seen::CancelListed { attempt } => format!("{id}\tC\t{attempt}"),
            Seen::Product {
                template,
                key,
                bytes,
            } => format!("{id}\tP\t{template}\t{bytes}\t{}", escape(key)),
            Seen::Log(l) => format!(
                "{id}\tL\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                l.attempt,
                flags(l),
                route_name(l.route),
                l.ends.attempt,
                l.ends.spot_ends,
                l.memory_mib.map_or("-".to_owned(), |m| m.to_string()),
                escape(&l.reason),
            ),
        }
    }

    pub fn decode(line: &str) -> Result<Self, BadFactLine> {
        let bad = |why| BadFactLine {
            line: line.to_owned(),
            why,
        };
        let f: Vec<&str> = line.split('\t').collect();
        let number = |i: usize| -> Result<u64, BadFactLine> {
            f.get(i)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad("a number is missing"))
        };
        let small = |i: usize| -> Result<u32, BadFactLine> {
            u32::try_from(number(i)?).map_err(|_| bad("a number is too large"))
        };
        let seen = match f.get(1).copied() {
            Some("R") => Seen::Row {
                fed: number(2)? == 1,
            },
            Some("F") => Seen::InFlight { attempt: small(2)? },
            Some("C") => Seen::CancelListed { attempt: small(2)? },
            Some("P") => Seen::Product {
                template: usize::try_from(number(2)?).map_err(|_| bad("template"))?,
                bytes: number(3)?,
                key: unescape(f.get(4).ok_or_else(|| bad("no key"))?),
            },
            Some("L") => {
                let flags = f.get(3).ok_or_else(|| bad("no flags"))?;
                Seen::Log(LogSeen {
                    attempt: small(2)?,
                    success_side: flags.contains('s'),
                    superseded: flags.contains('x'),
                    revoked: flags.contains('r'),
                    route: route_of(f.get(4).copied()).ok_or_else(|| bad("no route"))?,
                    ends: Ends {
                        attempt: small(5)?,
                        spot_ends: small(6)?,
                    },
                    out_of_memory: flags.contains('m'),
                    memory_mib: match f.get(7).copied() {
                        Some("-") => None,
                        _ => Some(small(7)?),
                    },
                    reason: unescape(f.get(8).ok_or_else(|| bad("no reason"))?),
                })
            }
            _ => return Err(bad("an unknown kind")),
        };
        Ok(Self {
            granule_id: unescape(f.first().ok_or_else(|| bad("no granule"))?),
            seen,
        })
    }
}

fn flags(l: &LogSeen) -> String {
    let mut s = String::from("-");
    for (on, c) in [
        (l.success_side, 's'),
        (l.superseded, 'x'),
        (l.revoked, 'r'),
        (l.out_of_memory, 'm'),
    ] {
        if on {
            s.push(c);
        }
    }
    s
}

fn route_name(route: Route) -> &'static str {
    match route {
        Route::Done => "done",
        Route::RetryQueue => "retry_queue",
        Route::FailureDlq => "failure_dlq",
        Route::Cancelled => "cancelled",
    }
}

fn route_of(name: Option<&str>) -> Option<Route> {
    [
        Route::Done,
        Route::RetryQueue,
        Route::FailureDlq,
        Route::Cancelled,
    ]
    .into_iter()
    .find(|r| Some(route_name(*r)) == name)
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}
