//! Follows the set of objects one watch matches. `kube`'s watcher lists, then watches
//! from the list's resource version with bookmarks, and lists again when the API
//! server answers 410 Gone; this module turns its events into the current set and
//! reports the whole set after every change.

use std::collections::BTreeMap;
use std::fmt::Debug;

use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// Calls `on_change` with every object the watch matches, by name, each time the set
/// changes. Errors (a dropped connection, 410 Gone) are logged and retried with
/// backoff; the last known set stays in force meanwhile. Returns when `on_change`
/// returns `false`.
pub async fn follow<K>(
    api: Api<K>,
    config: watcher::Config,
    what: &str,
    mut on_change: impl FnMut(&BTreeMap<String, K>) -> bool,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut current: BTreeMap<String, K> = BTreeMap::new();
    let mut relisting: Option<BTreeMap<String, K>> = None;
    let mut failing = false;
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        let changed = match event {
            Ok(Event::Init) => {
                relisting = Some(BTreeMap::new());
                false
            }
            Ok(Event::InitApply(object)) => {
                if let Some(list) = relisting.as_mut() {
                    list.insert(object.name_any(), object);
                }
                false
            }
            Ok(Event::InitDone) => {
                if failing {
                    tracing::info!(watch = what, objects = current.len(), "watch recovered");
                    failing = false;
                }
                current = relisting.take().unwrap_or_default();
                true
            }
            Ok(Event::Apply(object)) => {
                current.insert(object.name_any(), object);
                true
            }
            Ok(Event::Delete(object)) => current.remove(&object.name_any()).is_some(),
            Err(e) => {
                if !failing {
                    tracing::warn!(watch = what, error = %e, "watch failed; listing again with backoff, keeping the last known state");
                    failing = true;
                }
                false
            }
        };
        if changed && !on_change(&current) {
            return;
        }
    }
}
