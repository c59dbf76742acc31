use super::*;
use crate::domain::ingest::index::BatchId;
use crate::domain::ingest::manifest::{single_file, ManifestKind};
use crate::domain::ingest::record::{BatchRecord, Submission};

const LEASE: std::time::Duration = std::time::Duration::from_secs(960);

fn job(local: Option<&str>, supplied: Option<&str>) -> JobRecord {
    let submission = Submission {
        collection: "maps".into(),
        manifest_url: "m".into(),
        kind: ManifestKind::Files,
        priority: 5,
        callback: None,
        profile: None,
        submitter: "s".into(),
        deposit: Deposit {
            erc_who: Some("Ada <Lovelace> & co".into()),
            erc_what: Some("Notes: on the engine".into()),
            erc_when: Some("1843".into()),
            ..Deposit::default()
        },
    };
    let b = BatchRecord::new(BatchId::parse("b1").unwrap(), submission, Utc::now());
    let mut object = single_file("http://h/a.dat", local.map(str::to_owned));
    object.primary_id = supplied.map(str::to_owned);
    let mut j = JobRecord::new(b.id.job(1), &b, object, Utc::now());
    j.mints_identifier = true;
    j
}

#[test]
fn anvl_escapes_what_ezid_says_and_reads_back() {
    let body = anvl(&[("erc.what", "100% a: b\nc"), ("a:b", "x")]);
    assert_eq!(body, "erc.what: 100%25 a: b%0Ac\na%3Ab: x\n");
    assert_eq!(
        parse_anvl(&body),
        vec![
            ("erc.what".to_owned(), "100% a: b\nc".to_owned()),
            ("a:b".to_owned(), "x".to_owned())
        ]
    );
    // A `%` not followed by two hex digits stays as it is.
    assert_eq!(parse_anvl("n: 5%\n"), vec![("n".into(), "5%".into())]);
}

#[test]
fn mint_answers_read_as_ezid_writes_them() {
    assert_eq!(
        mint_answer("success: ark:/99999/fk4abc\n"),
        Ok("ark:/99999/fk4abc".into())
    );
    assert_eq!(
        mint_answer("success: doi:10.5072/FK2X | ark:/b5072/fk2x\n"),
        Ok("doi:10.5072/FK2X".into())
    );
    assert_eq!(
        mint_answer("error: bad request - no such shoulder\n"),
        Err(MintAnswerError::Refused(
            "bad request - no such shoulder".into()
        ))
    );
    assert!(mint_answer("<html>502</html>").is_err());
    assert!(mint_answer("success:   \n").is_err());
}

#[test]
fn the_identifier_rule_keeps_looks_up_takes_or_mints_and_never_mints_twice() {
    let plain = job(Some("loc1"), None);
    assert_eq!(
        identifier_step(&plain, None, true, Utc::now(), LEASE),
        IdentifierStep::Mint
    );
    // To be minted, in a pass without the service: it waits, never stored unidentified.
    assert!(matches!(
        identifier_step(&plain, None, false, Utc::now(), LEASE),
        IdentifierStep::Wait(why) if why.contains("GRANARY_INGEST_EZID_URL")
    ));
    let mut unminted = plain.clone();
    unminted.mints_identifier = false;
    assert_eq!(
        identifier_step(&unminted, None, true, Utc::now(), LEASE),
        IdentifierStep::Unidentified
    );
    // The local id is already known: its identifier, no mint.
    assert!(matches!(
        identifier_step(&plain, Some("ark:/1/k"), true, Utc::now(), LEASE),
        IdentifierStep::Use { identifier, .. } if identifier == "ark:/1/k"
    ));
    // The depositor's own.
    let supplied = job(Some("loc1"), Some("ark:/1/s"));
    assert!(matches!(
        identifier_step(&supplied, None, true, Utc::now(), LEASE),
        IdentifierStep::Use { identifier, .. } if identifier == "ark:/1/s"
    ));
    // The local id is known by another identifier than the depositor supplied: fail.
    let IdentifierStep::Fail(why) =
        identifier_step(&supplied, Some("ark:/1/k"), true, Utc::now(), LEASE)
    else {
        panic!("a mismatch must fail");
    };
    assert!(
        why.contains("ark:/1/k") && why.contains("ark:/1/s"),
        "{why}"
    );
    // The record's own identifier wins over minting, even with a claim left behind.
    let mut kept = plain.clone();
    kept.identifier = Some("ark:/1/m".into());
    kept.mint_claimed_at = Some(Utc::now());
    assert!(matches!(
        identifier_step(&kept, None, true, Utc::now(), LEASE),
        IdentifierStep::Use { identifier, .. } if identifier == "ark:/1/m"
    ));
    // A claim without an answer: never a second mint — waited for while its pass may still be
    // running, then failed for an operator.
    let mut claimed = plain.clone();
    let at = Utc::now();
    claimed.mint_claimed_at = Some(at);
    assert!(matches!(
        identifier_step(
            &claimed,
            None,
            true,
            at + chrono::Duration::seconds(60),
            LEASE
        ),
        IdentifierStep::InFlight(_)
    ));
    let later = at + chrono::Duration::from_std(LEASE).unwrap();
    let IdentifierStep::Fail(why) = identifier_step(&claimed, None, true, later, LEASE) else {
        panic!("an unanswered claim must not mint again");
    };
    assert!(why.starts_with(MINT_UNKNOWN), "{why}");
}

#[test]
fn the_mint_names_the_job_and_carries_the_erc() {
    let j = job(None, None);
    let pairs = parse_anvl(&mint_metadata(&j));
    let get = |n: &str| pairs.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    assert_eq!(get("granary.job"), Some(j.id.as_str()));
    assert_eq!(get("erc.what"), Some("Notes: on the engine"));
    assert_eq!(get("_profile"), Some("erc"));
}

#[test]
fn erc_and_dublin_core_say_who_what_when_where() {
    let j = job(None, None);
    let erc = erc_file(&j.deposit, Some("ark:/1/x"));
    assert!(erc.starts_with("erc:\nwho: Ada <Lovelace> & co\n"), "{erc}");
    assert!(erc.contains("where: ark:/1/x\n"), "{erc}");
    let unknown = erc_file(&Deposit::default(), None);
    assert!(unknown.contains("who: (:unav)"), "{unknown}");
    let dc = dublin_core_file(&j.deposit, Some("ark:/1/x"));
    assert!(
        dc.contains("<dc:creator>Ada &lt;Lovelace&gt; &amp; co</dc:creator>"),
        "{dc}"
    );
    assert!(
        dc.contains("<dc:identifier>ark:/1/x</dc:identifier>"),
        "{dc}"
    );
}

#[test]
fn the_storage_manifest_reads_back_and_a_cut_one_does_not() {
    let files = vec![
        ManifestEntry {
            key: "s/o/producer/ a | b%\n.dat".into(),
            sha256: "ab".repeat(32),
            size: 7,
            name: "producer/ a | b%\n.dat".into(),
        },
        ManifestEntry {
            key: "s/o/system/mrt-erc.txt".into(),
            sha256: "cd".repeat(32),
            size: 30,
            name: ERC_FILE.into(),
        },
    ];
    let text = storage_manifest("ark:/1/x", "b1-j00001", &files, Utc::now());
    assert!(text.starts_with("#%checkm_0.7\n"), "{text}");
    // A name with the column separator, a newline, spaces and a percent sign reads back whole.
    assert_eq!(
        parse_storage_manifest(&text),
        Ok(StorageManifest {
            object: "ark:/1/x".to_owned(),
            job: "b1-j00001".to_owned(),
            files
        })
    );
    let cut = text.replace("#%eof\n", "");
    assert!(parse_storage_manifest(&cut)
        .unwrap_err()
        .to_string()
        .contains("eof"));
    // Each deposit its own folder; two identifiers never one; an unidentified object apart.
    assert_eq!(
        storage_name(Some("ark:/99999/fk4x"), "b1-j00001"),
        "id=ark%3A%2F99999%2Ffk4x/b1-j00001"
    );
    assert_ne!(
        storage_name(Some("ark:/1/a"), "j"),
        storage_name(Some("ark+=1=a"), "j")
    );
    assert_eq!(storage_name(None, "b1-j00001"), "job=b1-j00001/b1-j00001");
    assert_ne!(storage_name(None, "x"), storage_name(Some("x"), "x"));
}

#[test]
fn one_job_mints_per_local_id_and_a_dead_holder_is_taken_over() {
    let me = "b1-j00002";
    assert_eq!(binding_step(None, me, Holder::Busy), BindingStep::Reserve);
    let reserved = |job: &str| LocalIdBinding {
        identifier: None,
        job: job.into(),
    };
    assert_eq!(
        binding_step(Some(&reserved(me)), me, Holder::Busy),
        BindingStep::Mint
    );
    let other = reserved("b1-j00001");
    assert!(matches!(
        binding_step(Some(&other), me, Holder::Busy),
        BindingStep::Wait(why) if why.contains("b1-j00001")
    ));
    assert_eq!(
        binding_step(Some(&other), me, Holder::Identified("ark:/1/k".into())),
        BindingStep::Use("ark:/1/k".into())
    );
    assert_eq!(
        binding_step(Some(&other), me, Holder::Gone),
        BindingStep::TakeOver
    );
    let bound = LocalIdBinding {
        identifier: Some("ark:/1/b".into()),
        job: "b0-j00009".into(),
    };
    assert_eq!(
        binding_step(Some(&bound), me, Holder::Gone),
        BindingStep::Use("ark:/1/b".into())
    );
}

#[test]
fn a_binding_is_completed_once_and_never_rebound_to_another_identifier() {
    let reserved = LocalIdBinding {
        identifier: None,
        job: "b1-j00001".into(),
    };
    let done = rebind(&reserved, "sheet", "ark:/1/a", "b1-j00002")
        .unwrap()
        .unwrap();
    assert_eq!(
        (done.identifier.as_deref(), done.job.as_str()),
        (Some("ark:/1/a"), "b1-j00002")
    );
    assert_eq!(rebind(&done, "sheet", "ark:/1/a", "b1-j00003"), Ok(None));
    let why = rebind(&done, "sheet", "ark:/1/b", "b1-j00003")
        .unwrap_err()
        .to_string();
    assert!(
        why.contains("ark:/1/a") && why.contains("ark:/1/b"),
        "{why}"
    );
}
