//! The native spawn helper this build embeds (`helper/spawn_helper.rs`, built by
//! `build.rs`), if any: its bytes, base64 for the setup command, and its file name.

/// Name of the native helper in the helper directory.
pub(crate) const NATIVE_FILE: &str = "spawn";

/// The helper program, when `build.rs` could build it (Linux x86_64 `core` and a linker).
#[cfg(native_spawn_helper)]
const BYTES: Option<&[u8]> = Some(include_bytes!(concat!(env!("OUT_DIR"), "/spawn-helper")));
#[cfg(not(native_spawn_helper))]
const BYTES: Option<&[u8]> = None;

/// The helper as base64 (what the setup command decodes into place), or `""` when this
/// build has none.
pub(crate) fn helper_base64() -> &'static str {
    use base64::Engine as _;
    static TEXT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        BYTES
            .map(|b| base64::engine::general_purpose::STANDARD.encode(b))
            .unwrap_or_default()
    });
    TEXT.as_str()
}

/// True when this build embeds the native helper.
pub(crate) fn available() -> bool {
    BYTES.is_some()
}
