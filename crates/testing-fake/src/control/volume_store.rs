//! Team volumes kept by the emulator: directories under `volumes/<volumeID>/data` of the
//! emulator root, described by `volumes/<volumeID>/volume.json` (id, name, content token),
//! so they outlive every sandbox and, with `e2b-local --root DIR`, restarts of the
//! emulator. A sandbox created with `volumeMounts` gets the directory bound at the path it
//! asked for.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};

/// Mode of a fresh volume's root directory: every sandbox user may write (an NFS export
/// of E2B's volumes is shared by whoever mounts it).
const ROOT_MODE: u32 = 0o777;

/// One volume.
#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct VolumeRec {
    #[serde(rename = "volumeID")]
    pub id: String,
    pub name: String,
    pub token: String,
}

impl std::fmt::Debug for VolumeRec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeRec")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Every volume of one emulator root.
pub(crate) struct Volumes {
    dir: PathBuf,
    map: Mutex<BTreeMap<String, Arc<VolumeRec>>>,
}

/// Why a volume could not be made.
pub(crate) enum CreateError {
    NameTaken,
    Io(std::io::Error),
}

impl Volumes {
    /// The volumes found under `emulator_root/volumes` (unreadable entries are skipped
    /// with a warning).
    pub fn load(emulator_root: &Path) -> Self {
        let dir = emulator_root.join("volumes");
        let mut map = BTreeMap::new();
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for e in rd.flatten() {
                let meta = e.path().join("volume.json");
                let Ok(text) = std::fs::read(&meta) else {
                    continue;
                };
                match serde_json::from_slice::<VolumeRec>(&text) {
                    Ok(v) if e.file_name().to_str() == Some(&v.id) => {
                        map.insert(v.id.clone(), Arc::new(v));
                    }
                    _ => tracing::warn!(path = %meta.display(), "ignoring an unreadable volume"),
                }
            }
        }
        Volumes {
            dir,
            map: Mutex::new(map),
        }
    }

    fn map(&self) -> MutexGuard<'_, BTreeMap<String, Arc<VolumeRec>>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The directory of every volume (hidden from sandboxes).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The data directory of a volume.
    pub fn data(&self, id: &str) -> PathBuf {
        self.dir.join(id).join("data")
    }

    /// Create a volume named `name` (names are unique).
    pub fn create(&self, name: &str) -> Result<Arc<VolumeRec>, CreateError> {
        let mut map = self.map();
        if map.values().any(|v| v.name == name) {
            return Err(CreateError::NameTaken);
        }
        let rec = VolumeRec {
            id: uuid::Uuid::new_v4().to_string(),
            name: name.to_owned(),
            token: hex::encode(uuid::Uuid::new_v4().as_bytes())
                + &hex::encode(uuid::Uuid::new_v4().as_bytes()),
        };
        let home = self.dir.join(&rec.id);
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(home.join("data"))?;
            std::fs::set_permissions(
                home.join("data"),
                std::fs::Permissions::from_mode(ROOT_MODE),
            )?;
            let json = serde_json::to_vec(&rec).map_err(std::io::Error::other)?;
            let tmp = home.join("volume.json.new");
            std::fs::write(&tmp, json)?;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
            std::fs::rename(&tmp, home.join("volume.json"))
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_dir_all(&home);
            return Err(CreateError::Io(e));
        }
        let rec = Arc::new(rec);
        map.insert(rec.id.clone(), rec.clone());
        Ok(rec)
    }

    /// A volume by id.
    pub fn get(&self, id: &str) -> Option<Arc<VolumeRec>> {
        self.map().get(id).cloned()
    }

    /// A volume by name.
    pub fn by_name(&self, name: &str) -> Option<Arc<VolumeRec>> {
        self.map().values().find(|v| v.name == name).cloned()
    }

    /// Every volume, by id.
    pub fn all(&self) -> Vec<Arc<VolumeRec>> {
        self.map().values().cloned().collect()
    }

    /// Delete a volume and its data. False when unknown.
    pub fn delete(&self, id: &str) -> std::io::Result<bool> {
        let Some(rec) = self.map().remove(id) else {
            return Ok(false);
        };
        let home = self.dir.join(&rec.id);
        // The record goes first: a crash in between leaves data without a record, which
        // `load` ignores, never a record without data.
        std::fs::remove_file(home.join("volume.json"))?;
        std::fs::remove_dir_all(&home)?;
        Ok(true)
    }
}
