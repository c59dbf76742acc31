//! The identifier service's twin: mints `<shoulder><n>` in order and keeps every mint with its
//! metadata, so a test can count the mints a job caused; it can refuse, or lose its answers.

use crate::domain::ingest::deposit::parse_anvl;
use crate::ports::{MintError, Minter};
use async_trait::async_trait;
use std::sync::Mutex;

/// What the twin does with the next mints.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MintBehaviour {
    #[default]
    Mint,
    /// Answers `error: …` and mints nothing.
    Refuse(String),
    /// Mints, then the answer is lost (a timeout seen by the caller).
    LoseAnswer,
}

/// An identifier minted and the metadata (ANVL pairs) it was minted with.
pub type Minted = (String, Vec<(String, String)>);

#[derive(Default)]
pub struct MemoryMinter {
    minted: Mutex<Vec<Minted>>,
    behaviour: Mutex<MintBehaviour>,
}

impl MemoryMinter {
    pub fn behave(&self, b: MintBehaviour) {
        if let Ok(mut now) = self.behaviour.lock() {
            *now = b;
        }
    }

    /// Every identifier minted, with the metadata it was minted with.
    pub fn minted(&self) -> Vec<Minted> {
        self.minted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The identifiers minted whose `granary.job` metadata is `job`.
    pub fn minted_for(&self, job: &str) -> Vec<String> {
        self.minted()
            .into_iter()
            .filter(|(_, meta)| meta.iter().any(|(n, v)| n == "granary.job" && v == job))
            .map(|(id, _)| id)
            .collect()
    }
}

#[async_trait]
impl Minter for MemoryMinter {
    async fn mint(&self, shoulder: &str, metadata: &str) -> Result<String, MintError> {
        let behaviour = self
            .behaviour
            .lock()
            .map(|b| b.clone())
            .map_err(|_| MintError::Unknown("the twin's lock is poisoned".into()))?;
        if let MintBehaviour::Refuse(why) = behaviour {
            return Err(MintError::Refused(why));
        }
        let mut minted = self
            .minted
            .lock()
            .map_err(|_| MintError::Unknown("the twin's lock is poisoned".into()))?;
        let id = format!("{shoulder}{:04}", minted.len() + 1);
        minted.push((id.clone(), parse_anvl(metadata)));
        match behaviour {
            MintBehaviour::LoseAnswer => Err(MintError::Unknown(format!(
                "timed out (the twin minted {id})"
            ))),
            _ => Ok(id),
        }
    }
}
