//! The model repository: Triton's directory layout, version policy, control modes, load/unload.

use crate::backend::{Backend, InstanceDevice, ServeBackends};
use crate::config::{autocomplete, check_against_model, parse_pbtxt, validate};
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

/// Bounds a model config must respect to load (`--max-instances-per-model`, `--max-batch-size-limit`).
#[derive(Debug, Clone, Copy)]
pub struct LoadLimits {
    /// Instances one model may ask for.
    pub max_instances: usize,
    /// Instances the whole server may hold, over all models (they share the executor pool).
    pub max_total_instances: usize,
    pub max_batch_size: usize,
    /// Batches executing at once over the whole server (the shared executor pool's threads).
    pub executor_threads: usize,
}

impl Default for LoadLimits {
    fn default() -> Self {
        Self {
            max_instances: 64,
            max_total_instances: 256,
            max_batch_size: 4096,
            executor_threads: 16,
        }
    }
}

/// Checks a model name the way Triton's repository does: one path component (a directory name
/// in the repository), so no name can reach outside it. Names come from URLs and gRPC fields.
pub fn validate_model_name(name: &str) -> Result<(), ServeError> {
    let why = if name.is_empty() {
        Some("it is empty")
    } else if name.len() > 255 {
        Some("it is longer than 255 bytes")
    } else if name == "." || name == ".." {
        Some("'.' and '..' are not model names")
    } else if name.starts_with('.') {
        Some("hidden directories are not models")
    } else if name.contains(['/', '\\']) {
        Some("it must be a single directory name, without '/' or '\\'")
    } else if name.chars().any(char::is_control) {
        Some("it contains control characters")
    } else {
        None
    };
    match why {
        None => Ok(()),
        Some(w) => {
            Err(ServeError::invalid(format!("invalid model name '{}': {w}", name.escape_default())))
        }
    }
}

/// Checks `default_model_filename` lexically (before any file is touched, so the answer cannot
/// reveal what exists outside the repository): a relative path without `..`.
fn validate_model_filename(name: &str, f: &str) -> Result<(), ServeError> {
    use std::path::Component;
    let p = Path::new(f);
    let ok = !f.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)));
    if ok {
        Ok(())
    } else {
        Err(ServeError::invalid(format!(
            "model '{name}': default_model_filename '{}' must be a file name inside the version directory",
            f.escape_default()
        )))
    }
}

/// Owns every loaded model; shared by the HTTP and gRPC front ends.
pub struct ModelManager {
    root: PathBuf,
    /// `root` with symlinks resolved: every path the server opens must stay under it.
    canon_root: PathBuf,
    limits: LoadLimits,
    /// Executes every model's batches; bounded by `limits.executor_threads`.
    pool: Arc<crate::pool::ExecPool>,
    backends: ServeBackends,
    models: RwLock<BTreeMap<String, ModelEntry>>,
    /// Loads and unloads run one at a time so a model is never half-replaced.
    load_lock: tokio::sync::Mutex<()>,
}

impl ModelManager {
    pub fn new(root: PathBuf, backends: ServeBackends) -> Self {
        let canon_root = std::fs::canonicalize(&root).unwrap_or_else(|_| root.clone());
        Self {
            root,
            canon_root,
            limits: LoadLimits::default(),
            pool: crate::pool::ExecPool::new(LoadLimits::default().executor_threads),
            backends,
            models: RwLock::new(BTreeMap::new()),
            load_lock: Default::default(),
        }
    }

    /// Sets the load-time bounds on instance counts and batch sizes.
    pub fn with_limits(mut self, limits: LoadLimits) -> Self {
        self.limits = limits;
        self.pool = crate::pool::ExecPool::new(limits.executor_threads);
        self
    }

    /// Resolves `p` (symlinks included) and checks it lies inside the repository. The message
    /// names only the path relative to the repository, never where a link points.
    fn inside(&self, p: &Path) -> Result<PathBuf, ServeError> {
        let rel = p
            .strip_prefix(&self.root)
            .or_else(|_| p.strip_prefix(&self.canon_root))
            .unwrap_or(p)
            .display()
            .to_string();
        let real = std::fs::canonicalize(p).map_err(|_| {
            ServeError::not_found(format!("'{rel}' not found in the model repository"))
        })?;
        if real.starts_with(&self.canon_root) {
            Ok(real)
        } else {
            Err(ServeError::invalid(format!("'{rel}' resolves outside the model repository")))
        }
    }

    /// The directory of a model: a valid name whose directory resolves inside the repository.
    fn model_dir(&self, name: &str) -> Result<PathBuf, ServeError> {
        validate_model_name(name)?;
        let dir = self.inside(&self.root.join(name))?;
        if dir.is_dir() {
            Ok(dir)
        } else {
            Err(ServeError::not_found(format!("'{name}' is not a model directory")))
        }
    }

    /// Model directory names currently in the repository.
    pub fn repository_models(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(&self.root) else { return Vec::new() };
        let mut names: Vec<String> = rd
            .flatten()
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| validate_model_name(n).is_ok())
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
        // A bogus request (bad name, no such directory, a model file path leaving the repository)
        // is refused before anything is recorded, so it cannot change server readiness.
        let refuse = |e: ServeError| ServeError::invalid(format!("failed to load: {}", e.message));
        self.model_dir(name).map_err(refuse)?;
        if let Some(f) = config_override.as_ref().map(|c| c.default_model_filename.as_str()) {
            if !f.is_empty() {
                validate_model_filename(name, f).map_err(refuse)?;
            }
        }
        let _guard = self.load_lock.lock().await;
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
        validate_model_name(name)?;
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
        let dir = match self.model_dir(name) {
            Ok(d) => d,
            Err(e) => {
                entry.error = Some(e.message);
                return entry;
            }
        };
        match self.prepare(name, &dir, config_override) {
            Err(e) => entry.error = Some(e.message),
            Ok((config, backend, versions, filename)) => {
                let config = Arc::new(config);
                for v in versions {
                    let path = self.version_file(&dir, v, &filename, backend.as_ref());
                    match path
                        .and_then(|p| self.load_version(name, v, &p, &config, backend.as_ref()))
                    {
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
        let mut config = match config_override {
            Some(c) => c,
            None => {
                let p = dir.join("config.pbtxt");
                if p.symlink_metadata().is_ok() {
                    let p = self.inside(&p)?;
                    let text = std::fs::read_to_string(&p).map_err(|e| {
                        ServeError::invalid(format!("cannot read {name}/config.pbtxt: {e}"))
                    })?;
                    parse_pbtxt(&text)?
                } else {
                    ModelConfig::default()
                }
            }
        };
        if !config.default_model_filename.is_empty() {
            validate_model_filename(name, &config.default_model_filename)?;
        }
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
                let probe = versions.last().copied();
                self.backends
                    .backends
                    .iter()
                    .find(|b| {
                        let f = config.default_model_filename.as_str();
                        probe.is_some_and(|v| self.version_file(dir, v, f, b.as_ref()).is_ok())
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
        let filename = config.default_model_filename.clone();
        let mut io = None;
        if let Some(&v) = versions.last() {
            // The file's own signature: fills a partial config, and a written config must match it.
            let path = self.version_file(dir, v, &filename, backend.as_ref())?;
            match backend.model_io(&path) {
                Ok(x) => io = Some(x),
                // A backend that cannot describe its files leaves the config unchecked.
                Err(e) if e.kind == crate::types::ErrorKind::Unsupported => {}
                Err(e) => return Err(e),
            }
        }
        if config.input.is_empty() || config.output.is_empty() {
            if let Some(io) = &io {
                autocomplete(&mut config, io);
            }
        }
        validate(&config)?;
        if let Some(io) = &io {
            check_against_model(&config, io)?;
        }
        self.check_limits(&config)?;
        Ok((config, backend, versions, filename))
    }

    /// The model file of one version: the config's `default_model_filename`, else the backend's
    /// default name or one of its alternates (e.g. `model.mps`), resolved inside the repository.
    fn version_file(
        &self,
        dir: &Path,
        version: i64,
        filename: &str,
        backend: &dyn Backend,
    ) -> Result<PathBuf, ServeError> {
        let vdir = dir.join(version.to_string());
        let candidates: Vec<&str> = if filename.is_empty() {
            std::iter::once(backend.default_model_filename())
                .chain(backend.alternate_model_filenames().iter().copied())
                .collect()
        } else {
            vec![filename]
        };
        let found = candidates.iter().find(|f| vdir.join(f).symlink_metadata().is_ok());
        let f = found.unwrap_or(&candidates[0]);
        self.inside(&vdir.join(f))
    }

    /// Refuses configs that ask for more than the machine is allowed to give, before any instance
    /// is created (a huge `count` must not hold the load lock or spawn thousands of threads).
    fn check_limits(&self, config: &ModelConfig) -> Result<(), ServeError> {
        let name = &config.name;
        let total = self.instance_count(config)?;
        if total > self.limits.max_instances {
            return Err(ServeError::invalid(format!(
                "model '{name}': instance_group asks for {total} instances, more than the limit of {} on this machine (--max-instances-per-model)",
                self.limits.max_instances
            )));
        }
        // Server-wide: the other models' running instances plus this one's (a reload replaces
        // its own). Loads are serialized, so the sum cannot race.
        let others: usize = self
            .models
            .read()
            .iter()
            .filter(|(n, _)| n.as_str() != name.as_str())
            .flat_map(|(_, e)| e.ready.values())
            .map(|m| m.scheduler.instances().len())
            .sum();
        if others.saturating_add(total) > self.limits.max_total_instances {
            return Err(ServeError::invalid(format!(
                "model '{name}': its {total} instances and the {others} other models' instances exceed the server's limit of {} (--max-total-instances)",
                self.limits.max_total_instances
            )));
        }
        let mbs = usize::try_from(config.max_batch_size).unwrap_or(0);
        if mbs > self.limits.max_batch_size {
            return Err(ServeError::invalid(format!(
                "model '{name}': max_batch_size {mbs} exceeds the limit of {} (--max-batch-size-limit)",
                self.limits.max_batch_size
            )));
        }
        Ok(())
    }

    fn load_version(
        &self,
        name: &str,
        version: i64,
        path: &Path,
        config: &Arc<ModelConfig>,
        backend: &dyn Backend,
    ) -> Result<LoadedModel, ServeError> {
        if !path.exists() {
            return Err(ServeError::not_found(format!(
                "model file for version {version} not found"
            )));
        }
        let mut instances = Vec::new();
        // `<model>/<version>/<file>`: warmup files live in `<model>/warmup/`.
        let model_dir = path.parent().and_then(Path::parent).unwrap_or(path);
        for device in self.instance_devices(config)? {
            let mut instance = backend.load(path, config, device)?;
            crate::warmup::run(config, model_dir, instance.as_mut())?;
            instances.push((instance, device));
        }
        let stats = Arc::new(ModelStats::default());
        let scheduler =
            Scheduler::start(name, instances, batch_policy(config), stats.clone(), &self.pool)?;
        Ok(LoadedModel {
            name: name.to_string(),
            version,
            config: config.clone(),
            stats,
            scheduler,
        })
    }

    /// The GPUs a group's instances go to, as Triton places them: `count` instances on each GPU
    /// the group lists, or on each GPU of the machine when it lists none; `None` for a CPU group
    /// (KIND_CPU, or KIND_AUTO without GPUs). A listed index the machine lacks is an error.
    fn group_gpus(
        &self,
        config: &ModelConfig,
        g: &crate::proto::inference::ModelInstanceGroup,
    ) -> Result<Option<Vec<u32>>, ServeError> {
        let machine = &self.backends.gpus;
        let kind = Kind::try_from(g.kind).unwrap_or(Kind::Auto);
        let group = if g.name.is_empty() { String::new() } else { format!(" '{}'", g.name) };
        if kind == Kind::Cpu || (kind == Kind::Auto && g.gpus.is_empty() && machine.is_empty()) {
            return Ok(None);
        }
        if g.gpus.is_empty() {
            if machine.is_empty() {
                return Err(ServeError::unavailable(format!(
                    "model '{}': instance group{group} asks for KIND_GPU but no GPU is available",
                    config.name
                )));
            }
            return Ok(Some(machine.clone()));
        }
        let mut out = Vec::with_capacity(g.gpus.len());
        for &i in &g.gpus {
            match u32::try_from(i).ok().filter(|u| machine.contains(u)) {
                Some(u) if !out.contains(&u) => out.push(u),
                Some(_) => {}
                None => {
                    let have = if machine.is_empty() {
                        "no GPU".to_string()
                    } else {
                        let l: Vec<String> = machine.iter().map(|g| format!("mps:{g}")).collect();
                        format!("GPUs {}", l.join(", "))
                    };
                    return Err(ServeError::unavailable(format!(
                        "model '{}': instance group{group} lists GPU {i}, but this server has {have}",
                        config.name
                    )));
                }
            }
        }
        Ok(Some(out))
    }

    /// Instances a config asks for, without creating them (for the limit check).
    fn instance_count(&self, config: &ModelConfig) -> Result<usize, ServeError> {
        if config.instance_group.is_empty() {
            return Ok(1);
        }
        let mut total = 0usize;
        for g in &config.instance_group {
            let count = usize::try_from(g.count.max(1)).unwrap_or(1);
            let places = self.group_gpus(config, g)?.map_or(1, |v| v.len());
            total = total.saturating_add(count.saturating_mul(places));
        }
        Ok(total)
    }

    /// One device per instance: `count` instances per group and listed GPU (see `group_gpus`);
    /// no instance_group means one instance on the first GPU, else on the CPU.
    fn instance_devices(&self, config: &ModelConfig) -> Result<Vec<InstanceDevice>, ServeError> {
        let gpus = &self.backends.gpus;
        if config.instance_group.is_empty() {
            return Ok(vec![gpus.first().map_or(InstanceDevice::Cpu, |&g| InstanceDevice::Gpu(g))]);
        }
        let mut out = Vec::new();
        for g in &config.instance_group {
            let count = usize::try_from(g.count.max(1)).unwrap_or(1);
            match self.group_gpus(config, g)? {
                None => out.extend(std::iter::repeat_n(InstanceDevice::Cpu, count)),
                Some(list) => {
                    for gpu in list {
                        out.extend(std::iter::repeat_n(InstanceDevice::Gpu(gpu), count));
                    }
                }
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
