//! Template roots (`e2b-local --template-root NAME=DIR`): a template whose sandboxes' root
//! filesystem is built from an unpacked image tree the person names (a `docker export`, a
//! debootstrap tree) instead of the host's allowlisted system directories.
//!
//! A [`TemplateRoot`] exists only once checked: the template is known, the directory
//! exists, is a directory whose path an overlay can take, and holds the programs the
//! emulator runs in every sandbox ([`REQUIRED_PROGRAMS`], resolved inside the tree as the
//! sandbox will resolve them). `e2b-local` checks its flags before it serves anything and
//! refuses to start on the first bad one; a create checks the directory again and fails
//! with the same words when it vanished since.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::template::Template;

/// The programs every sandbox root must hold: envd starts each process as
/// `/bin/sh -c '… exec /usr/bin/nice -n 0 "$@"'` (as envd 0.6.13 does), and the sandbox's
/// init (the holder of its namespaces) is `/bin/sleep infinity`.
pub const REQUIRED_PROGRAMS: [&str; 3] = ["/bin/sh", "/usr/bin/nice", "/bin/sleep"];

/// Why a template root was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateRootError {
    /// The flag is not `NAME=DIR` (no `=`, or an empty side).
    #[error("expected NAME=DIR (a template name or id, '=', a directory), got {0:?}")]
    Malformed(String),
    /// NAME is no template the emulator knows.
    #[error("no template named {name:?}: the emulator knows {known}")]
    UnknownTemplate {
        /// The name given.
        name: String,
        /// The known templates, for the message.
        known: String,
    },
    /// Two template roots name the same template.
    #[error("template {0:?} is given a root twice")]
    Twice(String),
    /// DIR does not exist (or cannot be looked at).
    #[error("template root {dir}: {source}")]
    Missing {
        /// The directory given.
        dir: PathBuf,
        /// Why it cannot be used.
        source: std::io::Error,
    },
    /// DIR is not a directory.
    #[error("template root {0}: not a directory")]
    NotADirectory(PathBuf),
    /// DIR's path has a character overlayfs options cannot carry.
    #[error(
        "template root {0}: a path with ',', ':' or '\\' cannot be an overlay layer; move or link the tree elsewhere"
    )]
    UnusablePath(PathBuf),
    /// DIR lacks a program the emulator runs in every sandbox.
    #[error(
        "template root {dir} lacks {program} ({why}): the emulator starts every sandbox process through /bin/sh and /usr/bin/nice, and the sandbox's init is /bin/sleep"
    )]
    MissingProgram {
        /// The directory given.
        dir: PathBuf,
        /// The absolute sandbox path of the program.
        program: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// The sandbox boundary is switched off: a template root needs the sandbox's own
    /// mount namespace.
    #[error(
        "a template root needs the sandbox boundary (its own mount namespace); it cannot be used with --no-isolation / E2B_LOCAL_NO_ISOLATION"
    )]
    NeedsIsolation,
}

/// A checked `NAME=DIR`: sandboxes of template `NAME` get `DIR` as their root filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateRoot {
    template_id: String,
    dir: PathBuf,
}

impl TemplateRoot {
    /// Template `name` (an alias, an id, or either with `:tag`) gets `dir` as its root
    /// filesystem; refused with the reason when the template is unknown or `dir` is not
    /// usable (see [`TemplateRoot::check_dir`]).
    ///
    /// ```
    /// use testing_fake::TemplateRoot;
    /// let err = TemplateRoot::new("nope", "/").unwrap_err();
    /// assert!(err.to_string().contains("no template named \"nope\""));
    /// ```
    pub fn new(name: &str, dir: impl AsRef<Path>) -> Result<TemplateRoot, TemplateRootError> {
        let template =
            Template::lookup(name).ok_or_else(|| TemplateRootError::UnknownTemplate {
                name: name.to_owned(),
                known: Template::all()
                    .iter()
                    .map(|t| format!("{} (id {})", t.alias, t.id))
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let dir = TemplateRoot::check_dir(dir.as_ref())?;
        Ok(TemplateRoot {
            template_id: template.id,
            dir,
        })
    }

    /// The id of the template this root is for.
    pub fn template_id(&self) -> &str {
        &self.template_id
    }

    /// The tree (canonical, absolute).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Check that `dir` can be a sandbox's root filesystem; its canonical path when it can.
    /// Programs are resolved inside the tree (`openat2` with `RESOLVE_IN_ROOT`), so an
    /// absolute symlink such as `bin -> /usr/bin` means the tree's `/usr/bin`, never the
    /// host's.
    pub fn check_dir(dir: &Path) -> Result<PathBuf, TemplateRootError> {
        let md = std::fs::metadata(dir).map_err(|source| TemplateRootError::Missing {
            dir: dir.to_path_buf(),
            source,
        })?;
        if !md.is_dir() {
            return Err(TemplateRootError::NotADirectory(dir.to_path_buf()));
        }
        let canonical =
            std::fs::canonicalize(dir).map_err(|source| TemplateRootError::Missing {
                dir: dir.to_path_buf(),
                source,
            })?;
        if canonical
            .as_os_str()
            .as_encoded_bytes()
            .iter()
            .any(|b| b",:\\".contains(b))
        {
            return Err(TemplateRootError::UnusablePath(canonical));
        }
        let root =
            std::fs::File::open(&canonical).map_err(|source| TemplateRootError::Missing {
                dir: dir.to_path_buf(),
                source,
            })?;
        for program in REQUIRED_PROGRAMS {
            if let Err(why) = executable_in(&root, program) {
                return Err(TemplateRootError::MissingProgram {
                    dir: canonical,
                    program,
                    why,
                });
            }
        }
        Ok(canonical)
    }
}

/// `Ok` when `program` (absolute, as the sandbox names it) resolves inside `root` to an
/// executable regular file; else what is wrong.
fn executable_in(root: &std::fs::File, program: &str) -> Result<(), String> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let rel = program.trim_start_matches('/');
    let fd = rustix::fs::openat2(
        root,
        rel,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| match e {
        rustix::io::Errno::NOENT => "no such file in the tree".to_owned(),
        e => std::io::Error::from(e).to_string(),
    })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| std::io::Error::from(e).to_string())?;
    let mode = st.st_mode;
    if mode & libc::S_IFMT != libc::S_IFREG {
        return Err("not a regular file".to_owned());
    }
    if mode & 0o111 == 0 {
        return Err("not executable".to_owned());
    }
    Ok(())
}

impl FromStr for TemplateRoot {
    type Err = TemplateRootError;

    /// `NAME=DIR` (the first `=` splits; DIR may hold more).
    fn from_str(flag: &str) -> Result<TemplateRoot, TemplateRootError> {
        match flag.split_once('=') {
            Some((name, dir)) if !name.trim().is_empty() && !dir.is_empty() => {
                TemplateRoot::new(name.trim(), dir)
            }
            _ => Err(TemplateRootError::Malformed(flag.to_owned())),
        }
    }
}

/// Index checked roots by template id; two roots for one template are refused.
pub(crate) fn by_template(
    roots: &[TemplateRoot],
) -> Result<std::collections::HashMap<String, PathBuf>, TemplateRootError> {
    let mut out = std::collections::HashMap::new();
    for r in roots {
        if out.insert(r.template_id.clone(), r.dir.clone()).is_some() {
            return Err(TemplateRootError::Twice(r.template_id.clone()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// A fresh directory under the system's temp dir, removed on drop.
    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn tree(name: &str, programs: &[&str]) -> Dir {
        let d =
            std::env::temp_dir().join(format!("template-root-unit-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for p in programs {
            let f = d.join(p.trim_start_matches('/'));
            std::fs::create_dir_all(f.parent().expect("parent")).expect("mkdir");
            std::fs::write(&f, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        std::fs::create_dir_all(&d).expect("mkdir");
        Dir(d)
    }

    fn flag(name: &str, dir: &Path) -> String {
        format!("{name}={}", dir.display())
    }

    #[test]
    fn a_flag_without_equals_or_with_an_empty_side_is_malformed() {
        for bad in ["base", "", "=", "base=", "=/srv/image"] {
            let err = bad.parse::<TemplateRoot>().expect_err(bad);
            assert!(
                matches!(&err, TemplateRootError::Malformed(f) if f == bad),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains("expected NAME=DIR"), "{err}");
        }
    }

    #[test]
    fn an_unknown_template_is_named_with_the_known_ones() {
        let d = tree("unknown", &REQUIRED_PROGRAMS);
        let err = flag("nosuch", &d.0)
            .parse::<TemplateRoot>()
            .expect_err("unknown");
        let text = err.to_string();
        assert!(text.contains("no template named \"nosuch\""), "{text}");
        assert!(
            text.contains("base") && text.contains("conversation"),
            "{text}"
        );
    }

    #[test]
    fn a_missing_dir_and_a_file_are_refused_by_name() {
        let d = tree("missing", &[]);
        let gone = d.0.join("not-here");
        let err = flag("base", &gone)
            .parse::<TemplateRoot>()
            .expect_err("missing");
        assert!(matches!(err, TemplateRootError::Missing { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains(&gone.display().to_string()), "{text}");
        assert!(text.contains("No such file or directory"), "{text}");

        let file = d.0.join("file");
        std::fs::write(&file, "x").expect("write");
        let err = flag("base", &file)
            .parse::<TemplateRoot>()
            .expect_err("file");
        assert!(err.to_string().ends_with("not a directory"), "{err}");
    }

    #[test]
    fn a_tree_lacking_a_required_program_names_it() {
        let d = tree("no-nice", &["/bin/sh", "/bin/sleep"]);
        let err = flag("base", &d.0)
            .parse::<TemplateRoot>()
            .expect_err("no nice");
        let text = err.to_string();
        assert!(text.contains("lacks /usr/bin/nice"), "{text}");
        assert!(text.contains("no such file in the tree"), "{text}");

        let d = tree("no-sh", &["/usr/bin/nice", "/bin/sleep"]);
        let err = flag("base", &d.0)
            .parse::<TemplateRoot>()
            .expect_err("no sh");
        assert!(err.to_string().contains("lacks /bin/sh"), "{err}");

        // Present but not executable.
        let d = tree("sh-not-exec", &REQUIRED_PROGRAMS);
        std::fs::set_permissions(d.0.join("bin/sh"), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        let err = flag("base", &d.0)
            .parse::<TemplateRoot>()
            .expect_err("not exec");
        assert!(
            err.to_string().contains("/bin/sh (not executable)"),
            "{err}"
        );
    }

    #[test]
    fn absolute_links_resolve_inside_the_tree_not_on_the_host() {
        // `bin -> /usr/bin`: on the host /usr/bin/sh exists, in this tree it does not.
        let d = tree("links", &["/usr/bin/nice", "/usr/bin/sleep"]);
        std::os::unix::fs::symlink("/usr/bin", d.0.join("bin")).expect("symlink");
        let err = flag("base", &d.0)
            .parse::<TemplateRoot>()
            .expect_err("no sh");
        assert!(err.to_string().contains("lacks /bin/sh"), "{err}");
        // Once the tree has it, the link is followed inside the tree.
        std::fs::write(d.0.join("usr/bin/sh"), "").expect("write");
        std::fs::set_permissions(
            d.0.join("usr/bin/sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
        let root = flag("base:latest", &d.0)
            .parse::<TemplateRoot>()
            .expect("a usable tree");
        assert_eq!(root.template_id(), Template::base().id);
        assert_eq!(root.dir(), std::fs::canonicalize(&d.0).expect("canonical"));
    }

    #[test]
    fn a_path_overlayfs_cannot_take_and_a_second_root_are_refused() {
        let d = tree("a,b", &REQUIRED_PROGRAMS);
        let err = flag("base", &d.0)
            .parse::<TemplateRoot>()
            .expect_err("comma");
        assert!(matches!(err, TemplateRootError::UnusablePath(_)), "{err}");

        let d = tree("twice", &REQUIRED_PROGRAMS);
        let a = flag("base", &d.0).parse::<TemplateRoot>().expect("ok");
        let b = TemplateRoot::new(&Template::base().id, &d.0).expect("ok");
        let c = TemplateRoot::new("conversation", &d.0).expect("ok");
        assert!(by_template(&[a.clone(), c]).is_ok());
        let err = by_template(&[a, b]).expect_err("twice");
        assert!(err.to_string().contains("given a root twice"), "{err}");
    }
}
