//! Time passing for a quiet platform, as far as leases go: the crash harnesses do not move the
//! clock, so a lease a dead invocation left (a claim without its job id, a failure logged and not
//! routed) is made as old as the lease it holds, as that much time would make it.

use granary::ports::{ObjectStore, PutCondition};

/// Every JSON object under `prefix` whose `waiting(object, key)` is true and whose time `field`
/// is younger than `lease` gets `field` set to just past the lease. Whether any did.
pub async fn age_leases(
    store: &dyn ObjectStore,
    prefix: &str,
    field: &str,
    lease: std::time::Duration,
    waiting: impl Fn(&serde_json::Value, &str) -> bool,
) -> bool {
    let old = chrono::Utc::now()
        - chrono::Duration::from_std(lease).expect("a lease fits a chrono duration")
        - chrono::Duration::seconds(1);
    let mut aged = false;
    for meta in store.list(prefix).await.expect("the twin lists") {
        let Some(object) = store.get(&meta.key).await.expect("the twin reads") else {
            continue;
        };
        let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(&object.body) else {
            continue;
        };
        let young = v[field]
            .as_str()
            .and_then(|t| t.parse::<chrono::DateTime<chrono::Utc>>().ok())
            .is_some_and(|t| t > old);
        if young && waiting(&v, &meta.key) {
            v[field] = serde_json::Value::String(old.to_rfc3339());
            let body = serde_json::to_vec(&v).expect("JSON serialises");
            store
                .put(
                    &meta.key,
                    body.into(),
                    PutCondition::IfMatch(object.etag.clone()),
                )
                .await
                .expect("nothing else writes while the platform is quiet");
            aged = true;
        }
    }
    aged
}
