//! The model repository: Triton's directory layout, version policy, control modes, load/unload.

use crate::backend::{Backend, InstanceDevice, ServeBackends};
use crate::config::{autocomplete, parse_pbtxt, validate};
use crate::model::{batch_policy, LoadedModel};
use crate::proto::inference::{
    model_instance_group::Kind, model_version_policy::PolicyChoice, ModelConfig,
};
use crate::scheduler::Scheduler;
use crate::stats::ModelStats;
use crate::types::ServeError;
use parking_lot::RwLock;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One row of the repository index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub name: String,
    pub version: String,
    pub state: String,
    pub reason: String,
}

/// What the repository holds for one model name.
#[derive(Default)]
struct ModelEntry {
    ready: BTreeMap<i64, Arc<LoadedModel>>,
    failed: BTreeMap<i64, String>,
    /// A failure before any version could be tried (bad config, no backend, no versions).
    error: Option<String>,
    /// Unloaded on request: still known (UNAVAILABLE, "unloaded") but not a readiness failure.
    unloaded: bool,
    fingerprint: u64,
}

/// Owns every loaded model; shared by the HTTP and gRPC front ends.
pub struct ModelManager {
    root: PathBuf,
    backends: ServeBackends,
    models: RwLock<BTreeMap<String, ModelEntry>>,
    /// Loads and unloads run one at a time so a model is never half-replaced.
    load_lock: tokio::sync::Mutex<()>,
}

impl ModelManager {
    pub fn new(root: PathBuf, backends: ServeBackends) -> Self {
        Self { root, backends, models: RwLock::new(BTreeMap::new()), load_lock: Default::default() }
    }

    /// Model directory names currently in the repository.
    pub fn repository_models(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(&self.root) else { return Vec::new() };
        let mut names: Vec<String> = rd
            .flatten()
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !n.starts_with('.'))
            .collect();
        names.sort();
        names
    }

    /// The ready model version a request names ("" = the highest ready version).
    pub fn get(&self, name: &str, version: &str) -> Result<Arc<LoadedModel>, ServeError> {
        let models = self.models.read();
        let unknown =
            || ServeError::not_found(format!("Request for unknown model: '{name}' is not found"));
        let entry = models.get(name).ok_or_else(unknown)?;
        if version.is_empty() {
            if let Some((_, m)) = entry.ready.iter().next_back() {
                return Ok(m.clone());
            }
            let reason = entry
                .error
                .clone()
                .or_else(|| entry.failed.values().next_back().cloned())
                .unwrap_or_else(|| "unloaded".to_string());
            return Err(ServeError::unavailable(format!(
                "Request for unknown model: '{name}' has no available versions: {reason}"
            )));
        }
        let v: i64 = version.parse().map_err(|_| {
            ServeError::invalid(format!("invalid version '{version}' for model '{name}'"))
        })?;
        if let Some(m) = entry.ready.get(&v) {
            return Ok(m.clone());
        }
        if let Some(reason) = entry.failed.get(&v) {
            return Err(ServeError::unavailable(format!(
                "Request for unknown model: '{name}' version {v} is not at ready state: {reason}"
            )));
        }
        Err(ServeError::not_found(format!(
            "Request for unknown model: '{name}' version {v} is not found"
        )))
    }

    /// Ready versions of a model, ascending.
    pub fn versions(&self, name: &str) -> Vec<String> {
        self.models
            .read()
            .get(name)
            .map(|e| e.ready.keys().map(|v| v.to_string()).collect())
            .unwrap_or_default()
    }

    /// Every ready model version (for statistics and metrics).
    pub fn all_ready(&self) -> Vec<Arc<LoadedModel>> {
        self.models.read().values().flat_map(|e| e.ready.values().cloned()).collect()
    }

    /// The repository index: every model directory, with the state of each known version.
    pub fn index(&self, ready_only: bool) -> Vec<IndexEntry> {
        let models = self.models.read();
        let mut names: BTreeSet<String> = self.repository_models().into_iter().collect();
        names.extend(models.keys().cloned());
        let mut out = Vec::new();
        for name in names {
            let row = |version: String, state: &str, reason: String| IndexEntry {
                name: name.clone(),
                version,
                state: state.to_string(),
                reason,
            };
            match models.get(&name) {
                None => out.push(row(String::new(), "UNAVAILABLE", "unloaded".into())),
                Some(e) => {
                    let mut rows: BTreeMap<i64, IndexEntry> = BTreeMap::new();
                    for v in e.ready.keys() {
                        rows.insert(*v, row(v.to_string(), "READY", String::new()));
                    }
                    for (v, r) in &e.failed {
                        rows.insert(*v, row(v.to_string(), "UNAVAILABLE", r.clone()));
                    }
                    if rows.is_empty() {
                        let reason = e.error.clone().unwrap_or_else(|| "unloaded".into());
                        out.push(row(String::new(), "UNAVAILABLE", reason));
                    }
                    out.extend(rows.into_values());
                }
            }
        }
        if ready_only {
            out.retain(|r| r.state == "READY");
        }
        out
    }

    /// True when every model that was asked to load is ready (Triton's server readiness).
    pub fn all_ready_ok(&self) -> bool {
        self.models
            .read()
            .values()
            .all(|e| e.unloaded || (e.error.is_none() && e.failed.is_empty()))
    }

    /// Loads (or reloads) a model, optionally with a config given by the client.
    /// Errors are returned and also kept as the model's UNAVAILABLE reason.
    pub async fn load(
        self: &Arc<Self>,
        name: &str,
        config_override: Option<ModelConfig>,
    ) -> Result<(), ServeError> {
        let _guard = self.load_lock.lock().await;
        if config_override.is_none() && !self.root.join(name).is_dir() {
            // Nothing to record: a name that is not in the repository does not become a model.
            return Err(ServeError::invalid(format!(
                "failed to load '{name}': no model directory '{name}' in the repository"
            )));
        }
        let this = self.clone();
        let n = name.to_string();
        let entry = tokio::task::spawn_blocking(move || this.build_entry(&n, config_override))
            .await
            .map_err(|e| ServeError::internal(format!("load task failed: {e}")))?;
        let result = match (&entry.error, entry.failed.iter().next()) {
            (Some(e), _) => Err(ServeError::invalid(format!("failed to load '{name}': {e}"))),
            (None, Some((v, e))) => {
                Err(ServeError::invalid(format!("failed to load '{name}' version {v}: {e}")))
            }
            (None, None) => Ok(()),
        };
        let old = {
            let mut models = self.models.write();
            match models.get_mut(name) {
                // A failed reload keeps the versions that are serving, as Triton does; the new
                // fingerprint is kept so poll mode does not retry until the files change again.
                Some(cur) if result.is_err() && !cur.ready.is_empty() => {
                    cur.fingerprint = entry.fingerprint;
                    None
                }
                _ => models.insert(name.to_string(), entry),
            }
        };
        if let Some(old) = old {
            retire(old).await;
        }
        result
    }

    /// Unloads a model; queued requests are still answered before its executors stop.
    pub async fn unload(&self, name: &str) -> Result<(), ServeError> {
        let _guard = self.load_lock.lock().await;
        let tombstone =
            ModelEntry { error: Some("unloaded".into()), unloaded: true, ..Default::default() };
        let old = if self.root.join(name).is_dir() {
            self.models.write().insert(name.to_string(), tombstone)
        } else {
            // Gone from the repository (poll mode): forget the name entirely.
            self.models.write().remove(name)
        };
        match old {
            Some(old) => {
                retire(old).await;
                Ok(())
            }
            None if self.root.join(name).is_dir() => Ok(()),
            None => Err(ServeError::not_found(format!(
                "failed to unload '{name}': model not found in repository"
            ))),
        }
    }

    /// Loads every model in the repository (control modes none/poll, and explicit with `*`).
    pub async fn load_all(self: &Arc<Self>) {
        for name in self.repository_models() {
            if let Err(e) = self.load(&name, None).await {
                tracing::warn!("{e}");
            }
        }
    }

    /// Poll mode: loads new or changed models, unloads removed ones.
    pub async fn poll(self: &Arc<Self>) {
        let present = self.repository_models();
        let loaded: Vec<(String, u64)> = self
            .models
            .read()
            .iter()
            .filter(|(_, e)| !e.unloaded)
            .map(|(k, e)| (k.clone(), e.fingerprint))
            .collect();
        for (name, _) in &loaded {
            if !present.contains(name) {
                let _ = self.unload(name).await;
            }
        }
        for name in present {
            let fp = fingerprint(&self.root.join(&name));
            let known = loaded.iter().find(|(n, _)| n == &name).map(|(_, f)| *f);
            if known != Some(fp) {
                if let Err(e) = self.load(&name, None).await {
                    tracing::warn!("{e}");
                }
            }
        }
    }

    /// Stops every model, draining queued requests (used on server shutdown).
    pub async fn shutdown(&self) {
        let all = std::mem::take(&mut *self.models.write());
        for (_, e) in all {
            retire(e).await;
        }
    }

    /// Builds a model entry: config, auto-complete, versions, instances. Blocking.
    fn build_entry(&self, name: &str, config_override: Option<ModelConfig>) -> ModelEntry {
        let dir = self.root.join(name);
        let mut entry = ModelEntry { fingerprint: fingerprint(&dir), ..Default::default() };
        match self.prepare(name, &dir, config_override) {
            Err(e) => entry.error = Some(e.message),
            Ok((config, backend, versions, filename)) => {
                let config = Arc::new(config);
                for v in versions {
                    let path = dir.join(v.to_string()).join(&filename);
                    match self.load_version(name, v, &path, &config, backend.as_ref()) {
                        Ok(m) => {
                            entry.ready.insert(v, Arc::new(m));
                        }
                        Err(e) => {
                            entry.failed.insert(v, e.message);
                        }
                    }
                }
            }
        }
        entry
    }

    #[allow(clippy::type_complexity)]
    fn prepare(
        &self,
        name: &str,
        dir: &Path,
        config_override: Option<ModelConfig>,
    ) -> Result<(ModelConfig, Arc<dyn Backend>, Vec<i64>, String), ServeError> {
        if !dir.is_dir() && config_override.is_none() {
            return Err(ServeError::not_found(format!(
                "model directory '{}' not found in repository",
                dir.display()
            )));
        }
        let mut config = match config_override {
            Some(c) => c,
            None => {
                let p = dir.join("config.pbtxt");
                if p.is_file() {
                    let text = std::fs::read_to_string(&p).map_err(|e| {
                        ServeError::invalid(format!("cannot read {}: {e}", p.display()))
                    })?;
                    parse_pbtxt(&text)?
                } else {
                    ModelConfig::default()
                }
            }
        };
        if config.name.is_empty() {
            config.name = name.to_string();
        } else if config.name != name {
            return Err(ServeError::invalid(format!(
                "unexpected 'name' '{}' in model configuration, expecting '{name}'",
                config.name
            )));
        }
        let available = numeric_dirs(dir);
        let versions = select_versions(&config, &available)?;
        let backend = match self.backends.find(&config) {
            Some(b) => b,
            None if config.backend.is_empty() && config.platform.is_empty() => {
                // No platform named: pick the backend whose default file the version folder holds.
                let probe = versions.last().map(|v| dir.join(v.to_string()));
                self.backends
                    .backends
                    .iter()
                    .find(|b| {
                        let f = if config.default_model_filename.is_empty() {
                            b.default_model_filename()
                        } else {
                            config.default_model_filename.as_str()
                        };
                        probe.as_ref().is_some_and(|p| p.join(f).is_file())
                    })
                    .cloned()
                    .ok_or_else(|| {
                        ServeError::invalid(format!(
                            "unable to find a backend for model '{name}': no platform/backend in config and no known model file"
                        ))
                    })?
            }
            None => {
                return Err(ServeError::unsupported(format!(
                    "model '{name}': backend '{}' / platform '{}' is not available",
                    config.backend, config.platform
                )))
            }
        };
        if config.backend.is_empty() {
            config.backend = backend.name().to_string();
        }
        if config.platform.is_empty() {
            config.platform = backend.platform().to_string();
        }
        let filename = if config.default_model_filename.is_empty() {
            backend.default_model_filename().to_string()
        } else {
            config.default_model_filename.clone()
        };
        if config.input.is_empty() || config.output.is_empty() {
            if let Some(v) = versions.last() {
                let io = backend.model_io(&dir.join(v.to_string()).join(&filename))?;
                autocomplete(&mut config, &io);
            }
        }
        validate(&config)?;
        Ok((config, backend, versions, filename))
    }

    fn load_version(
        &self,
        name: &str,
        version: i64,
        path: &Path,
        config: &Arc<ModelConfig>,
        backend: &dyn Backend,
    ) -> Result<LoadedModel, ServeError> {
        if !path.is_file() {
            return Err(ServeError::not_found(format!(
                "model file '{}' not found",
                path.display()
            )));
        }
        let mut instances = Vec::new();
        for device in self.instance_devices(config)? {
            instances.push(backend.load(path, config, device)?);
        }
        let stats = Arc::new(ModelStats::default());
        let scheduler = Scheduler::start(name, instances, batch_policy(config), stats.clone())?;
        Ok(LoadedModel {
            name: name.to_string(),
            version,
            config: config.clone(),
            stats,
            scheduler,
        })
    }

    /// One device per instance: `count` instances per group; KIND_AUTO prefers a GPU.
    fn instance_devices(&self, config: &ModelConfig) -> Result<Vec<InstanceDevice>, ServeError> {
        let gpus = &self.backends.gpus;
        let mut out = Vec::new();
        if config.instance_group.is_empty() {
            out.push(gpus.first().map_or(InstanceDevice::Cpu, |&g| InstanceDevice::Gpu(g)));
            return Ok(out);
        }
        for g in &config.instance_group {
            let count = if g.count == 0 { 1 } else { g.count };
            let kind = Kind::try_from(g.kind).unwrap_or(Kind::Auto);
            let pool: Vec<u32> = if g.gpus.is_empty() {
                gpus.clone()
            } else {
                g.gpus.iter().filter_map(|&x| u32::try_from(x).ok()).collect()
            };
            for i in 0..usize::try_from(count).unwrap_or(1) {
                let dev = match kind {
                    Kind::Cpu => InstanceDevice::Cpu,
                    Kind::Gpu if pool.is_empty() => {
                        return Err(ServeError::unavailable(format!(
                        "model '{}': instance group '{}' asks for KIND_GPU but no GPU is available",
                        config.name, g.name
                    )))
                    }
                    Kind::Gpu => InstanceDevice::Gpu(pool[i % pool.len()]),
                    _ if pool.is_empty() => InstanceDevice::Cpu,
                    _ => InstanceDevice::Gpu(pool[i % pool.len()]),
                };
                out.push(dev);
            }
        }
        Ok(out)
    }
}

/// Stops a replaced or unloaded entry's executors off the async runtime (they drain their queues).
async fn retire(entry: ModelEntry) {
    let models: Vec<Arc<LoadedModel>> = entry.ready.into_values().collect();
    for m in &models {
        m.scheduler.close();
    }
    let _ = tokio::task::spawn_blocking(move || {
        for m in models {
            m.scheduler.shutdown();
        }
    })
    .await;
}

fn numeric_dirs(dir: &Path) -> Vec<i64> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<i64> = rd
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i64>().ok()))
        .filter(|&v| v > 0)
        .collect();
    v.sort_unstable();
    v
}

/// Applies `version_policy` (default: the latest one version).
fn select_versions(config: &ModelConfig, available: &[i64]) -> Result<Vec<i64>, ServeError> {
    let chosen: Vec<i64> =
        match config.version_policy.as_ref().and_then(|p| p.policy_choice.as_ref()) {
            Some(PolicyChoice::All(_)) => available.to_vec(),
            Some(PolicyChoice::Specific(s)) => {
                available.iter().copied().filter(|v| s.versions.contains(v)).collect()
            }
            Some(PolicyChoice::Latest(l)) => {
                let n = usize::try_from(l.num_versions.max(1)).unwrap_or(1);
                available[available.len().saturating_sub(n)..].to_vec()
            }
            None => available.last().copied().into_iter().collect(),
        };
    if chosen.is_empty() {
        return Err(ServeError::not_found(format!(
            "no version is available for model '{}'",
            config.name
        )));
    }
    Ok(chosen)
}

/// Cheap change detector for poll mode: names, sizes and mtimes of the model's files.
fn fingerprint(dir: &Path) -> u64 {
    let mut h = DefaultHasher::new();
    fn walk(p: &Path, depth: usize, h: &mut DefaultHasher) {
        let Ok(rd) = std::fs::read_dir(p) else { return };
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            e.file_name().hash(h);
            if let Ok(md) = e.metadata() {
                md.len().hash(h);
                if let Ok(t) = md.modified() {
                    t.hash(h);
                }
                if md.is_dir() && depth < 2 {
                    walk(&e.path(), depth + 1, h);
                }
            }
        }
    }
    walk(dir, 0, &mut h);
    h.finish()
}
