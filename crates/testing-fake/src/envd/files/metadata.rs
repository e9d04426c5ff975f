//! Upload metadata: `X-Metadata-*` headers, stored as `user.e2b.*` extended attributes.

use std::collections::BTreeMap;

use axum::http::HeaderMap;

/// `X-Metadata-*` headers → metadata (key lowercased, first value wins), validated.
pub(super) fn metadata_of(headers: &HeaderMap) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for name in headers.keys() {
        let Some(key) = name.as_str().strip_prefix("x-metadata-") else {
            continue;
        };
        if key.is_empty() {
            continue;
        }
        let Some(v) = headers.get(name) else { continue };
        let v = v
            .to_str()
            .map_err(|_| format!("value of key {key:?} is not printable ASCII"))?;
        out.entry(key.to_ascii_lowercase())
            .or_insert_with(|| v.to_string());
    }
    let mut total = 0;
    for (k, v) in &out {
        if k.len() > 246 {
            return Err(format!("key {k:?} is longer than 246 bytes"));
        }
        if !k
            .bytes()
            .chain(v.bytes())
            .all(|b| (0x20..0x7f).contains(&b))
        {
            return Err(format!("key {k:?} or its value is not printable ASCII"));
        }
        total += k.len() + v.len();
    }
    if total > 4096 {
        return Err("metadata is larger than 4096 bytes".into());
    }
    Ok(out)
}

/// Replace the file's `user.e2b.*` attributes with `metadata`.
pub(super) fn write_metadata(
    file: &std::fs::File,
    metadata: &BTreeMap<String, String>,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let mut names = vec![0u8; 8192];
    // SAFETY: valid fd and buffer.
    let n = unsafe { libc::flistxattr(fd, names.as_mut_ptr().cast(), names.len()) };
    if n > 0 {
        for name in names[..n as usize].split(|b| *b == 0) {
            if name.starts_with(b"user.e2b.")
                && let Ok(c) = std::ffi::CString::new(name)
            {
                // SAFETY: valid fd and NUL-terminated name.
                unsafe { libc::fremovexattr(fd, c.as_ptr()) };
            }
        }
    }
    for (k, v) in metadata {
        let c = std::ffi::CString::new(format!("user.e2b.{k}")).map_err(std::io::Error::other)?;
        // SAFETY: valid fd, name and value buffer.
        let rc = unsafe { libc::fsetxattr(fd, c.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
