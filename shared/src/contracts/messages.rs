//! Queue messages: their bodies, their attributes, and the one list of reasons a message is on the
//! retry queue or the failure DLQ. Everything granary sends to a queue is built here, and every
//! attribute name and `outcome` value is spelled only here.
//!
//! Attributes are SQS message attributes (String type): an operator sees them in the console and
//! `granary redrive --reason` filters on them, so a DLQ message says why it is there without its
//! body being parsed.

use super::{encode_text, EncodeError};
use crate::domain::campaign::Campaign;
use crate::domain::granule::{GranuleId, GranuleProcessingEvent};
use crate::domain::lifecycle::ItemState;
use crate::domain::poison::{RawText, RejectKind};
use crate::ports::OutgoingMessage;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Message attribute names.
pub mod attribute {
    /// Why the message is on its queue: an [`super::Outcome`].
    pub const OUTCOME: &str = "outcome";
    /// The human-readable cause.
    pub const REASON: &str = "reason";
    pub const ATTEMPT: &str = "attempt";
    pub const JOB_ID: &str = "job_id";
    /// A rejected input's [`crate::domain::poison::RejectKind`].
    pub const KIND: &str = "kind";
    /// Where a rejected input is recorded in S3.
    pub const RECORD_KEY: &str = "record_key";
    /// Set by EventBridge (not granary) on an event it could not deliver to its target and sent
    /// to the rule target's dead-letter queue instead, with ERROR_CODE, RULE_ARN, TARGET_ARN and
    /// others (EventBridge User Guide, "Using dead-letter queues to process undelivered events",
    /// https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-event-delivery.html#eb-rule-dlq).
    pub const EVENTBRIDGE_ERROR_MESSAGE: &str = "ERROR_MESSAGE";
}

/// Why a message is on the retry queue or the failure DLQ (its `outcome` attribute).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Retry queue: a job failed for a cause another attempt may fix (Spot, host, timeout).
    Retryable,
    /// DLQ: a failure no retry fixes, or the last attempt was spent.
    NonRetryable,
    /// Retry queue: an operator sent it back from the DLQ (`granary redrive`).
    Redriven,
    /// Retry queue: an operator resumed a failed item (`granary items resume`).
    Resumed,
    /// Retry queue: the importer admitted an item for processing.
    Ready,
    /// DLQ: an item gave up downloading.
    DownloadFailed,
    /// Retry queue or DLQ: an item outlived its state's timeout (the sweeper).
    TimedOut,
    /// DLQ: a poison input (row, event, message, record), recorded under the reject prefix.
    Rejected,
}

impl Outcome {
    pub const ALL: [Outcome; 8] = [
        Outcome::Retryable,
        Outcome::NonRetryable,
        Outcome::Redriven,
        Outcome::Resumed,
        Outcome::Ready,
        Outcome::DownloadFailed,
        Outcome::TimedOut,
        Outcome::Rejected,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Retryable => "RETRYABLE",
            Outcome::NonRetryable => "NON_RETRYABLE",
            Outcome::Redriven => "REDRIVEN",
            Outcome::Resumed => "RESUMED",
            Outcome::Ready => "READY",
            Outcome::DownloadFailed => "DOWNLOAD_FAILED",
            Outcome::TimedOut => "TIMED_OUT",
            Outcome::Rejected => "REJECTED",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == raw)
    }
}

/// The attributes of one message: its outcome and reason, and what else identifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub outcome: Outcome,
    pub reason: String,
    pub attempt: Option<u32>,
    pub job_id: Option<String>,
    pub kind: Option<RejectKind>,
    pub record_key: Option<String>,
}

impl Notice {
    pub fn new(outcome: Outcome, reason: impl Into<String>) -> Self {
        Self {
            outcome,
            reason: reason.into(),
            attempt: None,
            job_id: None,
            kind: None,
            record_key: None,
        }
    }

    pub fn attempt(self, attempt: u32) -> Self {
        Self {
            attempt: Some(attempt),
            ..self
        }
    }

    pub fn job(self, job_id: impl Into<String>) -> Self {
        Self {
            job_id: Some(job_id.into()),
            ..self
        }
    }

    /// A message with this notice's attributes and a body already encoded (a received body
    /// forwarded unchanged).
    pub fn on(&self, body: String) -> OutgoingMessage {
        OutgoingMessage {
            body,
            attributes: self.attributes(),
        }
    }

    fn attributes(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::from([
            (
                attribute::OUTCOME.to_owned(),
                self.outcome.as_str().to_owned(),
            ),
            (attribute::REASON.to_owned(), self.reason.clone()),
        ]);
        let mut put = |name: &str, value: Option<String>| {
            if let Some(v) = value {
                out.insert(name.to_owned(), v);
            }
        };
        put(attribute::ATTEMPT, self.attempt.map(|a| a.to_string()));
        put(attribute::JOB_ID, self.job_id.clone());
        put(attribute::KIND, self.kind.map(|k| k.as_str().to_owned()));
        put(attribute::RECORD_KEY, self.record_key.clone());
        out
    }
}

/// The reason a received message carries (empty when it has none, e.g. one an operator sent).
pub fn reason_of(attributes: &BTreeMap<String, String>) -> &str {
    attributes
        .get(attribute::REASON)
        .map(String::as_str)
        .unwrap_or("")
}

/// A message whose body is `body` as JSON and whose attributes are `notice`'s.
pub fn message<T: Serialize>(
    what: &'static str,
    body: &T,
    notice: &Notice,
) -> Result<OutgoingMessage, EncodeError> {
    Ok(OutgoingMessage {
        body: encode_text(what, body)?,
        attributes: notice.attributes(),
    })
}

/// The retry-queue message (also what the failure DLQ keeps of a failed granule): the granule's
/// attempt that ended. `redrive` is set when an operator sent it back, so the requeuer grants the
/// next attempt even past the attempt budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryMessage {
    #[serde(flatten)]
    pub event: GranuleProcessingEvent,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redrive: bool,
    /// The campaign whose attempt it is (`domain::campaign`): the requeuer submits the next one
    /// in that campaign's state. Absent: the unnamed campaign.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub campaign: Option<Campaign>,
    /// How many of the granule's attempts up to this one ended for capacity (Spot reclaims,
    /// capacity cancels): the count `domain::attempt_budget` spends. It travels on with the
    /// message (to the DLQ and back by a redrive). Absent: none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spot_ends: u32,
    /// The memory the ended attempt had, MiB, where granary set it or it ran out
    /// (`domain::memory`): the next attempt keeps it, or doubles it after running out. It goes
    /// to the DLQ with the message, so a dead letter says what it last had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u32>,
    /// The attempt ran out of memory.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub out_of_memory: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl RetryMessage {
    /// The message for an attempt that ended on its own (not an operator's redrive).
    pub fn ended(granule_id: GranuleId, attempt: u32) -> Self {
        Self {
            event: GranuleProcessingEvent {
                granule_id,
                attempt,
            },
            redrive: false,
            campaign: None,
            spot_ends: 0,
            memory_mib: None,
            out_of_memory: false,
        }
    }

    /// The same attempt, sent back by an operator.
    pub fn redriven(event: GranuleProcessingEvent) -> Self {
        Self {
            event,
            redrive: true,
            campaign: None,
            spot_ends: 0,
            memory_mib: None,
            out_of_memory: false,
        }
    }

    /// The message with the memory its attempt had, and whether it ran out.
    pub fn with_memory(self, memory_mib: Option<u32>, out_of_memory: bool) -> Self {
        Self {
            memory_mib,
            out_of_memory,
            ..self
        }
    }

    /// The message with the granule's capacity ends counted up to its attempt.
    pub fn with_spot_ends(self, spot_ends: u32) -> Self {
        Self { spot_ends, ..self }
    }

    /// The granule's ends so far, as its attempt budget counts them.
    pub fn ends(&self) -> crate::domain::attempt_budget::Ends {
        crate::domain::attempt_budget::Ends {
            attempt: self.event.attempt,
            spot_ends: self.spot_ends,
        }
    }

    /// The message as `campaign`'s.
    pub fn of_campaign(self, campaign: Option<Campaign>) -> Self {
        Self { campaign, ..self }
    }

    pub fn to_message(&self, notice: &Notice) -> Result<OutgoingMessage, EncodeError> {
        message("a retry message", self, notice)
    }
}

/// The DLQ message of an item the importer gave up on (the item record holds the history).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemNotice {
    pub item_id: GranuleId,
    pub state: ItemState,
    /// The campaign whose item it is (`granary resume` is run with it); absent: the unnamed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub campaign: Option<Campaign>,
}

impl ItemNotice {
    pub fn to_message(&self, notice: &Notice) -> Result<OutgoingMessage, EncodeError> {
        message("an item notice", self, notice)
    }
}

/// What travels on the import queue: an item, and optionally the step wanted (otherwise the
/// item's state picks it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportMessage {
    pub item_id: GranuleId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<Step>,
    /// An operator's resume: the next download attempt is granted even past the budget.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resume: bool,
    /// The campaign whose item it is (set by `Ctx::send`): its step runs in that campaign's
    /// state. Absent: the unnamed campaign.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub campaign: Option<Campaign>,
}

impl ImportMessage {
    pub fn to_message(&self) -> Result<OutgoingMessage, EncodeError> {
        Ok(OutgoingMessage::new(encode_text(
            "an import message",
            self,
        )?))
    }
}

/// An importer step an import message may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    Download,
    Admit,
    Revalidate,
}

/// The DLQ message body of a rejected input: small whatever the input's size (the record under
/// the reject prefix keeps the input).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectNotice {
    pub rejected: RejectKind,
    pub reason: String,
    pub source: String,
    pub record_key: String,
    pub input: RawText,
}

impl RejectNotice {
    pub fn to_message(&self) -> Result<OutgoingMessage, EncodeError> {
        let notice = Notice {
            kind: Some(self.rejected),
            record_key: Some(self.record_key.clone()),
            ..Notice::new(Outcome::Rejected, self.reason.clone())
        };
        message("a reject notice", self, &notice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_reads_back_as_itself_and_spellings_are_distinct() {
        for o in Outcome::ALL {
            assert_eq!(Outcome::parse(o.as_str()), Some(o));
        }
        let mut names: Vec<_> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
        names.dedup();
        assert_eq!(names.len(), Outcome::ALL.len());
        assert_eq!(Outcome::parse("retryable"), None);
    }

    #[test]
    fn a_retry_message_carries_its_outcome_reason_and_attempt_as_attributes() {
        let id = GranuleId::parse("G").unwrap();
        let m = RetryMessage::ended(id, 2)
            .to_message(
                &Notice::new(Outcome::Retryable, "spot")
                    .attempt(2)
                    .job("j-1"),
            )
            .unwrap();
        assert_eq!(m.body, r#"{"granule_id":"G","attempt":2}"#);
        assert_eq!(m.attributes[attribute::OUTCOME], "RETRYABLE");
        assert_eq!(reason_of(&m.attributes), "spot");
        assert_eq!(m.attributes[attribute::ATTEMPT], "2");
        assert_eq!(m.attributes[attribute::JOB_ID], "j-1");
        assert_eq!(m.attributes.len(), 4);
    }

    #[test]
    fn a_redriven_message_says_so_in_its_body_and_a_plain_one_reads_as_not_redriven() {
        let event = GranuleProcessingEvent {
            granule_id: GranuleId::parse("G").unwrap(),
            attempt: 2,
        };
        let body = encode_text("t", &RetryMessage::redriven(event.clone())).unwrap();
        assert_eq!(body, r#"{"granule_id":"G","attempt":2,"redrive":true}"#);
        let plain: RetryMessage =
            serde_json::from_str(r#"{"granule_id":"G","attempt":2}"#).unwrap();
        assert_eq!(plain, RetryMessage::ended(event.granule_id, 2));
    }

    #[test]
    fn a_reject_notice_names_its_kind_and_record() {
        let m = RejectNotice {
            rejected: RejectKind::UnreadableEvent,
            reason: "not JSON".into(),
            source: "events".into(),
            record_key: "rejects/x.json".into(),
            input: RawText::of("{"),
        }
        .to_message()
        .unwrap();
        assert_eq!(m.attributes[attribute::OUTCOME], "REJECTED");
        assert_eq!(
            m.attributes[attribute::KIND],
            RejectKind::UnreadableEvent.as_str()
        );
        assert_eq!(m.attributes[attribute::RECORD_KEY], "rejects/x.json");
    }
}
