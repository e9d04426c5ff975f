//! Templates as data: users, directories, owners and modes of each sandbox template.
//!
//! A template says what a fresh sandbox looks like: which accounts exist (they become the
//! sandbox's private `/etc/passwd` and `/etc/group`), which directories exist with which
//! owner and mode, the default user and workdir, and which absolute paths are backed by the
//! sandbox's own tree (everything else of the host is read-only inside the sandbox).

/// One account of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateUser {
    /// Login name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id (a group of the same name is created).
    pub gid: u32,
    /// Home directory (absolute sandbox path).
    pub home: String,
    /// Login shell.
    pub shell: String,
}

/// One directory a fresh sandbox contains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateDir {
    /// Absolute sandbox path.
    pub path: String,
    /// Owner (a user name of the template; its primary group is the group).
    pub owner: String,
    /// Mode bits, including sticky/setgid bits (`0o1777` for `/tmp`).
    pub mode: u32,
}

/// A sandbox template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// Template id (`[a-z0-9]+`).
    pub id: String,
    /// Alias (`base`).
    pub alias: String,
    /// The user processes and file operations run as when none is named.
    pub default_user: String,
    /// Template WORKDIR: used when a path or cwd is empty (else the user's home).
    pub workdir: Option<String>,
    /// Accounts.
    pub users: Vec<TemplateUser>,
    /// Directories of a fresh sandbox, created parents first.
    pub dirs: Vec<TemplateDir>,
    /// Absolute sandbox paths backed by the sandbox's own (writable) tree; the rest of the
    /// host root is visible read-only inside the sandbox.
    pub mounts: Vec<String>,
    /// Users granted passwordless `sudo` (`/etc/sudoers.d` of a fresh sandbox).
    pub sudoers: Vec<String>,
    /// The envd version this template advertises.
    pub envd_version: String,
    /// vCPUs reported by the control plane.
    pub cpu_count: u32,
    /// Memory reported by the control plane.
    pub memory_mb: u32,
    /// Disk size reported by the control plane.
    pub disk_size_mb: u32,
    /// The tree the sandbox's root filesystem is built from (`e2b-local --template-root`,
    /// see [`crate::TemplateRoot`]); `None`: the host's allowlisted system directories.
    pub root_fs: Option<std::path::PathBuf>,
}

fn user(name: &str, uid: u32, home: &str) -> TemplateUser {
    TemplateUser {
        name: name.into(),
        uid,
        gid: uid,
        home: home.into(),
        shell: "/bin/bash".into(),
    }
}

fn dir(path: &str, owner: &str, mode: u32) -> TemplateDir {
    TemplateDir {
        path: path.into(),
        owner: owner.into(),
        mode,
    }
}

impl Template {
    /// E2B's `base` template: user `user` (uid 1000, home `/home/user`) and `root`.
    pub fn base() -> Template {
        Template {
            id: "rki5dems9wqfm4r03t7g".into(),
            alias: "base".into(),
            default_user: "user".into(),
            workdir: None,
            users: vec![user("root", 0, "/root"), user("user", 1000, "/home/user")],
            dirs: vec![
                dir("/home", "root", 0o755),
                dir("/home/user", "user", 0o755),
                dir("/root", "root", 0o700),
                dir("/tmp", "root", 0o1777),
            ],
            mounts: vec!["/home".into(), "/root".into(), "/tmp".into()],
            sudoers: vec!["user".into()],
            envd_version: e2b_proto::EMULATED_ENVD_VERSION.into(),
            cpu_count: 2,
            memory_mb: 512,
            disk_size_mb: 22_928,
            root_fs: None,
        }
    }

    /// The conversation-sandbox template: user `sandbox` with HOME `/workspace`,
    /// `/skills` (root, 0755) and `/opt/capybara` (root, 0700).
    pub fn conversation() -> Template {
        Template {
            id: "c0nversati0n5andb0x01".into(),
            alias: "conversation".into(),
            default_user: "sandbox".into(),
            workdir: Some("/workspace".into()),
            users: vec![
                user("root", 0, "/root"),
                user("sandbox", 1000, "/workspace"),
            ],
            dirs: vec![
                dir("/home", "root", 0o755),
                dir("/root", "root", 0o700),
                dir("/tmp", "root", 0o1777),
                dir("/workspace", "sandbox", 0o755),
                dir("/skills", "root", 0o755),
                dir("/opt/capybara", "root", 0o700),
            ],
            mounts: vec![
                "/home".into(),
                "/root".into(),
                "/tmp".into(),
                "/workspace".into(),
                "/skills".into(),
                "/opt/capybara".into(),
            ],
            sudoers: Vec::new(),
            envd_version: e2b_proto::EMULATED_ENVD_VERSION.into(),
            cpu_count: 2,
            memory_mb: 1024,
            disk_size_mb: 22_928,
            root_fs: None,
        }
    }

    /// Every known template.
    pub fn all() -> Vec<Template> {
        vec![Template::base(), Template::conversation()]
    }

    /// Find a template by id, alias, or `alias:tag` / `id:tag` (the tag is ignored).
    pub fn lookup(name_or_id: &str) -> Option<Template> {
        let name = name_or_id
            .split_once(':')
            .map_or(name_or_id, |(name, _tag)| name);
        Template::all()
            .into_iter()
            .find(|t| t.id == name || t.alias == name)
    }

    /// The account named `name`.
    pub fn user(&self, name: &str) -> Option<&TemplateUser> {
        self.users.iter().find(|u| u.name == name)
    }

    /// The account with uid `uid`.
    pub fn user_by_uid(&self, uid: u32) -> Option<&TemplateUser> {
        self.users.iter().find(|u| u.uid == uid)
    }

    /// The group name of gid `gid` (each user has a primary group of its own name).
    pub fn group_by_gid(&self, gid: u32) -> Option<&str> {
        self.users
            .iter()
            .find(|u| u.gid == gid)
            .map(|u| u.name.as_str())
    }

    /// The template's `/etc/passwd`.
    pub fn passwd(&self) -> String {
        self.users
            .iter()
            .map(|u| {
                format!(
                    "{}:x:{}:{}:{}:{}:{}\n",
                    u.name, u.uid, u.gid, u.name, u.home, u.shell
                )
            })
            .collect()
    }

    /// The template's `/etc/group`.
    pub fn group(&self) -> String {
        self.users
            .iter()
            .map(|u| format!("{}:x:{}:\n", u.name, u.gid))
            .collect()
    }

    /// The template's `/etc/shadow`: every account locked for password login (`*`).
    pub fn shadow(&self) -> String {
        self.users
            .iter()
            .map(|u| format!("{}:*:19000:0:99999:7:::\n", u.name))
            .collect()
    }

    /// The template's `/etc/gshadow`.
    pub fn gshadow(&self) -> String {
        self.users
            .iter()
            .map(|u| format!("{}:*::\n", u.name))
            .collect()
    }

    /// The template's sudoers rules (`None` without sudoers): passwordless, any command.
    pub fn sudoers(&self) -> Option<String> {
        if self.sudoers.is_empty() {
            return None;
        }
        Some(
            self.sudoers
                .iter()
                .map(|u| format!("{u} ALL=(ALL:ALL) NOPASSWD: ALL\n"))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_by_id_alias_and_tag() {
        let base = Template::base();
        assert_eq!(Template::lookup("base"), Some(base.clone()));
        assert_eq!(Template::lookup("base:default"), Some(base.clone()));
        assert_eq!(Template::lookup(&base.id), Some(base));
        assert_eq!(
            Template::lookup("conversation").map(|t| t.default_user),
            Some("sandbox".to_string())
        );
        assert!(Template::lookup("nope").is_none());
    }

    #[test]
    fn passwd_and_group_name_the_users() {
        let t = Template::base();
        assert!(
            t.passwd()
                .contains("user:x:1000:1000:user:/home/user:/bin/bash\n")
        );
        assert!(t.group().contains("root:x:0:\n"));
    }
}
