//! The override flag: whether any per-key override can exist under a store's prefix, so
//! the decision script can skip reading them (half the keys of its `MGET`) while none does.
//!
//! Standalone only, one key: `<prefix>!overrides` (outside `<prefix>:*`, where every key but
//! an override expires once idle; the flag has no TTL).
//! - `"1"`: an override may exist. Written before every override is set (`mark`), never
//!   cleared (removing an override does not know whether others remain).
//! - `"0"`: none exists. Written only by [`index`], after a `SCAN` of the prefix found no
//!   override key, and only if the key is still absent (`SET NX`): a store that marked it
//!   meanwhile wins.
//! - absent (a store of an earlier version wrote the overrides, or the database was
//!   flushed): the script reads the overrides, as it always did.
//!
//! A Redis Cluster has no flag (a script may only touch its call's hash slot): its
//! scripts read the overrides always.

use sluicegate_core::StoreError;

use crate::link::Link;

/// The flag's key.
pub(crate) fn flag_key(prefix: &str) -> String {
    format!("{prefix}!overrides")
}

/// Keys a `SCAN` visits per round trip: short calls that do not hold Redis up.
const SCAN_COUNT: usize = 500;

/// Sets the flag to "1": from now on every decision reads the overrides. Called before an
/// override is written, so no decision after the write can miss it.
pub(crate) async fn mark(link: &Link, flag: &str) -> Result<(), StoreError> {
    let cmd = redis::cmd("SET").arg(flag).arg("1").to_owned();
    link.run(move |mut conn| async move { cmd.query_async::<redis::Value>(&mut conn).await })
        .await
        .map(|_| ())
}

/// Settles an absent flag: "1" if an override key exists under `prefix` (one written by an
/// earlier version), else "0" unless it was marked meanwhile. A flag already present is
/// left as it is. Overrides set through a store of an earlier version after this ran are
/// not seen (docs/redis.md: upgrade every instance before setting overrides).
pub(crate) async fn index(link: &Link, prefix: &str, flag: &str) -> Result<(), StoreError> {
    let get = redis::cmd("GET").arg(flag).to_owned();
    let current: Option<String> = link
        .run(move |mut conn| async move { get.query_async(&mut conn).await })
        .await?;
    if current.is_some() {
        return Ok(());
    }
    // Every override key, placed or not: `<prefix>:{…}…:<policy>:override` (keys.rs). A key
    // of another store whose prefix starts with this one may match too: it only costs the
    // skip.
    let pattern = format!("{prefix}:{{*:override");
    let mut cursor: u64 = 0;
    loop {
        let scan = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .to_owned();
        let (next, found): (u64, Vec<String>) = link
            .run(move |mut conn| async move { scan.query_async(&mut conn).await })
            .await?;
        if !found.is_empty() {
            return mark(link, flag).await;
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let none = redis::cmd("SET").arg(flag).arg("0").arg("NX").to_owned();
    link.run(move |mut conn| async move { none.query_async::<redis::Value>(&mut conn).await })
        .await
        .map(|_| ())
}
