//! Seed 004's processing step on the twins: the identifier minted once (or kept, or looked up
//! by local id), the ERC and Dublin Core files and the storage manifest written, the store's
//! answer read back, recording from the manifest; a refused mint, a lost answer and an operator's
//! resolution; a store that answers with other bytes; the container step switched off.

use super::*;
use crate::adapters::memory::{MemoryMinter, MintBehaviour};
use crate::config::ingest::EzidSettings;
use crate::domain::ingest::deposit::{
    parse_storage_manifest, MintFix, DUBLIN_CORE_FILE, ERC_FILE, MINT_UNKNOWN,
};

const SHOULDER: &str = "ark:/99999/fk4";

fn minting_world(container_step: bool) -> (World, Arc<MemoryMinter>) {
    let mut w = world(IngestSettings {
        container_step,
        ezid: Some(EzidSettings {
            url: "http://ezid.invalid".into(),
            shoulder: SHOULDER.into(),
            credentials_parameter: None,
        }),
        ..IngestSettings::default()
    });
    let minter = Arc::new(MemoryMinter::default());
    w.ingest_ctx.minter = Some(minter.clone());
    (w, minter)
}

async fn text(w: &World, key: &str) -> String {
    let body = w.store.get(key).await.unwrap().unwrap().body;
    String::from_utf8(body.to_vec()).unwrap()
}

#[tokio::test]
async fn an_object_is_minted_once_stored_with_erc_dublin_core_and_manifest_and_recorded() {
    let (w, minter) = minting_world(true);
    let m = w.manifest("m1", &[("map.txt", "a map")], &[]).await;
    let id = w.submit(&m, "maps", None).await;
    let s = w.run(|_| true).await;
    assert_eq!(s.notified, 1);
    let jid = id.job(1);
    let job = w.job(&jid).await;
    let minted = minter.minted_for(jid.as_str());
    assert_eq!(minted, vec![format!("{SHOULDER}0001")], "one mint");
    assert_eq!(job.identifier.as_deref(), Some(minted[0].as_str()));
    assert_eq!(job.mint_claimed_at, None);
    // The mint carried the job and collection, for an operator to find a lost answer by.
    let (_, meta) = &minter.minted()[0];
    assert!(meta.contains(&("granary.collection".into(), "maps".into())));
    // The storage manifest lists the producer file and granary's two, each as stored.
    let key = job.storage_manifest.clone().unwrap();
    assert!(
        key.starts_with(&format!(
            "ingest/storage/collection=maps/id=ark%3A%2F99999%2Ffk40001/{jid}/"
        )),
        "{key}"
    );
    let manifest = parse_storage_manifest(&text(&w, &key).await).unwrap();
    assert_eq!(
        (manifest.object.as_str(), manifest.job.as_str()),
        (minted[0].as_str(), jid.as_str())
    );
    let files = manifest.files;
    let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, vec!["producer/map.txt", ERC_FILE, DUBLIN_CORE_FILE]);
    assert_eq!(text(&w, &files[0].key).await, "a map");
    let erc = text(&w, &files[1].key).await;
    assert!(erc.contains(&format!("where: {}", minted[0])), "{erc}");
    // The catalog record is the manifest's, and the storage outlives the batch's cleanup.
    let catalog: serde_json::Value =
        serde_json::from_str(&text(&w, &w.ingest_ctx.ingest().keys.catalog("maps", &jid)).await)
            .unwrap();
    assert_eq!(catalog["identifier"], minted[0].as_str());
    assert_eq!(catalog["file_count"], 3);
    assert_eq!(catalog["files"][0]["name"], "producer/map.txt");
    assert_eq!(w.batch(&id).await.state, BatchState::Deleted, "cleaned up");
    assert!(
        w.store.get(&key).await.unwrap().is_some(),
        "storage is kept"
    );

    // The same local id again: its identifier is looked up, nothing minted.
    let again = w.submit(&m, "maps", None).await;
    w.run(|_| true).await;
    let second = w.job(&again.job(1)).await;
    assert_eq!(second.state, JobState::Deleted, "{}", second.reason);
    assert_eq!(second.identifier, job.identifier);
    assert_eq!(
        minter.minted().len(),
        1,
        "no second mint for a known local id"
    );
}

#[tokio::test]
async fn a_local_id_known_by_another_identifier_than_the_depositor_supplied_fails() {
    let (w, minter) = minting_world(false);
    let m = w.manifest("m1", &[("map.txt", "a map")], &[]).await;
    let first = w.submit(&m, "maps", None).await;
    w.run(|_| true).await;
    let bound = w.job(&first.job(1)).await.identifier.unwrap();
    // A manifest naming the same local id with its own primary identifier.
    let url = "http://archive/map.txt";
    let body = "#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName | mrt:localIdentifier | mrt:primaryIdentifier\n"
        .to_owned()
        + &format!("{url} | | | | map.txt | map.txt | ark:/1/other\n");
    let key = w.ingest_ctx.ingest().keys.manifest("m2");
    w.store
        .put(&key, Bytes::from(body), PutCondition::Overwrite)
        .await
        .unwrap();
    let second = w.submit(&format!("s3://bucket/{key}"), "maps", None).await;
    w.run(|_| true).await;
    let job = w.job(&second.job(1)).await;
    assert_eq!(job.state, JobState::Failed);
    assert!(
        job.reason.contains(&bound) && job.reason.contains("ark:/1/other"),
        "{}",
        job.reason
    );
    assert_eq!(job.last_successful_status, Some(JobState::Processing));
    assert_eq!(minter.minted().len(), 1);
    // The container step is off: no Batch job ran for either.
    assert!(w.jobs.submitted().is_empty());
}

#[tokio::test]
async fn a_refused_mint_fails_the_job_and_a_resume_mints_once_it_is_accepted() {
    let (w, minter) = minting_world(false);
    minter.behave(MintBehaviour::Refuse(
        "bad request - no such shoulder".into(),
    ));
    let m = w.manifest("m1", &[("map.txt", "a map")], &[]).await;
    let id = w.submit(&m, "maps", None).await;
    w.run(|_| true).await;
    let jid = id.job(1);
    let job = w.job(&jid).await;
    assert_eq!(job.state, JobState::Failed);
    assert!(job.reason.contains("no such shoulder"), "{}", job.reason);
    assert_eq!(job.mint_claimed_at, None, "a refusal minted nothing");
    minter.behave(MintBehaviour::Mint);
    let resumed = operator::resume(&w.ingest_ctx, std::slice::from_ref(&jid), Utc::now())
        .await
        .unwrap();
    assert_eq!(resumed[0].outcome, Ok(JobState::Storing));
    w.run(|_| true).await;
    assert_eq!(w.job(&jid).await.state, JobState::Completed);
    assert_eq!(minter.minted_for(jid.as_str()).len(), 1);
}

#[tokio::test]
async fn a_lost_mint_answer_is_never_minted_again_until_an_operator_says_what_ezid_holds() {
    let (w, minter) = minting_world(false);
    minter.behave(MintBehaviour::LoseAnswer);
    let m = w
        .manifest("m1", &[("map.txt", "a map"), ("plan.txt", "a plan")], &[])
        .await;
    let id = w.submit(&m, "maps", None).await;
    w.run(|_| true).await;
    let (one, two) = (id.job(1), id.job(2));
    for jid in [&one, &two] {
        let job = w.job(jid).await;
        assert_eq!(job.state, JobState::Failed);
        assert!(job.reason.starts_with(MINT_UNKNOWN), "{}", job.reason);
        assert_eq!(minter.minted_for(jid.as_str()).len(), 1);
    }
    minter.behave(MintBehaviour::Mint);
    // A plain resume does not mint again: the claim still stands. While a pass that claimed
    // could still be running the job waits; a lease later it fails again.
    operator::resume(&w.ingest_ctx, std::slice::from_ref(&one), Utc::now())
        .await
        .unwrap();
    w.run(|_| true).await;
    assert_eq!(
        minter.minted_for(one.as_str()),
        minter.minted_for(one.as_str())[..1],
        "a resumed job whose mint's answer was lost never mints again"
    );
    assert_eq!(w.job(&one).await.state, JobState::Storing);
    assert!(
        w.job(&one).await.mint_claimed_at.is_some(),
        "its claim stands"
    );
    let lease = chrono::Duration::from_std(w.ingest_ctx.config.leases.claim_lease).unwrap();
    tick(&w.ingest_ctx, Utc::now() + lease).await.unwrap();
    let job = w.job(&one).await;
    assert_eq!(job.state, JobState::Failed);
    assert!(job.reason.starts_with(MINT_UNKNOWN), "{}", job.reason);
    assert_eq!(
        minter.minted_for(one.as_str()).len(),
        1,
        "never a second mint"
    );
    // The operator finds what EZID minted for job one and says so; job two gets a new one.
    let found = minter.minted_for(one.as_str()).remove(0);
    let r = operator::resume_with_mint(
        &w.ingest_ctx,
        &one,
        &MintFix::Identifier(found.clone()),
        Utc::now(),
    )
    .await
    .unwrap();
    assert_eq!(r.outcome, Ok(JobState::Storing));
    let r = operator::resume_with_mint(&w.ingest_ctx, &two, &MintFix::MintAgain, Utc::now())
        .await
        .unwrap();
    assert_eq!(r.outcome, Ok(JobState::Storing));
    w.run(|_| true).await;
    assert_eq!(w.job(&one).await.identifier, Some(found));
    assert_eq!(w.job(&one).await.state, JobState::Completed);
    assert_eq!(w.job(&two).await.state, JobState::Completed);
    assert_eq!(minter.minted_for(one.as_str()).len(), 1);
    assert_eq!(
        minter.minted_for(two.as_str()).len(),
        2,
        "the operator asked"
    );
    // A fix for a job with nothing to resolve is refused.
    let r = operator::resume_with_mint(&w.ingest_ctx, &one, &MintFix::MintAgain, Utc::now())
        .await
        .unwrap();
    assert!(r.outcome.is_err());
}

/// A store that misbehaves one way and otherwise passes every call on.
struct OddStore {
    inner: Arc<MemoryStore>,
    odd: Oddity,
}

enum Oddity {
    /// Keeps a copy's bytes other than the source's: what a storage endpoint that answers
    /// "stored" and stored something else looks like.
    CopiesBadly,
    /// The first mint claim's conditional PUT lands and is answered 412: what the SDK's retry
    /// of a PUT whose first answer was lost meets.
    ClaimLandsThenConflict(std::sync::atomic::AtomicBool),
}

impl OddStore {
    fn copies_badly(inner: Arc<MemoryStore>) -> Self {
        Self {
            inner,
            odd: Oddity::CopiesBadly,
        }
    }
}

#[async_trait::async_trait]
impl ObjectStore for OddStore {
    async fn get(
        &self,
        key: &str,
    ) -> Result<Option<crate::ports::StoredObject>, crate::ports::StoreError> {
        self.inner.get(key).await
    }
    async fn get_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, crate::ports::StoreError> {
        self.inner.get_range(key, range).await
    }
    async fn get_suffix(
        &self,
        key: &str,
        len: u64,
    ) -> Result<(Bytes, u64), crate::ports::StoreError> {
        self.inner.get_suffix(key, len).await
    }
    async fn put(
        &self,
        key: &str,
        body: Bytes,
        condition: PutCondition,
    ) -> Result<String, crate::ports::StoreError> {
        let claims_a_mint = matches!(condition, PutCondition::IfMatch(_))
            && std::str::from_utf8(&body).is_ok_and(|b| b.contains("\"mint_claim_token\":\""));
        if let Oddity::ClaimLandsThenConflict(armed) = &self.odd {
            if claims_a_mint && armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
                self.inner.put(key, body, condition).await?;
                return Err(crate::ports::StoreError::Conflict { key: key.into() });
            }
        }
        self.inner.put(key, body, condition).await
    }
    async fn list(
        &self,
        prefix: &str,
    ) -> Result<Vec<crate::ports::ObjectMeta>, crate::ports::StoreError> {
        self.inner.list(prefix).await
    }
    async fn copy(&self, from: &str, to: &str) -> Result<(), crate::ports::StoreError> {
        if !matches!(self.odd, Oddity::CopiesBadly) {
            return self.inner.copy(from, to).await;
        }
        let body = self
            .inner
            .get(from)
            .await?
            .map(|o| o.body)
            .unwrap_or_default();
        let mut bad = body.to_vec();
        if let Some(b) = bad.first_mut() {
            *b ^= 0x20;
        }
        self.inner
            .put(to, Bytes::from(bad), PutCondition::Overwrite)
            .await?;
        Ok(())
    }
    async fn delete(&self, key: &str) -> Result<(), crate::ports::StoreError> {
        self.inner.delete(key).await
    }
    async fn begin_upload<'a>(
        &'a self,
        key: &str,
    ) -> Result<Box<dyn crate::ports::Upload + 'a>, crate::ports::StoreError> {
        self.inner.begin_upload(key).await
    }
}

#[tokio::test]
async fn a_store_that_answers_with_other_bytes_fails_the_job_before_its_manifest() {
    let (mut w, minter) = minting_world(false);
    w.ingest_ctx.store = Arc::new(OddStore::copies_badly(w.store.clone()));
    let m = w.manifest("m1", &[("map.txt", "a map")], &[]).await;
    let id = w.submit(&m, "maps", None).await;
    w.run(|_| true).await;
    let job = w.job(&id.job(1)).await;
    assert_eq!(job.state, JobState::Failed);
    assert!(
        job.reason.starts_with("storage:") && job.reason.contains("reads back"),
        "{}",
        job.reason
    );
    assert_eq!(job.storage_manifest, None);
    assert!(
        w.store
            .list("ingest/storage/")
            .await
            .unwrap()
            .iter()
            .all(|o| !o.key.ends_with("mrt-manifest.checkm")),
        "no manifest for an object not stored as it should be"
    );
    // The identifier was written before storing, and stays: a resume does not mint again.
    assert!(job.identifier.is_some());
    w.ingest_ctx.store = w.store.clone();
    operator::resume(&w.ingest_ctx, &[id.job(1)], Utc::now())
        .await
        .unwrap();
    w.run(|_| true).await;
    assert_eq!(w.job(&id.job(1)).await.state, JobState::Completed);
    assert_eq!(minter.minted().len(), 1);
}

#[tokio::test]
async fn a_mint_claim_that_landed_and_was_answered_412_is_the_passs_own_and_mints() {
    let (mut w, minter) = minting_world(false);
    w.ingest_ctx.store = Arc::new(OddStore {
        inner: w.store.clone(),
        odd: Oddity::ClaimLandsThenConflict(std::sync::atomic::AtomicBool::new(true)),
    });
    let m = w.manifest("m1", &[("map.txt", "a map")], &[]).await;
    let id = w.submit(&m, "maps", None).await;
    w.run(|_| true).await;
    let job = w.job(&id.job(1)).await;
    // Completed, then cleaned up with its batch; not waiting for a lease to fail it "minting
    // outcome unknown".
    assert!(
        matches!(job.state, JobState::Completed | JobState::Deleted),
        "{}: {}",
        job.state,
        job.reason
    );
    assert_eq!(
        minter.minted_for(id.job(1).as_str()).len(),
        1,
        "minted once"
    );
    assert!(job.identifier.is_some());
}

/// A minter that, while its first mint is under way, lets a second dispatcher pass run the
/// storing step over the same bucket: two passes at once (the scheduled one and an operator's
/// `granary ingest tick`).
struct TickDuringMint {
    inner: Arc<MemoryMinter>,
    second: std::sync::Mutex<Option<(Ctx, JobId)>>,
}

#[async_trait::async_trait]
impl crate::ports::Minter for TickDuringMint {
    async fn mint(
        &self,
        shoulder: &str,
        metadata: &str,
    ) -> Result<String, crate::ports::MintError> {
        let second = self.second.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((ctx, id)) = second {
            let job = ctx.ingest().job(&id).await.unwrap().unwrap().value;
            let mut s = TickSummary::default();
            crate::handlers::ingest::storing::store(&ctx, job, Utc::now(), &mut s)
                .await
                .unwrap();
            assert_eq!(s, TickSummary::default(), "the second pass waits");
        }
        self.inner.mint(shoulder, metadata).await
    }
}

#[tokio::test]
async fn a_second_pass_during_a_mint_neither_mints_again_nor_fails_the_job() {
    let (mut w, minter) = minting_world(false);
    let second = Ctx {
        minter: Some(minter.clone()),
        ..w.ingest_ctx.clone()
    };
    let m = w.manifest("m1", &[("map.txt", "a map")], &[]).await;
    let id = w.submit(&m, "maps", None).await;
    w.ingest_ctx.minter = Some(Arc::new(TickDuringMint {
        inner: minter.clone(),
        second: std::sync::Mutex::new(Some((second, id.job(1)))),
    }));
    w.run(|_| true).await;
    let job = w.job(&id.job(1)).await;
    assert_eq!(job.state, JobState::Deleted, "{}", job.reason);
    assert_eq!(minter.minted().len(), 1, "one mint for two passes");
    assert_eq!(job.identifier, Some(minter.minted()[0].0.clone()));
}

#[tokio::test]
async fn two_objects_of_one_local_id_share_one_minted_identifier_in_their_own_folders() {
    let (w, minter) = minting_world(false);
    // Two manifest lines naming the same local id in two batches, run together.
    let a = w
        .manifest("a", &[("sheet.txt", "first deposit")], &[])
        .await;
    let first = w.submit(&a, "maps", None).await;
    let b = w
        .manifest("b", &[("sheet.txt", "first deposit")], &[])
        .await;
    let second = w.submit(&b, "maps", None).await;
    w.run(|_| true).await;
    let (one, two) = (w.job(&first.job(1)).await, w.job(&second.job(1)).await);
    assert_eq!(minter.minted().len(), 1, "one mint per local id");
    assert_eq!(one.identifier, two.identifier);
    assert!(one.identifier.is_some());
    assert_ne!(
        one.storage_manifest, two.storage_manifest,
        "each deposit its own folder"
    );
    for j in [&one, &two] {
        let m =
            parse_storage_manifest(&text(&w, j.storage_manifest.as_ref().unwrap()).await).unwrap();
        assert_eq!(m.job, j.id.as_str());
    }
}

#[tokio::test]
async fn a_reservation_whose_job_failed_is_taken_over_by_the_next_deposit() {
    let (w, minter) = minting_world(false);
    minter.behave(MintBehaviour::Refuse("bad request - try later".into()));
    let a = w.manifest("a", &[("sheet.txt", "s")], &[]).await;
    let first = w.submit(&a, "maps", None).await;
    w.run(|_| true).await;
    assert_eq!(w.job(&first.job(1)).await.state, JobState::Failed);
    // The local id is reserved by the failed job; the next deposit takes it over and mints.
    minter.behave(MintBehaviour::Mint);
    let b = w.manifest("b", &[("sheet.txt", "s")], &[]).await;
    let second = w.submit(&b, "maps", None).await;
    w.run(|_| true).await;
    let two = w.job(&second.job(1)).await;
    assert_eq!(two.state, JobState::Deleted, "{}", two.reason);
    assert_eq!(minter.minted_for(second.job(1).as_str()).len(), 1);
    // Resumed, the first finds the local id bound and uses it: no second mint.
    operator::resume(&w.ingest_ctx, &[first.job(1)], Utc::now())
        .await
        .unwrap();
    w.run(|_| true).await;
    let one = w.job(&first.job(1)).await;
    assert_eq!(one.identifier, two.identifier);
    assert_eq!(minter.minted().len(), 1);
}
