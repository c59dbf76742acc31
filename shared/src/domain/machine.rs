//! The state-machine kernel every workflow is written on: a record's states, the table of
//! transitions between them with who makes each, one check of a change against the table, and
//! one way to read a state's name. The item lifecycle, the ingest job and batch, and the archive
//! job are each an enum of states made a [`State`] by [`state_machine!`]; their tables are data,
//! their checks and parsing this module's.

use chrono::{DateTime, Utc};
use std::fmt;

/// Who makes a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// A handler, on its own (an event, a schedule, a message).
    Automatic,
    /// An operator's command.
    Operator,
}

/// The states of one kind of record, and its transition table.
pub trait State: Copy + Eq + fmt::Debug + fmt::Display + Send + Sync + 'static {
    /// What a record of this machine is called in messages: "an item", "a job"…
    const RECORD: &'static str;
    /// Every state, in the table's order.
    const ALL: &'static [Self];
    /// Every transition the record may make, and who makes it. Nothing else may change a state.
    const TRANSITIONS: &'static [(Self, Self, Cause)];

    /// The state's name as records store it and people type it.
    fn as_str(self) -> &'static str;

    /// Every state `self` may move to, in table order.
    fn successors(self) -> Successors<Self> {
        Successors {
            from: self,
            rest: Self::TRANSITIONS.iter(),
        }
    }
}

/// The states a state may move to ([`State::successors`]).
pub struct Successors<S: 'static> {
    from: S,
    rest: std::slice::Iter<'static, (S, S, Cause)>,
}

impl<S: State> Iterator for Successors<S> {
    type Item = S;
    fn next(&mut self) -> Option<S> {
        self.rest
            .by_ref()
            .find(|(from, _, _)| *from == self.from)
            .map(|(_, to, _)| *to)
    }
}

/// A change the table does not list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{record} cannot go from {from} to {to}", record = S::RECORD)]
pub struct IllegalTransition<S: State> {
    pub from: S,
    pub to: S,
}

/// Refuses any change the table does not list; says who may make one it does.
pub fn check<S: State>(from: S, to: S) -> Result<Cause, IllegalTransition<S>> {
    S::TRANSITIONS
        .iter()
        .find(|(f, t, _)| *f == from && *t == to)
        .map(|(_, _, cause)| *cause)
        .ok_or(IllegalTransition { from, to })
}

/// A name no state of the machine has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{given:?} is not a state of {record}; the states are {known}")]
pub struct UnknownState {
    pub record: &'static str,
    pub given: String,
    pub known: String,
}

/// The state named `text`, whatever its case and whether words are joined by `-` or `_`
/// (`processing-failed`, `PROCESSING_FAILED` and `update_reporting` all read).
pub fn parse<S: State>(text: &str) -> Result<S, UnknownState> {
    let wanted = normal(text.trim());
    S::ALL
        .iter()
        .copied()
        .find(|s| normal(s.as_str()) == wanted)
        .ok_or_else(|| UnknownState {
            record: S::RECORD,
            given: text.to_owned(),
            known: S::ALL
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

fn normal(s: &str) -> String {
    s.to_ascii_lowercase().replace('_', "-")
}

/// A state enum made a [`State`]: `state_machine!(JobState, "a job", TRANSITIONS)` for an enum
/// with an inherent `ALL` array and `as_str`; also its `Display` (the name) and `FromStr`
/// ([`parse`]).
#[macro_export]
macro_rules! state_machine {
    ($state:ty, $record:expr, $transitions:expr) => {
        impl $crate::domain::machine::State for $state {
            const RECORD: &'static str = $record;
            const ALL: &'static [$state] = &<$state>::ALL;
            const TRANSITIONS: &'static [($state, $state, $crate::domain::machine::Cause)] =
                &$transitions;

            fn as_str(self) -> &'static str {
                <$state>::as_str(self)
            }
        }

        impl ::std::fmt::Display for $state {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(<$state>::as_str(*self))
            }
        }

        impl ::std::str::FromStr for $state {
            type Err = $crate::domain::machine::UnknownState;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $crate::domain::machine::parse(s)
            }
        }
    };
}

/// A record whose state moves by its machine's table: the ingest job and batch, the archive job.
pub trait Record: Clone {
    type State: State;
    fn state(&self) -> Self::State;

    /// The record in state `to`, with what entering it records (reason, time, history, and the
    /// fields a transition moves on), unchecked: only [`Record::moved`] calls it.
    fn entered(&self, to: Self::State, reason: &str, now: DateTime<Utc>) -> Self;

    /// The one way a record moves: `self` → `to` if the table allows it, the transition recorded.
    fn moved(
        &self,
        to: Self::State,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<Self, IllegalTransition<Self::State>> {
        check(self.state(), to)?;
        Ok(self.entered(to, reason, now))
    }
}

/// A move a decision made: taken only while the record is in one of `from` (empty: any state the
/// table lets move to `to`) — a record found elsewhere was moved by someone else and is left
/// alone — to `to`, for `reason`. Handlers write it with a compare-and-swap; they decide nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move<S: State> {
    pub from: Vec<S>,
    pub to: S,
    pub reason: String,
}

impl<S: State> Move<S> {
    pub fn new(from: &[S], to: S, reason: impl Into<String>) -> Self {
        Self {
            from: from.to_vec(),
            to,
            reason: reason.into(),
        }
    }

    /// `record` moved, or `None` if it is not in a state the move is from.
    pub fn apply<R: Record<State = S>>(
        &self,
        record: &R,
        now: DateTime<Utc>,
    ) -> Result<Option<R>, IllegalTransition<S>> {
        self.apply_with(record, now, |_| {})
    }

    /// Like [`Move::apply`], with `edit` applied to the moved record (the facts the move records).
    pub fn apply_with<R: Record<State = S>>(
        &self,
        record: &R,
        now: DateTime<Utc>,
        edit: impl Fn(&mut R),
    ) -> Result<Option<R>, IllegalTransition<S>> {
        if !self.from.is_empty() && !self.from.contains(&record.state()) {
            return Ok(None);
        }
        let mut next = record.moved(self.to, &self.reason, now)?;
        edit(&mut next);
        Ok(Some(next))
    }

    /// [`Move::apply`] as a compare-and-swap decision (its error in words).
    pub fn decide<R: Record<State = S>>(
        &self,
        now: DateTime<Utc>,
    ) -> impl Fn(&R) -> Result<Option<R>, Refused> + '_ {
        move |r| self.apply(r, now).map_err(|e| Refused::new(e.to_string()))
    }
}

/// A record's change its table or rule refuses, in words an operator reads (the record
/// protocol's `decide` answers with it: `repositories::json::change_record`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct Refused {
    pub why: String,
}

impl Refused {
    pub fn new(why: impl Into<String>) -> Self {
        Self { why: why.into() }
    }

    /// A refusal in `error`'s words.
    pub fn of(error: impl std::fmt::Display) -> Self {
        Self::new(error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::archive::job::ArchiveState;
    use crate::domain::ingest::batch::BatchState;
    use crate::domain::ingest::job::JobState;
    use crate::domain::lifecycle::ItemState;

    /// Every machine: each state reads back from its name in any case and either separator, no
    /// two states share a name, the table names only listed states and has no edge twice.
    fn well_formed<S: State + std::str::FromStr<Err = UnknownState>>() {
        for s in S::ALL {
            let name = s.as_str();
            assert_eq!(name.parse::<S>(), Ok(*s));
            assert_eq!(
                name.to_ascii_uppercase().replace('-', "_").parse::<S>(),
                Ok(*s)
            );
            assert_eq!(s.to_string(), name);
        }
        let mut names: Vec<_> = S::ALL.iter().map(|s| s.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), S::ALL.len(), "{}: a name twice", S::RECORD);
        for (i, (from, to, _)) in S::TRANSITIONS.iter().enumerate() {
            assert!(S::ALL.contains(from) && S::ALL.contains(to));
            assert!(
                !S::TRANSITIONS[..i]
                    .iter()
                    .any(|(f, t, _)| f == from && t == to),
                "{}: {from} → {to} listed twice",
                S::RECORD
            );
        }
        let e = "no such state".parse::<S>().unwrap_err();
        assert!(e.to_string().contains(S::ALL[0].as_str()), "{e}");
    }

    #[test]
    fn every_machine_is_well_formed() {
        well_formed::<ItemState>();
        well_formed::<JobState>();
        well_formed::<BatchState>();
        well_formed::<ArchiveState>();
    }

    #[test]
    fn the_check_answers_who_makes_a_listed_change_and_names_the_record_of_an_unlisted_one() {
        assert_eq!(
            check(JobState::Failed, JobState::Processing),
            Ok(Cause::Operator)
        );
        assert_eq!(
            check(JobState::Pending, JobState::Estimating),
            Ok(Cause::Automatic)
        );
        let e = check(BatchState::Completed, BatchState::Failed).unwrap_err();
        assert_eq!(e.to_string(), "a batch cannot go from completed to failed");
        let successors: Vec<_> = ItemState::ProcessingFailed.successors().collect();
        assert_eq!(successors, vec![ItemState::Ready, ItemState::Abandoned]);
    }
}
