use super::*;

fn rules(templates: &[&str]) -> Rules {
    Rules {
        budget: AttemptBudget {
            retries: 2,
            spot_retries: None,
        },
        memory: MemoryLimits::parse("2048:4096").unwrap(),
        products: templates
            .iter()
            .map(|t| ProductTemplate::parse(t).unwrap())
            .collect(),
    }
}

fn log(attempt: u32, success_side: bool, route: Route, reason: &str) -> Seen {
    Seen::Log(LogSeen {
        attempt,
        success_side,
        superseded: false,
        revoked: false,
        route,
        ends: Ends {
            attempt,
            spot_ends: 0,
        },
        reason: reason.to_owned(),
        out_of_memory: false,
        memory_mib: None,
    })
}

fn fed() -> Seen {
    Seen::Row { fed: true }
}

fn product(key: &str, bytes: u64) -> Seen {
    Seen::Product {
        template: 0,
        key: key.to_owned(),
        bytes,
    }
}

fn lists(j: &Judged) -> Vec<(AuditList, String)> {
    j.findings
        .iter()
        .map(|f| (f.list, f.detail.clone()))
        .collect()
}

#[test]
fn a_fed_granule_with_no_end_and_nothing_in_flight_is_missing_and_in_flight_is_not() {
    let r = rules(&[]);
    let j = judge("G", &[fed()], &r);
    assert_eq!(j.standing, Standing::Missing);
    assert_eq!(lists(&j)[0].0, AuditList::Missing);
    assert_eq!(j.findings[0].attempt, 1);
    let j = judge("G", &[fed(), Seen::InFlight { attempt: 1 }], &r);
    assert_eq!((j.standing, j.findings.len()), (Standing::InFlight, 0));
    assert_eq!(
        judge("G", &[Seen::Row { fed: false }], &r).standing,
        Standing::NotFed
    );
}

#[test]
fn a_retried_end_is_missing_unless_held_and_dead_lettered_once_its_budget_is_spent() {
    let r = rules(&[]);
    let retried = log(1, false, Route::RetryQueue, "spot");
    let j = judge("G", &[fed(), retried.clone()], &r);
    assert_eq!(j.standing, Standing::Missing);
    assert_eq!(j.findings[0].attempt, 1);
    // Held by an open claim of the next attempt: it moves by itself.
    let held = judge("G", &[fed(), retried, Seen::InFlight { attempt: 2 }], &r);
    assert_eq!(held.standing, Standing::InFlight);
    // The claim of an attempt already logged holds nothing.
    let ended = log(3, false, Route::RetryQueue, "timeout");
    let j = judge("G", &[fed(), ended, Seen::InFlight { attempt: 3 }], &r);
    assert_eq!(j.standing, Standing::DeadLettered);
    assert_eq!(j.dead_letter_reason.as_deref(), Some(EXHAUSTED));
    assert_eq!(
        lists(&j),
        [(
            AuditList::DeadLetter,
            "attempts exhausted (the last end: timeout)".into()
        )]
    );
    let dlq = judge(
        "G",
        &[fed(), log(1, false, Route::FailureDlq, "exit 1")],
        &r,
    );
    assert_eq!(dlq.dead_letter_reason.as_deref(), Some("exit 1"));
}

#[test]
fn successes_stand_unless_superseded_or_revoked_and_two_are_doubled() {
    let r = rules(&[]);
    let ok = judge(
        "G",
        &[
            fed(),
            log(1, false, Route::RetryQueue, "spot"),
            log(2, true, Route::Done, ""),
        ],
        &r,
    );
    assert_eq!((ok.standing, ok.findings.len()), (Standing::Succeeded, 0));
    let two = judge(
        "G",
        &[
            fed(),
            log(1, true, Route::Done, ""),
            log(2, true, Route::Done, ""),
        ],
        &r,
    );
    assert_eq!(
        lists(&two),
        [(AuditList::Doubled, "successes at attempts 1, 2".into())]
    );
    let Seen::Log(mut superseded) = log(1, true, Route::RetryQueue, "spot") else {
        unreachable!()
    };
    superseded.superseded = true;
    let j = judge(
        "G",
        &[fed(), Seen::Log(superseded), log(2, true, Route::Done, "")],
        &r,
    );
    assert_eq!((j.standing, j.findings.len()), (Standing::Succeeded, 0));
    let Seen::Log(mut revoked) = log(1, true, Route::Done, "") else {
        unreachable!()
    };
    revoked.revoked = true;
    revoked.reason = "product absent".into();
    let j = judge("G", &[fed(), Seen::Log(revoked)], &r);
    assert_eq!(j.standing, Standing::Missing);
}

#[test]
fn products_are_absent_empty_doubled_or_orphaned() {
    let r = rules(&["products/{id}.tif"]);
    let ok = [fed(), log(1, true, Route::Done, "")];
    let absent = judge("G", &ok, &r);
    assert_eq!(
        lists(&absent),
        [(AuditList::ProductMissing, "absent: products/G.tif".into())]
    );
    let mut empty = ok.to_vec();
    empty.push(product("products/G.tif", 0));
    assert_eq!(
        lists(&judge("G", &empty, &r)),
        [(AuditList::ProductMissing, "empty: products/G.tif".into())]
    );
    let mut fine = ok.to_vec();
    fine.push(product("products/G.tif", 9));
    assert!(judge("G", &fine, &r).findings.is_empty());
    let doubled = judge(
        "G",
        &[
            fed(),
            product("products/G.tif", 9),
            product("products/G.tif", 9),
            product("products/G.tiff.tif", 1),
        ],
        &r,
    );
    assert_eq!(
        lists(&doubled),
        [
            (
                AuditList::Missing,
                "fed; no end logged and nothing in flight".into()
            ),
            (
                AuditList::Doubled,
                "products products/G.tif, products/G.tiff.tif".into()
            )
        ]
    );
    let orphan = judge("X", &[product("products/X.tif", 3)], &r);
    assert_eq!(orphan.standing, Standing::NotInventoried);
    assert_eq!(
        lists(&orphan),
        [(AuditList::OrphanProduct, "products/X.tif".into())]
    );
    // An imported item's: logged, in no inventory, its product explained.
    let imported = judge(
        "I",
        &[product("products/I.tif", 3), log(1, true, Route::Done, "")],
        &r,
    );
    assert_eq!(
        (imported.standing, imported.findings.len()),
        (Standing::NotInventoried, 0)
    );
}

#[test]
fn a_cancelled_attempt_is_the_cancels_not_missing() {
    let j = judge(
        "G",
        &[fed(), log(1, false, Route::Cancelled, "cancelled")],
        &rules(&[]),
    );
    assert_eq!((j.standing, j.findings.len()), (Standing::Cancelled, 0));
}

#[test]
fn fact_lines_round_trip_and_sort_one_granule_together() {
    let facts = [
        FactLine::new("A", fed()),
        FactLine::new(
            "A",
            log(2, true, Route::RetryQueue, "tab\there\nand \\ newline"),
        ),
        FactLine::new("A.b", product("k\tey", 7)),
        FactLine::new("A", Seen::InFlight { attempt: 3 }),
    ];
    let mut lines: Vec<String> = facts.iter().map(FactLine::encode).collect();
    for (f, l) in facts.iter().zip(&lines) {
        assert!(!l.contains('\n'));
        assert_eq!(&FactLine::decode(l).unwrap(), f);
    }
    lines.sort();
    let ids: Vec<String> = lines
        .iter()
        .map(|l| FactLine::decode(l).unwrap().granule_id)
        .collect();
    assert_eq!(ids, ["A", "A", "A", "A.b"]);
    assert!(FactLine::decode("A\tQ\t1").is_err());
    assert!(FactLine::decode("A\tL\tx").is_err());
}

#[test]
fn an_out_of_memory_end_at_the_cap_is_dead_lettered_below_it_missing() {
    let oom = |mib| {
        let Seen::Log(mut l) = log(1, false, Route::RetryQueue, "out of memory") else {
            unreachable!()
        };
        l.out_of_memory = true;
        l.memory_mib = Some(mib);
        Seen::Log(l)
    };
    let r = rules(&[]);
    let at_cap = judge("G", &[fed(), oom(4096)], &r);
    assert_eq!(at_cap.standing, Standing::DeadLettered);
    assert_eq!(
        at_cap.dead_letter_reason.as_deref(),
        Some("out of memory at 4096 MiB, the cap (GRANARY_JOB_MEMORY_MIB 2048:4096)")
    );
    assert_eq!(
        judge("G", &[fed(), oom(2048)], &r).standing,
        Standing::Missing
    );
    let line = FactLine::new("G", oom(4096));
    assert_eq!(FactLine::decode(&line.encode()).unwrap(), line);
}

#[test]
fn a_retry_a_cancels_hold_took_back_is_the_cancels() {
    let r = rules(&[]);
    let held_back = [
        fed(),
        log(1, false, Route::RetryQueue, "spot"),
        Seen::CancelListed { attempt: 1 },
    ];
    assert_eq!(judge("G", &held_back, &r).standing, Standing::Cancelled);
    // Listed at an earlier attempt than its latest end: that end decides.
    let moved_on = [
        fed(),
        log(2, false, Route::FailureDlq, "exit 1"),
        Seen::CancelListed { attempt: 1 },
    ];
    assert_eq!(judge("G", &moved_on, &r).standing, Standing::DeadLettered);
    let line = FactLine::new("G", Seen::CancelListed { attempt: 4 });
    assert_eq!(FactLine::decode(&line.encode()).unwrap(), line);
}
