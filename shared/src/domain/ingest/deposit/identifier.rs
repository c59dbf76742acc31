//! Which identifier an object is stored under, and EZID's ANVL bodies and answers (see the parent's notes on EZID's API).

use super::*;

/// Percent-encodes `%`, CR, LF (and `:` in names) as EZID's ANVL wants.
fn anvl_escape(text: &str, name: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '\r' => out.push_str("%0D"),
            '\n' => out.push_str("%0A"),
            ':' if name => out.push_str("%3A"),
            c => out.push(c),
        }
    }
    out
}

/// An ANVL body: one `name: value` line per pair, escaped.
pub fn anvl(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(n, v)| format!("{}: {}\n", anvl_escape(n, true), anvl_escape(v, false)))
        .collect()
}

/// The pairs of an ANVL body (lines without `: ` are skipped).
pub fn parse_anvl(body: &str) -> Vec<(String, String)> {
    body.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| {
            (
                crate::domain::percent::decode(n.trim()),
                crate::domain::percent::decode(v.trim_start()),
            )
        })
        .collect()
}

/// Why EZID's answer to a mint names no identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MintAnswerError {
    /// EZID's own `error: …`: its reason, decoded.
    #[error("{0}")]
    Refused(String),
    /// `success:` with nothing after it (the answer's first line).
    #[error("EZID said success but named no identifier: {0:?}")]
    NoIdentifier(String),
    /// Neither `success:` nor `error:` (the answer's first line).
    #[error("not an EZID answer: {0:?}")]
    NotEzid(String),
}

/// EZID's answer to a mint: `Ok(identifier)` for `success: …` (the identifier before any
/// ` | shadow`), `Err` for `error: …` or anything else.
pub fn mint_answer(body: &str) -> Result<String, MintAnswerError> {
    let first = body.lines().next().unwrap_or("").trim();
    match first.split_once(':') {
        Some(("success", rest)) => {
            let id = crate::domain::percent::decode(rest.trim())
                .split(" | ")
                .next()
                .unwrap_or("")
                .trim()
                .to_owned();
            if id.is_empty() {
                Err(MintAnswerError::NoIdentifier(first.to_owned()))
            } else {
                Ok(id)
            }
        }
        Some(("error", why)) => Err(MintAnswerError::Refused(crate::domain::percent::decode(
            why.trim(),
        ))),
        _ => Err(MintAnswerError::NotEzid(first.to_owned())),
    }
}

/// The metadata a mint sends: the deposit's ERC (EZID's `erc.who` … profile), and the job and
/// collection it was minted for — so an identifier whose answer was lost can be found by an
/// operator on the shoulder.
pub fn mint_metadata(job: &JobRecord) -> String {
    let d = &job.deposit;
    let job_id = job.id.to_string();
    let mut pairs: Vec<(&str, &str)> = vec![("_profile", "erc")];
    // Every ERC field, `(:unav)` where the depositor gave none (as ERC marks the unknown): a
    // service that requires them refuses a mint for a missing one otherwise.
    for (name, value) in [
        ("erc.who", &d.erc_who),
        ("erc.what", &d.erc_what),
        ("erc.when", &d.erc_when),
    ] {
        pairs.push((name, value.as_deref().unwrap_or("(:unav)")));
    }
    pairs.push(("granary.job", &job_id));
    pairs.push(("granary.collection", &job.collection));
    anvl(&pairs)
}

/// What the processing step does about the object's identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentifierStep {
    /// Store under this identifier (`why` says where it came from); write it to the record
    /// first if the record does not hold it yet.
    Use { identifier: String, why: String },
    /// Claim, then mint one (no identifier anywhere, and a minter is configured).
    Mint,
    /// The job fails with this reason.
    Fail(String),
    /// Nothing names the object and it is not to be minted one: it is stored under its job id.
    Unidentified,
    /// The job is to be minted an identifier but this pass has no identifier service (its
    /// settings are missing): the job waits in storing, and the pass says why.
    Wait(String),
    /// A mint claimed less than a lease ago may still be under way in another pass: wait.
    InFlight(String),
}

/// The reason a job fails with when a mint was claimed and its answer never written: EZID may
/// have minted, and minting again could make a second identifier for one object.
pub const MINT_UNKNOWN: &str = "minting outcome unknown";

/// The identifier rule, in the seed's order: the record's own (written right after the mint, so
/// a restarted job never mints again); the one its local id is already `known` by — a
/// depositor-supplied one that differs fails the job; the depositor's; a mint when the job was
/// made to mint (`mints_identifier`) — unless an earlier mint was claimed and not answered (then
/// the job fails for an operator: `granary ingest resume --identifier ID` with what EZID minted,
/// or `--mint-again`), and only if this pass `can_mint`.
pub fn identifier_step(
    job: &JobRecord,
    known: Option<&str>,
    can_mint: bool,
    now: DateTime<Utc>,
    lease: std::time::Duration,
) -> IdentifierStep {
    let supplied = job.object.primary_id.as_deref().filter(|s| !s.is_empty());
    let local = job.object.local_id.as_deref().unwrap_or("");
    if let Some(kept) = &job.identifier {
        return match known {
            Some(k) if k != kept => IdentifierStep::Fail(format!(
                "local id {local} is already {k} in {}; this job holds {kept}",
                job.collection
            )),
            _ => IdentifierStep::Use {
                identifier: kept.clone(),
                why: "the job's own".into(),
            },
        };
    }
    if let Some(k) = known {
        return match supplied {
            Some(s) if s != k => IdentifierStep::Fail(format!(
                "local id {local} is {k} in {}; the depositor supplied {s}",
                job.collection
            )),
            _ => IdentifierStep::Use {
                identifier: k.to_owned(),
                why: format!("local id {local}"),
            },
        };
    }
    if let Some(s) = supplied {
        return IdentifierStep::Use {
            identifier: s.to_owned(),
            why: "supplied by the depositor".into(),
        };
    }
    if let Some(at) = job.mint_claimed_at {
        // The claiming pass may still be waiting for EZID's answer; only once no pass can still
        // be running (a lease, longer than any Lambda runs) is the answer lost.
        let age = now.signed_duration_since(at).to_std().unwrap_or_default();
        if age < lease {
            return IdentifierStep::InFlight(format!(
                "a mint claimed at {} may be under way; its outcome is decided {}s after it",
                at.to_rfc3339(),
                lease.as_secs()
            ));
        }
        return IdentifierStep::Fail(format!(
            "{MINT_UNKNOWN}: a mint was claimed at {} and its answer never recorded; EZID may \
             hold an identifier whose granary.job is {} — resume with --identifier ID, or \
             --mint-again if it holds none",
            at.to_rfc3339(),
            job.id
        ));
    }
    match (job.mints_identifier, can_mint) {
        (false, _) => IdentifierStep::Unidentified,
        (true, true) => IdentifierStep::Mint,
        (true, false) => IdentifierStep::Wait(format!(
            "{} is to be minted an identifier, and this pass has no identifier service: set \
             GRANARY_INGEST_EZID_URL and GRANARY_INGEST_EZID_SHOULDER as the dispatcher has them",
            job.id
        )),
    }
}

/// A local id's binding in its collection: the identifier its objects are stored under, or —
/// while `identifier` is `None` — the job that reserved it to mint one. Created If-None-Match,
/// changed If-Match: the first binding stands, and one mint is made per local id.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LocalIdBinding {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identifier: Option<String>,
    /// The job that bound (or reserved) it.
    pub job: String,
}

/// A local id bound to another identifier than the one a job holds (the job fails with this).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("local id {local} was bound to {bound} by {bound_by}; this job holds {held}")]
pub struct BoundElsewhere {
    pub local: String,
    /// The identifier the binding names, and the job that bound it.
    pub bound: String,
    pub bound_by: String,
    /// The identifier the job holds.
    pub held: String,
}

/// A local id's binding completed with `identifier` for `job`: `None` when it already names it,
/// `Err` when another identifier is bound (the job fails with why). A reservation (no identifier
/// yet) is completed whichever job made it: a job that reserved to mint finds this identifier
/// bound when it comes back, and uses it.
pub fn rebind(
    binding: &LocalIdBinding,
    local: &str,
    identifier: &str,
    job: &str,
) -> Result<Option<LocalIdBinding>, BoundElsewhere> {
    match binding.identifier.as_deref() {
        Some(bound) if bound == identifier => Ok(None),
        Some(bound) => Err(BoundElsewhere {
            local: local.to_owned(),
            bound: bound.to_owned(),
            bound_by: binding.job.clone(),
            held: identifier.to_owned(),
        }),
        None => Ok(Some(LocalIdBinding {
            identifier: Some(identifier.to_owned()),
            job: job.to_owned(),
        })),
    }
}

/// What the job that reserved a local id (to mint its identifier) has become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// Its record is gone (deleted), or it ended without an identifier and with no mint claimed.
    Gone,
    /// It holds this identifier (it minted, and died before completing the binding).
    Identified(String),
    /// Still working, or stopped with a mint whose outcome is unknown (an operator resolves it).
    Busy,
}

/// Before job `me` mints for a local id: mint under its own reservation, reserve the local id
/// first, take a dead holder's reservation over, use what the holder minted, or wait for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindingStep {
    /// `me` holds the reservation: mint.
    Mint,
    /// No binding yet: reserve it (If-None-Match), then mint.
    Reserve,
    /// The holder is gone: take its reservation over (If-Match), then mint.
    TakeOver,
    /// The holder minted this: use it (and complete the binding).
    Use(String),
    /// Another job is minting for this local id: wait for it (the next tick looks again).
    Wait(String),
}

/// The binding rule for a job about to mint (`binding` as read; `holder` what its holder is,
/// when another job holds it).
pub fn binding_step(binding: Option<&LocalIdBinding>, me: &str, holder: Holder) -> BindingStep {
    let Some(b) = binding else {
        return BindingStep::Reserve;
    };
    if let Some(id) = &b.identifier {
        return BindingStep::Use(id.clone());
    }
    if b.job == me {
        return BindingStep::Mint;
    }
    match holder {
        Holder::Gone => BindingStep::TakeOver,
        Holder::Identified(id) => BindingStep::Use(id),
        Holder::Busy => BindingStep::Wait(format!(
            "job {} is minting this local id's identifier; this job uses it once it is bound",
            b.job
        )),
    }
}

/// The storing step ended: the object stored with its manifest at `key` (on to recording), or
/// `why` it could not be (minting refused or unknown, a local id bound elsewhere, a store that
/// answered with other bytes).
pub fn on_stored(outcome: Result<&str, &str>) -> crate::domain::machine::Move<JobState> {
    let from = [JobState::Storing];
    match outcome {
        Ok(key) => {
            crate::domain::machine::Move::new(&from, JobState::Recording, format!("stored: {key}"))
        }
        Err(why) => crate::domain::machine::Move::new(&from, JobState::Failed, why),
    }
}

/// What an operator says of a job whose mint was claimed and never answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MintFix {
    /// EZID holds this identifier for the job: store under it.
    Identifier(String),
    /// EZID holds none for the job: mint again.
    MintAgain,
}

/// Why an operator's [`MintFix`] does not apply to a job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MintFixRefused {
    /// The job holds an identifier (the one named), or claimed no mint.
    #[error(
        "{job} has no unanswered mint to resolve (identifier {})",
        .identifier.as_deref().unwrap_or("none")
    )]
    NothingToResolve {
        job: JobId,
        identifier: Option<String>,
    },
    #[error("an empty identifier")]
    EmptyIdentifier,
}

/// Whether `fix` applies to `job`: only a job with an unanswered mint claim and no identifier.
pub fn resolve_mint(job: &JobRecord, fix: &MintFix) -> Result<(), MintFixRefused> {
    if job.identifier.is_some() || job.mint_claimed_at.is_none() {
        return Err(MintFixRefused::NothingToResolve {
            job: job.id.clone(),
            identifier: job.identifier.clone(),
        });
    }
    match fix {
        MintFix::Identifier(id) if id.trim().is_empty() => Err(MintFixRefused::EmptyIdentifier),
        _ => Ok(()),
    }
}

/// The record as `fix` leaves it: the claim withdrawn, and the identifier taken when given.
pub fn apply_mint_fix(job: &mut JobRecord, fix: &MintFix) {
    job.mint_claimed_at = None;
    job.mint_claim_token = None;
    if let MintFix::Identifier(id) = fix {
        job.identifier = Some(id.trim().to_owned());
    }
}
